"""repens.pipeline.checks and the sampler checks of repens.pipeline.config: every bad setting stops the
workflow before any job starts, in one line naming the key, the file and line, or the
variable.

Unit tests on the pure functions first; the tests that start Snakemake (marked slow) run
it in a temporary working directory (``-d``) on a copy of config.yaml, as
tests/test_workflow.py does, and never let a job start.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from repens.pipeline.checks import (
    ENVIRONMENT,
    LARGEST_GPU_BYTES,
    CheckError,
    EnvError,
    blocked_folder,
    check_config_files,
    check_environment,
    check_labels,
    check_memory,
    check_output_folders,
    check_yaml_file,
    env_setting,
    label_problem,
    literal_folder,
    machine_memory_bytes,
    memory_estimate,
    missing_cluster_clients,
    parameter_count,
)
from repens.pipeline.config import (
    HMC_MIN_CHAINS,
    ConfigError,
    check_config,
    check_data_folders,
    coerce_numbers,
    hmc_setting_source,
    resolve_hmc_job,
    resolve_job,
)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())


def load_config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def one_line(message: str) -> bool:
    return "\n" not in message and message.strip() == message


def config_problem(config: dict) -> str | None:
    """The first schema error (``key: message``) or check_config's, as the workflow reports them."""
    coerce_numbers(config, SCHEMA)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(config))
    if error is not None:
        return f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
    try:
        check_config(config)
    except ConfigError as err:
        return str(err)
    return None


# ------------------------------------------------------------------ sampler settings
@pytest.mark.parametrize("where", ["hmc", "quick.hmc"])
def test_one_hmc_chain_is_rejected_naming_the_key(where):
    """One chain sampled to the end and then failed: 'R-hat needs at least 2 chains'."""
    config = load_config()
    block = config["experiments"]["toy"]
    for part in where.split("."):
        block = block[part]
    block["chains"] = 1
    problem = config_problem(config)
    assert problem is not None and problem.startswith(f"experiments.toy.{where}.chains:"), problem
    # the resolved check names the key too, whatever layer set it
    with pytest.raises(ConfigError, match=rf"^experiments\.toy\.{where}\.chains: 1 chain\(s\)"):
        check_config(config)


def test_too_few_kept_draws_are_rejected_naming_the_keys():
    config = load_config()
    config["experiments"]["toy"]["datasets"]["regression"]["hmc"] = {"samples": 6, "thin": 2}
    problem = config_problem(config)
    assert problem.startswith("experiments.toy.datasets.regression.hmc.samples / "), problem
    assert "keeps 3 draw(s) per chain" in problem and "at least 4" in problem, problem


def test_hmc_setting_source_follows_the_layers():
    config = dict(load_config(), scale="quick")
    assert hmc_setting_source(config, "toy", "classification", "chains") == "experiments.toy.quick.hmc.chains"
    assert hmc_setting_source(config, "toy", "classification", "samples") == "experiments.toy.quick.hmc.samples"
    paper = dict(config, scale="paper")
    assert hmc_setting_source(paper, "toy", "classification", "samples") == (
        "experiments.toy.datasets.classification.hmc.samples"
    )
    assert resolve_hmc_job(paper, "toy", "classification", 0)["hmc"]["chains"] >= HMC_MIN_CHAINS


def test_hmc_defaults_the_check_assumes_are_the_samplers():
    from repens.pipeline.config import _HMC_DEFAULTS
    from repens.training.hmc import HMCSettings

    defaults = HMCSettings()
    assert _HMC_DEFAULTS == {key: getattr(defaults, key) for key in _HMC_DEFAULTS}


# ------------------------------------------------------------------ labels
def test_label_that_is_not_mathtext_is_rejected_naming_the_key():
    """`$\\etaa$-SVGD` was accepted and failed at plot time, deleting the figures."""
    config = load_config()
    config["methods"]["svgd"]["label"] = r"$\etaa$-SVGD"
    with pytest.raises(CheckError, match=r"^methods\.svgd\.label: .*Unknown symbol: \\etaa") as err:
        check_labels(config)
    assert one_line(str(err.value))


@pytest.mark.parametrize("label", [r"$\eta$-SVGD", "Cost $5", r"a \$ and \$ b", "kde-WGD", r"$\mathrm{f}$-SVGD"])
def test_labels_matplotlib_draws_pass(label):
    assert label_problem(label) is None


def test_shipped_config_passes_every_load_check():
    config = load_config()
    check_config_files([ROOT / "config.yaml"])
    check_labels(config)
    assert config_problem(config) is None


# ------------------------------------------------------------------ memory
def test_memory_bound_of_absurd_sizes_is_absurd():
    """1e8 synthetic particles and 50,000 image particles started and failed to allocate."""
    config = dict(load_config(), scale="quick")
    synthetic = dict(resolve_job(config, "synthetic", "gaussian", "svgd", 0), particles=10**8)
    assert memory_estimate(synthetic).total > 2**50  # the n x n kernel alone: petabytes
    image = dict(resolve_job(config, "image", "fashionmnist", "de", 0), particles=50_000)
    estimate = memory_estimate(image)
    assert estimate.total > 100 * 2**30
    assert estimate.sizes.startswith("50,000 particles x 99,710 parameters, batch 256")
    with pytest.raises(CheckError) as err:
        check_memory(
            "job train_image results/image/fashionmnist/de/seed42/metrics.json",
            estimate,
            24 * 2**30,
            "this machine's memory",
            "particles 50000 (experiments.image.quick.settings.particles)",
        )
    message = str(err.value)
    assert one_line(message)
    assert "results/image/fashionmnist/de/seed42" in message and "experiments.image.quick.settings.particles" in message
    # on a GPU the network's part is the GPU's: no GPU holds it either
    with pytest.raises(CheckError, match="largest GPU"):
        check_memory(
            "job",
            estimate,
            24 * 2**30,
            "mem_mb",
            "particles",
            device_limit=LARGEST_GPU_BYTES,
            on_gpu=True,
            device_what="the largest GPU there is",
        )


def test_memory_bound_passes_the_shipped_config_and_bounds_a_measured_job():
    config = load_config()
    for scale in ("quick", "paper"):
        config["scale"] = scale
        for exp, spec in config["experiments"].items():
            for ds in spec["datasets"]:
                if ds == "mnist":
                    continue
                for method in spec["methods"]:
                    total = memory_estimate(resolve_job(config, exp, ds, method, 0)).total
                    assert total < (6 if scale == "quick" else 20) * 2**30, (scale, exp, ds, method)
            if exp == "toy":
                for ds in spec["datasets"]:
                    assert memory_estimate(resolve_hmc_job(config, exp, ds, 0)).total < 4000 * 2**20
    # paper-scale FashionMNIST SVGD on a CPU peaked at 1414.73 MB (reference/image/.../benchmark.tsv)
    measured = 1414.73 * 2**20
    bound = memory_estimate(resolve_job(config, "image", "fashionmnist", "svgd", 0)).total
    assert measured <= bound <= 1.5 * measured


@pytest.mark.parametrize(
    "spec",
    [
        {"experiment": "toy", "dataset": "regression", "hidden": [50, 50]},
        {"experiment": "toy", "dataset": "classification", "hidden": [50, 50]},
        {"experiment": "image", "dataset": "fashionmnist", "model": "mlp", "hidden": [100, 100, 100]},
        {"experiment": "image", "dataset": "cifar10", "model": "resnet", "depth": 32, "width": 16, "norm": "group"},
        {"experiment": "image", "dataset": "cifar10", "model": "resnet", "depth": 20, "width": 4, "norm": "none"},
        {"experiment": "uci", "dataset": "protein", "output_bias": False},
    ],
)
def test_parameter_count_is_the_models(spec):
    from repens.models.networks import build_model, mlp

    if spec["experiment"] == "image":
        shape = (1, 28, 28) if spec["dataset"] == "fashionmnist" else (3, 32, 32)
        net = build_model(spec, shape, 10)
    elif spec["experiment"] == "toy":
        d_in, d_out = (1, 1) if spec["dataset"] == "regression" else (2, 5)
        net = mlp(d_in, spec["hidden"], d_out)
    else:
        net = mlp(9, [100], 1, output_bias=False)
    assert parameter_count(spec) == sum(p.numel() for p in net.parameters())


def test_machine_memory_is_read():
    memory = machine_memory_bytes()
    assert memory is None or memory > 2**28


# ------------------------------------------------------------------ environment
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REPENS_CHECKPOINT_SECONDS", "abc"),
        ("REPENS_CHECKPOINT_SECONDS", "-5"),
        ("REPENS_CHECKPOINT_SECONDS", "nan"),
        ("REPENS_CHECKPOINT_SECONDS", "inf"),
        ("REPENS_CUDA_GRAPHS", "false"),
        ("REPENS_UCI_VERIFY", "False"),
        ("REPENS_OFFLINE", "no"),
        ("REPENS_UCI_DATA", "/no/such/folder"),
        ("REPENS_GIT_COMMIT", "two words"),
    ],
)
def test_bad_environment_value_is_one_line_naming_the_variable(name, value):
    with pytest.raises(EnvError) as err:
        env_setting(name, {name: value})
    message = str(err.value)
    assert one_line(message)
    assert message.startswith(f"environment variable {name}={value!r}: "), message
    with pytest.raises(EnvError):
        check_environment({name: value})


@pytest.mark.parametrize(
    ("name", "value", "setting"),
    [
        ("REPENS_CHECKPOINT_SECONDS", "60", 60.0),
        ("REPENS_CHECKPOINT_SECONDS", "1e3", 1000.0),
        ("REPENS_CUDA_GRAPHS", "0", False),
        ("REPENS_UCI_VERIFY", " no ", False),
        ("REPENS_OFFLINE", "1", True),
        ("REPENS_OFFLINE", "", False),
    ],
)
def test_good_environment_values_are_read(name, value, setting):
    assert env_setting(name, {name: value}) == setting


def test_every_variable_the_package_reads_is_checked():
    found = set()
    for path in (ROOT / "src" / "repens").rglob("*.py"):
        text = path.read_text()
        found |= set(re.findall(r"\bREPENS_[A-Z_]+\b", text))
    assert found - {"REPENS_SHARED_DATA"} <= set(ENVIRONMENT), found - set(ENVIRONMENT)
    assert all(env_setting(name, {}) == spec.default for name, spec in ENVIRONMENT.items())


def test_train_settings_name_a_bad_checkpoint_variable(monkeypatch):
    """REPENS_CHECKPOINT_SECONDS=abc was a traceback inside the job naming no variable."""
    from repens.training.train import TrainSettings

    monkeypatch.setenv("REPENS_CHECKPOINT_SECONDS", "abc")
    with pytest.raises(EnvError, match="REPENS_CHECKPOINT_SECONDS='abc'"):
        TrainSettings(steps=1, lr=0.1)
    monkeypatch.setenv("REPENS_CHECKPOINT_SECONDS", "42")
    assert TrainSettings(steps=1, lr=0.1).checkpoint_seconds == 42.0


def test_uci_data_variable_names_an_existing_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("REPENS_UCI_DATA", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"^uci_data: unset, and environment variable REPENS_UCI_DATA="):
        check_data_folders({})
    check_data_folders({"uci_data": str(tmp_path)})  # uci_data wins over the variable
    monkeypatch.setenv("REPENS_UCI_DATA", str(tmp_path))
    check_data_folders({})


# ------------------------------------------------------------------ YAML files
def test_key_written_twice_names_the_key_and_both_lines(tmp_path):
    """`scale:` twice was accepted, the last one winning."""
    path = tmp_path / "config.yaml"
    path.write_text("scale: quick\nseeds: [1]\nscale: paper\n")
    with pytest.raises(CheckError) as err:
        check_yaml_file(path)
    assert str(err.value) == (
        f"{path}:3:1: key scale is written twice (lines 1 and 3); YAML would keep the last one silently: keep one"
    )
    path.write_text("experiments:\n  toy:\n    hmc: {chains: 4, warmup: 1, chains: 8}\n")
    with pytest.raises(
        CheckError, match=r":3:33: key experiments\.toy\.hmc\.chains is written twice \(line 3, columns 11 and 33\)"
    ):
        check_yaml_file(path)


def test_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("base: &b {lr: 1, steps: 2}\nrun:\n  <<: *b\n  lr: 3\n")
    check_yaml_file(path)


def test_yaml_syntax_error_names_file_line_and_column(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("scale: quick\nseeds: [1, 2\nmethods: {}\n")
    with pytest.raises(CheckError) as err:
        check_yaml_file(path)
    message = str(err.value)
    assert one_line(message)
    assert message.startswith(f"{path}:3:8: YAML syntax error: "), message
    assert "line 2, column 8" in message


def test_config_files_are_checked_once_each(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("a: 1\n")
    bad.write_text("a: 1\na: 2\n")
    check_config_files([good, str(good), tmp_path / "absent.yaml"])
    with pytest.raises(CheckError, match="bad.yaml:2:1: key a is written twice"):
        check_config_files([good, bad])


# ------------------------------------------------------------------ output folders
def test_results_as_a_regular_file_is_one_line(tmp_path, monkeypatch):
    """`results` a regular file was a NotADirectoryError traceback."""
    monkeypatch.chdir(tmp_path)
    check_output_folders(["results", "results/figures", "logs/toy"])
    Path("results").write_text("")
    with pytest.raises(CheckError) as err:
        check_output_folders(["logs", "results/figures", "results"])
    assert (
        str(err.value) == "results is a regular file, but the workflow writes files under results/: move or remove it"
    )
    Path("logs").symlink_to(tmp_path / "gone")
    assert blocked_folder("logs/toy") == f"logs is a link to {tmp_path / 'gone'}, which does not exist"


def test_literal_folder_stops_at_the_first_wildcard():
    assert literal_folder("results/toy/{dataset}/hmc/seed{seed}/x.npz") == "results/toy"
    assert literal_folder("results/figures/fig1.png") == "results/figures"
    assert literal_folder("{root}/x") == ""


# ------------------------------------------------------------------ cluster clients
def test_slurm_without_its_clients_is_one_line():
    """`--profile slurm` without SLURM retried 'No such file or directory: sacct' three times."""
    message = missing_cluster_clients("slurm", which=lambda name: None)
    assert one_line(message) and "sbatch and sacct are not on PATH" in message
    assert missing_cluster_clients("slurm", which=lambda name: f"/usr/bin/{name}") is None
    assert missing_cluster_clients("local", which=lambda name: None) is None
    assert missing_cluster_clients(None) is None


# ------------------------------------------------------------------ Snakemake (slow)
def snakemake(
    workdir: Path, *args: str, config: str | None = None, env: dict | None = None, timeout: int = 180
) -> tuple[int, str]:
    """Snakemake on the checkout's Snakefile in ``workdir`` (config.yaml: ``config`` or the
    checkout's); (return code, output)."""
    (workdir / "config.yaml").write_text(config if config is not None else (ROOT / "config.yaml").read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, proc.stdout + proc.stderr


def stopped_with(out: str, message: str) -> None:
    """The run stopped before any job, with ``message`` as one line of its output."""
    assert any(line.startswith(message) for line in out.splitlines()), out
    assert "Traceback" not in out, out
    assert "rule train_" not in out and "Finished job" not in out, out


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_snakemake_stops_on_a_key_written_twice(tmp_path):
    text = (ROOT / "config.yaml").read_text() + "scale: paper\n"
    rc, out = snakemake(tmp_path, "-n", "results/figures/fig2_gaussian.png", config=text)
    assert rc != 0
    line = len(text.splitlines())
    stopped_with(out, f"config.yaml:{line}:1: key scale is written twice")
    extra = tmp_path / "extra.yaml"
    extra.write_text("seeds: [1]\nseeds: [2]\n")
    rc, out = snakemake(tmp_path, "-n", "results/figures/fig2_gaussian.png", "--configfile", str(extra))
    assert rc != 0
    stopped_with(out, f"{extra}:2:1: key seeds is written twice")


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_snakemake_stops_on_a_bad_label_and_one_chain(tmp_path):
    config = load_config()
    config["methods"]["svgd"]["label"] = r"$\etaa$-SVGD"
    rc, out = snakemake(tmp_path, "-n", "results/figures/fig2_gaussian.png", config=yaml.safe_dump(config))
    assert rc != 0
    stopped_with(out, "methods.svgd.label: ")
    config = load_config()
    config["experiments"]["toy"]["quick"]["hmc"]["chains"] = 1
    rc, out = snakemake(tmp_path, "-n", "results/figures/fig1_regression.png", config=yaml.safe_dump(config))
    assert rc != 0
    stopped_with(out, "config key experiments.toy.quick.hmc.chains: 1 is less than the minimum of 2")


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_snakemake_stops_on_a_bad_environment_variable_and_results_as_a_file(tmp_path):
    rc, out = snakemake(tmp_path, "-n", "results/figures/fig2_gaussian.png", env={"REPENS_CHECKPOINT_SECONDS": "abc"})
    assert rc != 0
    stopped_with(out, "environment variable REPENS_CHECKPOINT_SECONDS='abc': not a number")
    (tmp_path / "results").write_text("")
    rc, out = snakemake(tmp_path, "-n", "results/figures/fig2_gaussian.png")
    assert rc != 0
    stopped_with(out, "results is a regular file, but the workflow writes files under results/")


@pytest.mark.slow  # an end-to-end run stopped before its first job: second stage of .ci/run
def test_snakemake_stops_a_job_that_cannot_fit_in_memory(tmp_path):
    """50,000 image particles: no job starts (and no cost notice), one line naming the setting.
    Without the image data (REPENS_OFFLINE, tests/conftest.py) a run the check let through
    would stop at the data check, so no job can start either way."""
    config = load_config()
    config["experiments"]["image"]["quick"]["settings"]["particles"] = 50_000
    rc, out = snakemake(tmp_path, "-c1", "results/table1.tex", config=yaml.safe_dump(config))
    assert rc != 0
    stopped_with(out, "job train_image results/image/fashionmnist/")
    assert "particles 50000 (experiments.image.quick.settings.particles)" in out
    assert "NOTE: this run is about to start" not in out
    assert not (tmp_path / "results").exists()


SLURM_CLIENTS = ("sacct", "sbatch", "scancel", "scontrol", "sinfo", "squeue", "srun")


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
@pytest.mark.skipif(
    importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
    reason="snakemake-executor-plugin-slurm is not installed",
)
def test_snakemake_with_the_slurm_profile_and_no_slurm_is_one_line(tmp_path):
    """A real (not dry) run with --profile slurm where no SLURM client is on PATH."""
    folders = []
    for i, entry in enumerate(os.environ["PATH"].split(os.pathsep)):
        folder = Path(entry or ".")
        if not any((folder / name).exists() for name in SLURM_CLIENTS):
            folders.append(entry)
            continue
        copy = tmp_path / f"path-{i}"
        copy.mkdir()
        for item in folder.iterdir():
            if item.name not in SLURM_CLIENTS:
                (copy / item.name).symlink_to(item)
        folders.append(str(copy))
    path = os.pathsep.join(folders)
    assert all(shutil.which(name, path=path) is None for name in SLURM_CLIENTS)
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm", "-d", str(work), "results/figures/fig2_gaussian.png"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**env, "PATH": path},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    stopped_with(out, "executor slurm (--profile slurm or --executor slurm) runs sbatch and sacct")
    assert "No such file or directory" not in out


def _rebuild_jobs(workdir: Path, runs: list[str]) -> set[str]:
    """The rules a dry run of ``rebuild`` from a made-up reference tree holding ``runs``
    (paths below the tree; empty files) would run, and the figures (file stems) they draw."""
    tree = workdir / "tree"
    for run in runs:
        (tree / run).parent.mkdir(parents=True, exist_ok=True)
        (tree / run).write_bytes(b"")
    rc, out = snakemake(
        workdir, "-n", "rebuild", "--config", "scale=paper", "from_reference=true", f"reference={tree}", timeout=300
    )
    assert rc == 0, out
    rules = set(re.findall(r"^(?:local)?rule (\w+):", out, flags=re.M))
    return rules | set(re.findall(r"^\s+output: results/figures/(\w+)\.png", out, flags=re.M))


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_a_rebuild_makes_a_toy_figure_and_table_only_for_data_sets_whose_method_runs_the_tree_holds(tmp_path):
    hmc = [f"toy/{d}/hmc/seed{s}/predictions.npz" for d in ("regression", "classification") for s in (38, 42)]
    # the campaign runs the HMC references first: alone they make no toy figure or table
    jobs = _rebuild_jobs(tmp_path / "refs", hmc)
    assert not jobs & {"summarize_toy", "plot_toy_figure"}, jobs
    # one method's runs of the regression: its figure and the distance table, not the classification's
    jobs = _rebuild_jobs(tmp_path / "one", [*hmc, *(f"toy/regression/de/seed{s}/predictions.npz" for s in (38, 42))])
    assert {"summarize_toy", "plot_toy_figure", "fig1_regression"} <= jobs and "fig3_classification" not in jobs, jobs
