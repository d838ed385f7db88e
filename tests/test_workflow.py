"""The Snakemake workflow: its DAG (dry runs), lint, formatting and rerun triggers.

Snakemake runs in a temporary working directory (``-d``) holding a copy of
config.yaml, so results already built in the checkout do not change what these
tests see, and the tests write nothing into the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repens.core.variants import dataset_methods, expand_variants

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC_METHODS = ["svgd", "kde-wgd", "sge-wgd", "ssge-wgd"]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
expand_variants(CONFIG)  # as the workflow reads it: a variant's methods are methods


def image_methods(dataset: str = "fashionmnist") -> list[str]:
    """Table 1's methods on ``dataset`` (a variant's only on its data sets)."""
    return dataset_methods(CONFIG, "image", dataset)


def snakemake(workdir: Path, *args: str, config: dict | None = None, timeout: int = 180):
    """Run Snakemake on the checkout's Snakefile in ``workdir``; return (rc, output)."""
    if config is None:
        config = yaml.safe_load((ROOT / "config.yaml").read_text())
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout + proc.stderr


def jobs(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: rule -> count."""
    table = output.split("Job stats:", 1)[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def test_dry_run_figure2(tmp_path):
    rc, out = snakemake(tmp_path, "-n", "results/figures/fig2_gaussian.png")
    assert rc == 0, out
    assert jobs(out) == {"train_synthetic": 4, "plot_synthetic_figure": 1}
    trained = re.findall(r"wildcards: target=gaussian, method=([\w-]+), seed=42", out)
    assert sorted(trained) == sorted(SYNTHETIC_METHODS)
    # figure panels in config order, first seed
    panels = re.search(r"synthetic-figure --target gaussian .*", out)[0]
    assert [m for m in re.findall(r"gaussian/([\w-]+)/seed42/particles\.npz", panels)] == SYNTHETIC_METHODS
    assert not (tmp_path / "results").exists()


def test_dry_run_default_target(tmp_path):
    rc, out = snakemake(tmp_path, "-n")
    assert rc == 0, out
    toy_methods = len(CONFIG["experiments"]["toy"]["methods"])
    assert jobs(out) == {
        "train_synthetic": 8,
        "summarize_synthetic": 1,
        "plot_synthetic_figure": 2,
        "train_toy": 2 * toy_methods,
        "sample_hmc": 2,
        "plot_toy_figure": 2,
        "summarize_toy": 1,
        "prepare_images": 2,
        "train_image": len(image_methods()) * len(CONFIG["seeds"]),
        "summarize_image": 1,
        "check_convergence": 1,
        "plot_training_curves": 1,
        "summarize_claims": 1,
        "plot_claim_evidence": 1,
        "write_claims_page": 1,
        "all": 1,
    }
    assert "results/toy/distance_to_hmc.csv" in out
    for name in ("fig2_gaussian", "figF1_funnel", "fig1_regression", "fig3_classification"):
        for ext in ("png", "pdf"):
            assert f"results/figures/{name}.{ext}" in out
    assert "results/synthetic/metrics.csv" in out and "results/synthetic/metrics.tex" in out


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_dry_run_table1_builds_exactly_what_it_needs(tmp_path):
    rc, out = snakemake(tmp_path, "-n", "results/table1.tex")
    assert rc == 0, out
    methods = image_methods()
    assert jobs(out) == {"prepare_images": 2, "train_image": len(methods) * 5, "summarize_image": 1}
    trained = set(re.findall(r"wildcards: dataset=(\w+), method=([\w-]+), seed=(\d+)", out))
    assert trained == {("fashionmnist", m, str(s)) for m in methods for s in range(38, 43)}
    # paper scale adds the CIFAR-10 block (and its data)
    rc, out = snakemake(tmp_path, "-n", "results/table1.tex", "--config", "scale=paper")
    assert rc == 0, out
    both = len(methods) + len(image_methods("cifar10"))
    assert jobs(out)["train_image"] == both * 5 and jobs(out)["prepare_images"] == 4


def _image_plan(output: str) -> list[tuple[str, str]]:
    """(spec, resources line) of every train_image job of a dry run with -p."""
    found = []
    for block in re.split(r"^rule ", output, flags=re.M)[1:]:
        if block.startswith("train_image:"):
            found.append(
                (re.search(r"train --spec '(\{.*?\})'", block)[1], re.search(r"^\s+resources: (.*)$", block, re.M)[1])
            )
    return found


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_sharing_a_gpu_changes_no_job(tmp_path):
    """k image jobs on one GPU (`--resources gpu_share=100` and a smaller share
    per job) schedule differently and run the same jobs: the share is no part of a spec."""
    plans = {}
    for name, args in (
        ("default", ()),
        ("one GPU", ("--resources", "gpu_share=100")),
        ("four per GPU", ("--resources", "gpu_share=100", "--set-resources", "train_image:gpu_share=25")),
    ):
        rc, out = snakemake(tmp_path, "-n", "-p", "results/table1.tex", *args)
        assert rc == 0, out
        plans[name] = _image_plan(out)
    assert len(plans["default"]) == len(image_methods()) * len(CONFIG["seeds"])
    shares = {name: {re.search(r"\bgpu_share=(\d+)", line)[1] for _, line in plan} for name, plan in plans.items()}
    assert shares == {"default": {"100"}, "one GPU": {"100"}, "four per GPU": {"25"}}
    specs = {name: sorted(spec for spec, _ in plan) for name, plan in plans.items()}
    assert specs["default"] == specs["one GPU"] == specs["four per GPU"]
    assert not any("share" in spec for spec in specs["default"])


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_claim_scorecard_reads_table2_but_never_trains_it(tmp_path):
    """The scorecard takes the tables of `all`; Table 2 is read if present."""
    rc, out = snakemake(tmp_path, "-n", "-p", "results/claims.csv")
    assert rc == 0, out
    planned = jobs(out)
    assert planned["summarize_claims"] == 1 and "train_uci" not in planned and "summarize_uci" not in planned
    assert {"summarize_synthetic", "summarize_toy", "summarize_image"} <= set(planned)
    assert "--uci results/table2_uci.csv" in out


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_claim_scorecard_without_building_table1_trains_no_image_job(tmp_path):
    """claims_build_table1=false: the paper-scale scorecard of a machine without a GPU
    reads Table 1 if it is there and never trains it."""
    rc, out = snakemake(
        tmp_path, "-n", "-p", "results/claims.csv", "--config", "scale=paper", "claims_build_table1=false"
    )
    assert rc == 0, out
    planned = jobs(out)
    assert planned["summarize_claims"] == 1 and "summarize_toy" in planned
    assert not {"train_image", "prepare_images", "summarize_image"} & set(planned)
    assert "--table1 results/table1.csv" in out
    rc, out = snakemake(tmp_path, "-n", "results/claims.csv", "--config", "scale=paper")
    assert rc == 0, out
    assert {"train_image", "summarize_image"} <= set(jobs(out))


def test_dry_run_specs_follow_scale(tmp_path):
    rc, out = snakemake(tmp_path, "-n", "-p", "--config", "scale=paper")
    assert rc == 0, out
    assert '"steps": 5000' in out and '"steps": 2000' in out and '"particles": 500' in out
    assert '"scale": "paper"' in out and '"scale": "quick"' not in out


def test_lint_is_clean(tmp_path):
    rc, out = snakemake(tmp_path, "--lint")
    assert rc == 0, out
    assert "Congratulations, your workflow is in a good condition!" in out, out
    assert "Lints for" not in out, out


def test_snakefmt_check():
    files = [str(ROOT / "Snakefile"), str(ROOT / "workflow" / "rules")]
    proc = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", *files], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # an end-to-end run: second stage of .ci/run
def test_changed_settings_rerun_exactly_the_affected_jobs(tmp_path):
    """A tiny real run; then a changed scale or setting reruns only those jobs."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    exp = config["experiments"]["synthetic"]
    exp["methods"] = ["svgd", "kde-wgd"]
    exp["quick"] = {"settings": {"steps": 3, "log_every": 1}, "datasets": {"funnel": {"particles": 8}}}
    exp["datasets"]["gaussian"]["particles"] = 8
    gaussian = [f"results/synthetic/gaussian/{m}/seed42/particles.npz" for m in exp["methods"]]
    rc, out = snakemake(tmp_path, "-c2", *gaussian, config=config)
    assert rc == 0, out
    for path in gaussian:
        assert (tmp_path / path).is_file()
    assert (tmp_path / "logs/synthetic/gaussian/svgd/seed42.log").is_file()
    assert (tmp_path / "results/synthetic/gaussian/svgd/seed42/benchmark.tsv").is_file()

    rc, out = snakemake(tmp_path, "-n", *gaussian, config=config)
    assert rc == 0 and "Nothing to be done" in out, out

    rc, out = snakemake(tmp_path, "-n", *gaussian, "--config", "scale=paper", config=config)
    assert rc == 0, out
    assert jobs(out) == {"train_synthetic": 2}, out
    assert "params" in out.lower()

    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["experiments"]["synthetic"]["method_settings"] = {"kde-wgd": {"lr": 0.05}}
    rc, out = snakemake(tmp_path, "-n", *gaussian, config=changed)
    assert rc == 0, out
    assert jobs(out) == {"train_synthetic": 1}, out
    assert "method=kde-wgd" in out and "method=svgd" not in out


@pytest.mark.parametrize("name", ["synthetic_figure.rst", "toy_figure.rst", "synthetic_metrics.rst", "workflow.rst"])
def test_report_captions_exist(name):
    assert (ROOT / "workflow" / "report" / name).read_text().strip()


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_every_table_rule_writes_html_for_the_report(tmp_path):
    """Each table rule writes .tex, .csv and the .html the report shows; PNG
    only for Table 1."""
    rc, out = snakemake(tmp_path, "-n", "all", "results/table2_uci.tex")
    assert rc == 0, out
    for stem in ("synthetic/metrics", "toy/distance_to_hmc", "table1", "table2_uci"):
        for ext in ("tex", "csv", "html"):
            assert f"results/{stem}.{ext}" in out, (stem, ext)
    assert "results/table1_vs_paper.html" in out and "results/table2_vs_seeds.html" in out
    assert "results/table1.png" in out and "table2_uci.png" not in out


# ---------------------------------------------------------------------------
# A newcomer's first run: data problems found before any job, no retraining for where
# the data came from, config labels in every report.

SHARED = Path(os.environ.get("REPENS_SHARED_DATA", ROOT.parent / "shared" / "data"))
REPORT_RULES = [
    "summarize_synthetic",
    "plot_synthetic_figure",
    "plot_toy_figure",
    "summarize_toy",
    "summarize_image",
    "summarize_uci",
    "summarize_claims",
]


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_fresh_clone_without_network_stops_before_any_job(tmp_path):
    """No data, no mirror, no network ($REPENS_OFFLINE, tests/conftest.py): the plain
    `snakemake -c2` stops before its first job with every missing file and the fix."""
    rc, out = snakemake(tmp_path, "-c2")
    assert rc != 0, out
    assert "data not available for fashionmnist, mnist" in out, out
    assert "nothing was run" in out
    for name in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        assert f"data/images/FashionMNIST/raw/{name}" in out and f"data/images/MNIST/raw/{name}" in out
    assert "curl -fL --create-dirs -o data/images/FashionMNIST/raw/train-images-idx3-ubyte.gz http" in out
    assert "snakemake -c2 --config image_data_mirror=/path/to/copy" in out
    # not one job started: no job wrote a log or a result
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()
    # the same with targets: the fix repeats them, --config after the targets
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["image_data_download"] = False
    rc, out = snakemake(tmp_path, "-c2", "results/table1.tex", config=config)
    assert rc != 0 and "image_data_download is false" in out, out
    assert "snakemake -c2 results/table1.tex --config image_data_mirror=/path/to/copy" in out
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_data_needed_by_no_target_does_not_stop_the_run(tmp_path):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["experiments"]["synthetic"]["methods"] = ["svgd"]
    config["experiments"]["synthetic"]["quick"]["datasets"]["gaussian"] = {"steps": 5, "particles": 10}
    target = "results/synthetic/gaussian/svgd/seed42/particles.npz"
    rc, out = snakemake(tmp_path, "-c1", target, config=config)
    assert rc == 0, out
    assert (tmp_path / target).is_file()


@pytest.mark.skipif(
    not (SHARED / "FashionMNIST" / "raw").is_dir() or not (SHARED / "MNIST" / "raw").is_dir(),
    reason="no shared copy of FashionMNIST/MNIST",
)
@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_mirror_is_not_a_reason_to_rerun(tmp_path):
    """Data prepared from a mirror: dropping the mirror plans nothing for the data rule,
    and Table 1 plans its trainings and the table only."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    data = ["data/images/fashionmnist.npz", "data/images/mnist.npz"]
    rc, out = snakemake(tmp_path, "-c2", *data, config={**config, "image_data_mirror": str(SHARED)}, timeout=300)
    assert rc == 0, out
    rc, out = snakemake(tmp_path, "-n", *data, config=config)
    assert rc == 0 and "Nothing to be done" in out, out
    rc, out = snakemake(tmp_path, "-n", "results/table1.tex", config=config)
    assert rc == 0, out
    assert "prepare_images" not in jobs(out), out
    assert jobs(out)["train_image"] == len(image_methods()) * len(config["seeds"])
    # an other mirror, or downloads switched off: still nothing to do for the data
    rc, out = snakemake(
        tmp_path, "-n", *data, config={**config, "image_data_mirror": str(tmp_path), "image_data_download": False}
    )
    assert rc == 0 and "Nothing to be done" in out, out


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_every_report_rule_passes_the_config_labels(tmp_path):
    """A label set in config.yaml reaches every figure and table rule (--labels); the
    report functions show it (tests/report/test_labels.py)."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["methods"]["svgd"]["label"] = "Zeta SVGD"
    rc, out = snakemake(tmp_path, "-n", "-p", "all", "results/table2_uci.tex", config=config)
    assert rc == 0, out
    blocks = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m:
            blocks[m[1]] = block
    for rule in REPORT_RULES:
        assert rule in blocks, rule
        assert "--labels" in blocks[rule] and '"svgd": "Zeta SVGD"' in blocks[rule], blocks[rule]


@pytest.mark.skipif(
    not (SHARED / "uci" / "yacht" / "data" / "data.txt").is_file(), reason="no shared copy of UCI yacht"
)
@pytest.mark.slow  # an end-to-end run: second stage of .ci/run
def test_runtime_settings_never_retrain_and_result_settings_always_do(tmp_path):
    """A tiny real run of synthetic and UCI jobs; then another log_every, checkpoint_seconds,
    method label or UCI data folder (a copy of the same files) plans no training job (a
    label re-renders the figures only), while another learning rate plans every one."""
    import shutil

    for root in ("uci-a", "uci-b"):
        shutil.copytree(SHARED / "uci" / "yacht", tmp_path / root / "yacht")
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["uci_data"] = str(tmp_path / "uci-a")
    synthetic, uci = config["experiments"]["synthetic"], config["experiments"]["uci"]
    synthetic["methods"] = ["svgd", "kde-wgd"]
    synthetic["quick"] = {"settings": {"steps": 3, "log_every": 1}, "datasets": {"funnel": {"particles": 8}}}
    synthetic["datasets"]["gaussian"]["particles"] = 8
    uci["methods"] = ["de"]
    uci["quick"]["settings"] = {**uci["quick"].get("settings", {}), "splits": 1, "steps": 20, "log_every": 5}
    trained = [f"results/synthetic/gaussian/{m}/seed42/particles.npz" for m in synthetic["methods"]]
    trained.append("results/uci/yacht/de/seed42/metrics.json")
    rc, out = snakemake(tmp_path, "-c2", *trained, "results/figures/fig2_gaussian.png", config=config, timeout=600)
    assert rc == 0, out
    assert jobs(out)["train_synthetic"] == 2 and jobs(out)["train_uci"] == 1, out

    def changed(edit) -> dict:
        other = yaml.safe_load(yaml.safe_dump(config))
        edit(other)
        return other

    def runtime_only(other):
        other["experiments"]["synthetic"]["quick"]["settings"].update(log_every=2, checkpoint_seconds=7)
        other["experiments"]["uci"]["quick"]["settings"].update(log_every=2, checkpoint_seconds=7)
        other["methods"]["svgd"]["label"] = "plain SVGD"
        other["uci_data"] = str(tmp_path / "uci-b")

    rc, out = snakemake(tmp_path, "-n", *trained, "results/figures/fig2_gaussian.png", config=changed(runtime_only))
    assert rc == 0, out
    planned = jobs(out) if "Job stats:" in out else {}
    assert not any(rule.startswith("train_") for rule in planned), out
    assert planned.get("plot_synthetic_figure", 0) <= 1, out  # the new label re-renders the figure only

    def new_lr(other):
        for name in ("svgd", "kde-wgd"):
            other["experiments"]["synthetic"].setdefault("method_settings", {}).setdefault(name, {})["lr"] = 0.123
        other["experiments"]["uci"]["quick"]["settings"]["lr"] = 0.0123

    rc, out = snakemake(tmp_path, "-n", *trained, config=changed(new_lr))
    assert rc == 0, out
    assert jobs(out) == {"train_synthetic": 2, "train_uci": 1}, out
