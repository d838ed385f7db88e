"""config.yaml, its JSON schema and repens.pipeline.config: checked before any job runs."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from repens.core.variants import expand_variants
from repens.pipeline.config import (
    EXPERIMENTS,
    SEED_RANGE,
    ConfigError,
    check_config,
    check_data_folders,
    coerce_numbers,
    experiment_seeds,
    method_label,
    resolve_job,
)
from repens.pipeline.config import load_schema as repens_load_schema

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config.yaml"
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def load_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def load_schema() -> dict:
    """The schema with the registry's choices filled in, as the workflow checks a config."""
    return repens_load_schema(SCHEMA)


def validate_like_snakemake(config: dict) -> dict:
    """snakemake.utils.validate: the same schema, Draft 2020-12, defaults filled in."""
    from snakemake.utils import validate

    validate(config, str(SCHEMA))
    return config


def problems(config: dict) -> list[str]:
    """Every schema error as ``key.path: message``, then check_config's error, if any
    (after numbers spelled as strings are read as numbers, as the workflow does)."""
    coerce_numbers(config, load_schema())
    validator = jsonschema.Draft202012Validator(load_schema())
    found = [f"{'.'.join(str(p) for p in err.absolute_path)}: {err.message}" for err in validator.iter_errors(config)]
    if not found:
        try:
            check_config(config)
        except ConfigError as err:
            found.append(str(err))
    return found


def test_schema_is_valid_draft_2020_12():
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_rejects_unknown_keys_everywhere():
    """Every object in the schema says additionalProperties: false."""

    def objects(node, where="schema"):
        if isinstance(node, dict):
            if node.get("type") == "object":
                yield where, node
            for key, value in node.items():
                yield from objects(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from objects(value, f"{where}[{i}]")

    found = list(objects(load_schema()))
    assert len(found) >= 6
    for where, node in found:
        assert node.get("additionalProperties") is False, where


def test_shipped_config_passes():
    config = load_config()
    assert problems(config) == []
    validate_like_snakemake(config)
    check_config(config)


def test_schema_fills_defaults():
    config = load_config()
    del config["scale"], config["device"]
    validate_like_snakemake(config)
    assert config["scale"] == "quick"
    assert config["device"] == "auto"
    assert config["methods"]["svgd"]["space"] == "weight"
    assert config["methods"]["fsvgd"]["space"] == "function"


def test_shipped_config_matches_appendix_g1():
    config = load_config()
    assert config["scale"] == "quick"
    assert config["seeds"] == [38, 39, 40, 41, 42]
    assert config["experiments"]["synthetic"]["methods"] == ["svgd", "kde-wgd", "sge-wgd", "ssge-wgd"]
    assert experiment_seeds(config, "synthetic") == [42]
    # the toys: Table 1's five seeds at paper scale, one at quick scale (the quick block's)
    assert sorted(experiment_seeds(dict(config, scale="paper"), "toy")) == [38, 39, 40, 41, 42]
    assert experiment_seeds(config, "toy") == [42]
    assert method_label(config, "kde-wgd") == "kde-WGD"
    paper = dict(config, scale="paper")
    gauss = resolve_job(paper, "synthetic", "gaussian", "svgd", 42)
    assert (gauss["particles"], gauss["steps"], gauss["lr"], gauss["bandwidth"]) == (100, 5000, 0.1, "median")
    assert gauss["init_std"] ** 2 == pytest.approx(3.0)
    funnel = resolve_job(paper, "synthetic", "funnel", "ssge-wgd", 42)
    assert (funnel["particles"], funnel["steps"], funnel["bandwidth"]) == (500, 2000, 0.5)
    assert funnel["estimator"] == "ssge" and funnel["num_eigs"] is None


def _set(path: str, value):
    """A mutation of the config: set the dotted ``path`` to ``value``."""

    def mutate(config):
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


def _rename(path: str, old: str, new: str):
    def mutate(config):
        node = config
        for key in path.split("."):
            node = node[key]
        node[new] = node.pop(old)

    return mutate


# (mutation, text the message must contain: the offending key)
BAD = {
    "unknown method in an experiment": (
        _set("experiments.synthetic.methods", ["svgd", "kde-wdg"]),
        "experiments.synthetic.methods[1]",
    ),
    "misspelled setting": (
        _rename("experiments.synthetic.datasets.gaussian", "steps", "stpes"),
        "stpes",
    ),
    "misspelled quick setting": (
        _rename("experiments.synthetic.quick.datasets.funnel", "particles", "particle"),
        "particle",
    ),
    "misspelled method key": (_set("methods.svgd.lable", "SVGD"), "lable"),
    "misspelled top-level key": (_set("seed", [1]), "seed"),
    "string for a number (method)": (_set("methods.svgd.lr", "abc"), "methods.svgd.lr"),
    "string for a number (settings)": (
        _set("experiments.synthetic.settings.lr", "0.1x"),
        "experiments.synthetic.settings.lr",
    ),
    "string for an integer": (
        _set("experiments.synthetic.datasets.funnel.particles", "many"),
        "experiments.synthetic.datasets.funnel.particles",
    ),
    "float for an integer": (
        _set("experiments.synthetic.datasets.funnel.steps", 10.5),
        "experiments.synthetic.datasets.funnel.steps",
    ),
    "bad bandwidth": (
        _set("experiments.synthetic.datasets.gaussian.bandwidth", "mean"),
        "experiments.synthetic.datasets.gaussian.bandwidth",
    ),
    "negative lr": (_set("experiments.synthetic.settings.lr", -0.1), "experiments.synthetic.settings.lr"),
    "empty seed list": (_set("seeds", []), "seeds"),
    "empty experiment seed list": (_set("experiments.synthetic.seeds", []), "experiments.synthetic.seeds"),
    "string seed": (_set("seeds", ["forty-two"]), "seeds.0"),
    "repeated seed": (_set("seeds", [42, 42]), "seeds[1]"),
    "repeated experiment seed": (_set("experiments.toy.seeds", [1, 2, 1]), "experiments.toy.seeds[2]"),
    "repeated quick seed": (_set("experiments.toy.quick.seeds", [42, 42]), "experiments.toy.quick.seeds[1]"),
    "seed beyond the generator": (_set("seeds", [2**64]), "seeds[0]"),
    "negative seed": (_set("seeds", [-1]), "seeds[0]"),
    "nan learning rate": (_set("experiments.synthetic.settings.lr", float("nan")), "experiments.synthetic.settings.lr"),
    "infinite learning rate": (_set("methods.de.lr", float("inf")), "methods.de.lr"),
    "nan spelled as YAML": (
        _set("experiments.toy.datasets.regression.lr", ".nan"),
        "experiments.toy.datasets.regression.lr",
    ),
    "mmd_weight for svgd through method_settings": (
        _set("experiments.synthetic.method_settings", {"svgd": {"mmd_weight": 1.0}}),
        "experiments.synthetic.method_settings.svgd.mmd_weight",
    ),
    "eta for DE on one dataset": (
        _set("experiments.image.datasets.fashionmnist.method_settings", {"de": {"eta": 0.1}}),
        "experiments.image.datasets.fashionmnist.method_settings.de.eta",
    ),
    "option no method of the experiment takes": (
        _set("experiments.synthetic.settings.temperature", 1.0),
        "experiments.synthetic.settings.temperature",
    ),
    "setting the experiment does not read": (
        _set("experiments.synthetic.settings.batch_size", 32),
        "experiments.synthetic.settings.batch_size",
    ),
    "hyper-de without a validation split": (
        _set("experiments.synthetic.methods", ["svgd", "hyper-de"]),
        "validation split",
    ),
    "function-space rule without a network": (
        _set("experiments.synthetic.methods", ["svgd", "fsvgd"]),
        "needs a network",
    ),
    "search_top above search_trials": (_set("methods.hyper-de.search_top", 50), "search_top=50"),
    "reversed l2_range": (_set("methods.hyper-de.l2_range", [10.0, 0.1]), "l2_range"),
    "unknown OOD data set": (_set("experiments.image.datasets.fashionmnist.ood", "notmnist"), "ood 'notmnist'"),
    "OOD data set of another shape": (_set("experiments.image.datasets.fashionmnist.ood", "svhn"), "ood 'svhn'"),
    "misspelled synthetic target": (
        _set("experiments.synthetic.datasets.gausian", {"particles": 10, "steps": 10, "bandwidth": "median"}),
        "experiments.synthetic.datasets.gausian",
    ),
    "unknown UCI data set": (_set("experiments.uci.datasets.bostn", {"lr": 0.1}), "experiments.uci.datasets.bostn"),
    "a job without a learning rate": (
        lambda c: c["experiments"]["synthetic"]["settings"].pop("lr"),
        "'lr'",
    ),
    "unknown rule": (_set("methods.svgd.rule", "svgdd"), "methods.svgd.rule"),
    "unknown estimator": (_set("methods.kde-wgd.estimator", "kdee"), "methods.kde-wgd.estimator"),
    "unknown space": (_set("methods.fsvgd.space", "functional"), "methods.fsvgd.space"),
    "unknown optimizer": (_set("experiments.synthetic.settings.optimizer", "adamw"), "optimizer"),
    "unknown step-size rule": (_set("experiments.toy.method_settings.dle.step_size", "auto"), "step_size"),
    "curvature fraction where ULA is unstable": (
        _set("experiments.uci.method_settings.drle.curvature_fraction", 2.0),
        "curvature_fraction",
    ),
    "unknown scale": (_set("scale", "full"), "scale"),
    "method name not wildcard-safe": (_set("methods.Kde_WGD", {"rule": "svgd"}), "Kde_WGD"),
    "wgd without estimator": (
        lambda c: c["methods"]["kde-wgd"].pop("estimator"),
        "methods.kde-wgd.estimator",
    ),
    "option the rule ignores": (_set("methods.svgd.eta", 0.1), "methods.svgd.eta"),
    "dataset patch for no dataset": (
        _set("experiments.synthetic.quick.datasets.gausian", {"steps": 10}),
        "gausian",
    ),
    "NUTS tree depth (the sampler is batched static HMC)": (
        _set("experiments.toy.hmc.max_tree_depth", 10),
        "max_tree_depth",
    ),
    "non-positive HMC trajectory length": (
        _set("experiments.toy.hmc.trajectory_length", 0),
        "experiments.toy.hmc.trajectory_length",
    ),
    "HMC mass adaptation not a boolean": (
        _set("experiments.toy.hmc.adapt_mass", "sometimes"),
        "experiments.toy.hmc.adapt_mass",
    ),
    "method settings for a method not run": (
        _set("experiments.synthetic.method_settings", {"dee": {"lr": 0.1}}),
        "experiments.synthetic.method_settings.dee",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_is_rejected_naming_the_key(case):
    mutate, key = BAD[case]
    config = load_config()
    mutate(config)
    found = problems(config)
    assert found, f"{case}: accepted"
    assert any(key in message for message in found), found


def _layered_config():
    config = load_config()
    exp = config["experiments"]["synthetic"]
    exp["method_settings"] = {"svgd": {"steps": 7, "lr": 0.5}}
    exp["quick"]["method_settings"] = {"svgd": {"steps": 3}}
    exp["quick"]["settings"] = {"lr": 0.2}
    assert problems(config) == []
    return config


def test_resolve_job_quick_patches_paper():
    config = load_config()
    quick = resolve_job(config, "synthetic", "gaussian", "kde-wgd", 42)
    paper = resolve_job(dict(config, scale="paper"), "synthetic", "gaussian", "kde-wgd", 42)
    assert paper["steps"] == 5000 and quick["steps"] == 2000
    assert quick["particles"] == paper["particles"] == 100
    assert quick["scale"] == "quick" and paper["scale"] == "paper"
    funnel = resolve_job(config, "synthetic", "funnel", "svgd", 42)
    assert (funnel["particles"], funnel["steps"], funnel["lr"], funnel["bandwidth"]) == (250, 1000, 0.1, 0.5)


def test_resolve_job_layer_order():
    config = _layered_config()
    paper = dict(config, scale="paper")
    # method_settings wins over datasets and settings
    job = resolve_job(paper, "synthetic", "gaussian", "svgd", 42)
    assert (job["steps"], job["lr"]) == (7, 0.5)
    assert resolve_job(paper, "synthetic", "gaussian", "kde-wgd", 42)["steps"] == 5000
    # quick layers win over all paper layers; quick.method_settings over quick.datasets
    job = resolve_job(config, "synthetic", "gaussian", "svgd", 42)
    assert (job["steps"], job["lr"]) == (3, 0.2)
    job = resolve_job(config, "synthetic", "gaussian", "kde-wgd", 42)
    assert (job["steps"], job["lr"]) == (2000, 0.2)
    assert job["rule"] == "wgd" and job["estimator"] == "kde" and "label" not in job


def test_resolve_job_does_not_mutate_config():
    config = load_config()
    before = copy.deepcopy(config)
    resolve_job(config, "synthetic", "funnel", "sge-wgd", 42)
    assert config == before


@pytest.mark.parametrize(
    ("case", "key"),
    [
        ("misspelled setting", "stpes"),
        ("string for a number (method)", "lr"),
        ("empty seed list", "seeds"),
        ("unknown method in an experiment", "experiments.synthetic.methods[1]"),
        ("unknown estimator", "estimator"),
    ],
)
def test_snakemake_stops_before_any_job(tmp_path, case, key):
    """A real (not dry) run on a bad config fails at parse time, naming the key."""
    mutate, _ = BAD[case]
    config = load_config()
    mutate(config)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path), "-c1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert key in output, output
    assert not (tmp_path / "results").exists()
    assert not (tmp_path / "logs").exists()


def test_shipped_config_matches_appendix_g4_g5():
    paper = dict(load_config(), scale="paper")
    lr = {m: resolve_job(paper, "image", "fashionmnist", m, 38)["lr"] for m in paper["experiments"]["image"]["methods"]}
    assert {m for m, v in lr.items() if v == 0.001} == {"kde-wgd", "sge-wgd", "ssge-wgd"}
    assert all(lr[m] == 0.0025 for m in ("de", "svgd", "fsvgd", "kde-fwgd", "sge-fwgd", "ssge-fwgd"))
    fm = resolve_job(paper, "image", "fashionmnist", "de", 38)
    assert (fm["particles"], fm["steps"], fm["batch_size"], fm["prior_std"], fm["init"]) == (
        50,
        50000,
        256,
        1.0,
        "prior",
    )
    assert fm["hidden"] == [100, 100, 100] and fm["ood"] == "mnist"
    cifar = {m: resolve_job(paper, "image", "cifar10", m, 38) for m in ("de", "svgd", "kde-wgd", "fsvgd", "ssge-fwgd")}
    assert [cifar[m]["lr"] for m in ("de", "svgd", "kde-wgd")] == [0.0005] * 3
    assert [cifar[m]["lr"] for m in ("fsvgd", "ssge-fwgd")] == [0.00025] * 2
    c = cifar["de"]
    assert (c["particles"], c["steps"], c["batch_size"], c["depth"], c["init"]) == (20, 50000, 128, 32, "he")
    assert c["prior_std"] ** 2 == pytest.approx(0.1)
    hyper = resolve_job(paper, "image", "fashionmnist", "hyper-de", 38)
    assert hyper["l2_search"] and hyper["l2_range"] == [0.001, 1000.0] and hyper["search_top"] == 5


def test_dataset_method_settings_layer_and_report_datasets():
    from repens.pipeline.config import report_datasets

    config = load_config()
    exp = config["experiments"]["image"]
    exp["datasets"]["fashionmnist"]["method_settings"]["de"] = {"lr": 0.123}
    exp["method_settings"] = {"de": {"lr": 0.5, "steps": 9}}
    paper = dict(config, scale="paper")
    job = resolve_job(paper, "image", "fashionmnist", "de", 38)
    assert (job["lr"], job["steps"]) == (0.123, 9) and "method_settings" not in job
    assert resolve_job(paper, "image", "cifar10", "de", 38)["lr"] == 0.5
    assert report_datasets(paper, "image") == ["fashionmnist", "cifar10"]
    assert report_datasets(config, "image") == ["fashionmnist"]
    exp["datasets"]["fashionmnist"]["method_settings"]["nope"] = {"lr": 1.0}
    with pytest.raises(ConfigError, match="datasets.fashionmnist.method_settings.nope"):
        check_config(config)
    del exp["datasets"]["fashionmnist"]["method_settings"]["nope"]
    exp["report_datasets"] = ["imagenet"]
    with pytest.raises(ConfigError, match="report_datasets"):
        check_config(config)


# ------------------------------------------------------- numbers whatever their spelling
@pytest.mark.parametrize("spelling", ["1e-3", "1E-3", ".001", "0.001", "1.0e-3", "+1e-3"])
def test_learning_rate_spellings_are_numbers(spelling):
    text = CONFIG.read_text().replace("settings: {lr: 0.1,", f"settings: {{lr: {spelling},", 1)
    assert text != CONFIG.read_text()
    config = yaml.safe_load(text)
    assert problems(config) == []
    assert config["experiments"]["synthetic"]["settings"]["lr"] == 0.001
    assert isinstance(config["experiments"]["synthetic"]["settings"]["lr"], float)


def test_integer_settings_accept_integral_exponent_spelling():
    config = load_config()
    config["experiments"]["synthetic"]["datasets"]["gaussian"]["steps"] = "5e3"
    assert problems(config) == []
    assert config["experiments"]["synthetic"]["datasets"]["gaussian"]["steps"] == 5000


def test_strings_the_schema_allows_are_kept():
    config = load_config()
    config["experiments"]["synthetic"]["datasets"]["funnel"]["bandwidth"] = "median"
    config["methods"]["svgd"]["label"] = "1e-3"  # a label may look like a number
    assert problems(config) == []
    assert config["methods"]["svgd"]["label"] == "1e-3"
    assert config["experiments"]["synthetic"]["datasets"]["funnel"]["bandwidth"] == "median"


def test_command_line_style_strings_become_numbers_lists_and_nulls():
    # what Snakemake's --config hands over: nested values and list items as strings
    config = load_config()
    config["seeds"] = ["1", "2"]
    config["methods"]["ssge-wgd"]["num_eigs"] = "null"
    config["experiments"]["toy"]["datasets"]["regression"]["noise_std"] = "0.25"
    config["methods"]["hyper-de"]["l2_range"] = ["1e-2", "1e2"]
    assert problems(config) == []
    assert config["seeds"] == [1, 2]
    assert config["methods"]["ssge-wgd"]["num_eigs"] is None
    assert config["experiments"]["toy"]["datasets"]["regression"]["noise_std"] == 0.25
    assert config["methods"]["hyper-de"]["l2_range"] == [0.01, 100.0]


def test_seed_range_bounds_are_accepted():
    config = load_config()
    config["seeds"] = list(SEED_RANGE)
    assert problems(config) == []


def test_missing_data_folder_is_named(tmp_path):
    missing = tmp_path / "no-such-mirror"
    with pytest.raises(ConfigError, match=f"image_data_mirror: folder {missing} does not exist"):
        check_data_folders({"image_data_mirror": str(missing)})
    with pytest.raises(ConfigError, match="uci_data: folder"):
        check_data_folders({"uci_data": str(missing)})
    check_data_folders({"image_data_mirror": str(tmp_path), "uci_data": None})


def test_experiment_capabilities_match_the_runners():
    """config.py keeps torch out of the workflow's load; its tables must match the code."""
    from repens.data.images import IMAGE_DATASETS
    from repens.data.toy import TOY_DATASETS
    from repens.data.uci import UCI_FOLDERS
    from repens.experiments import RUNNERS
    from repens.models.targets import TARGETS

    assert set(EXPERIMENTS) == set(RUNNERS)
    assert EXPERIMENTS["synthetic"].datasets == set(TARGETS)
    assert EXPERIMENTS["toy"].datasets == set(TOY_DATASETS)
    assert EXPERIMENTS["uci"].datasets == set(UCI_FOLDERS)
    image = EXPERIMENTS["image"]
    assert image.datasets | image.ood_only == set(IMAGE_DATASETS) == set(image.shapes)
    for name, dataset in IMAGE_DATASETS.items():
        assert ("train" in dataset.splits) == (name in image.datasets), name


@pytest.mark.parametrize(
    ("override", "expect"),
    [("seeds=[1,2]", None), ("seeds=[7,7]", "seeds[1]: seed 7 is repeated")],
)
def test_command_line_overrides_are_read_as_yaml(tmp_path, override, expect):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "-d",
            str(tmp_path),
            "-n",
            "--configfile",
            str(CONFIG),
            "--config",
            override,
            "--",
            "results/figures/fig2_gaussian.png",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    if expect is None:
        assert proc.returncode == 0, output
    else:
        assert proc.returncode != 0 and expect in output, output


def test_langevin_methods_run_as_ula_with_a_measured_mmd_weight():
    """DLE / DRLE sample only as ULA (tests/test_langevin.py): SGD at the curvature step on the
    toy and UCI experiments, and DRLE's lambda set per dataset (lambda = 1 is negligible next to
    a likelihood of scale N / sigma^2; config.yaml says how each was measured)."""
    config = load_config()
    for scale in ("paper", "quick"):
        config["scale"] = scale
        for exp in ("toy", "uci"):
            for ds in config["experiments"][exp]["datasets"]:
                for method in ("dle", "drle"):
                    job = resolve_job(config, exp, ds, method, 42)
                    assert job["optimizer"] == "sgd" and job["step_size"] == "curvature", (exp, ds, method)
                    assert job["curvature_fraction"] <= 0.18  # ULA's variance within 10 %
                assert resolve_job(config, exp, ds, "drle", 42)["mmd_weight"] >= 1e4, (exp, ds)


def test_hmc_reference_settings():
    """The paper-scale reference is checked at Vehtari et al. (2021)'s thresholds; every
    key of the hmc blocks is a field of HMCSettings; a learnt (null) trajectory length passes."""
    from repens.pipeline.config import resolve_hmc_job
    from repens.training.hmc import HMCSettings

    config = load_config()
    for scale in ("paper", "quick"):
        for dataset in ("regression", "classification"):
            job = resolve_hmc_job(dict(config, scale=scale), "toy", dataset, 42)
            settings = HMCSettings.from_dict(job["hmc"])
            if scale == "paper":
                assert (settings.rhat_max, settings.ess_min) == (1.01, 400)
                assert settings.chains >= 4
    config["experiments"]["toy"]["hmc"]["trajectory_length"] = None
    assert problems(config) == []


def test_dataset_hmc_patch_reaches_only_the_hmc_job():
    """``datasets.<name>.hmc`` patches that dataset's HMC reference, after the experiment's
    hmc block and before the quick one; training jobs never see it (their keys stay put)."""
    from repens.pipeline.config import resolve_hmc_job

    config = load_config()
    toy = config["experiments"]["toy"]
    toy["datasets"]["regression"]["hmc"] = {"samples": 77, "chains": 5}
    toy["quick"]["datasets"]["regression"]["hmc"] = {"chains": 3}
    assert problems(config) == []
    paper, quick = dict(config, scale="paper"), dict(config, scale="quick")
    assert resolve_hmc_job(paper, "toy", "regression", 42)["hmc"]["samples"] == 77
    assert resolve_hmc_job(paper, "toy", "regression", 42)["hmc"]["chains"] == 5
    assert resolve_hmc_job(quick, "toy", "regression", 42)["hmc"]["chains"] == 3
    assert resolve_hmc_job(quick, "toy", "regression", 42)["hmc"]["samples"] == toy["quick"]["hmc"]["samples"]
    assert resolve_hmc_job(paper, "toy", "classification", 42)["hmc"]["chains"] == toy["hmc"]["chains"]
    for scale in (paper, quick):
        job = resolve_job(scale, "toy", "regression", "de", 42)
        assert "hmc" not in job
        assert job == resolve_job(
            dict(
                scale,
                experiments={
                    **config["experiments"],
                    "toy": {
                        **toy,
                        "datasets": {
                            **toy["datasets"],
                            "regression": {k: v for k, v in toy["datasets"]["regression"].items() if k != "hmc"},
                        },
                    },
                },
            ),
            "toy",
            "regression",
            "de",
            42,
        )
    toy["datasets"]["regression"]["hmc"] = {"max_tree_depth": 10}
    assert any("max_tree_depth" in p for p in problems(config))


def test_paper_row_names_another_method_and_never_reaches_a_job():
    """``paper_row`` is display only: the job (and so its key) is the same with or without
    it; a paper_row naming no method, or the method itself, is refused naming the key."""
    config = load_config()
    expand_variants(config)  # de-code-protocol: the deep ensemble's code-protocol variant
    job = resolve_job(dict(config, scale="paper"), "image", "fashionmnist", "de-code-protocol", 38)
    assert config["methods"]["de-code-protocol"]["paper_row"] == "de" and "paper_row" not in job
    for bad in ("nope", "de-code-protocol"):
        broken = copy.deepcopy(config)
        broken["methods"]["de-code-protocol"]["paper_row"] = bad
        with pytest.raises(ConfigError, match=f"methods.de-code-protocol.paper_row: '{bad}' is not another method"):
            check_config(broken)


@pytest.mark.parametrize("scale", ["quick", "paper"])
@pytest.mark.parametrize("trim", [False, True], ids=["as-shipped", "defaults-left-out"])
def test_one_schema_pass_fills_the_defaults_snakemakes_validate_fills(scale, trim):
    """The workflow checks its config once: check_schema with ``fill_defaults`` gives the
    config snakemake.utils.validate gave after it, key for key."""
    from repens.pipeline.config import check_schema

    config = {**load_config(), "scale": scale}
    if trim:  # every top-level key the schema gives a default, and a method's space
        for key, spec in yaml.safe_load(SCHEMA.read_text())["properties"].items():
            if "default" in spec:
                config.pop(key, None)
        config["methods"]["svgd"].pop("space", None)
    ours, theirs = copy.deepcopy(config), copy.deepcopy(config)
    check_schema(ours, yaml.safe_load(SCHEMA.read_text()), fill_defaults=True)
    check_schema(theirs, yaml.safe_load(SCHEMA.read_text()))
    assert ours != theirs  # the defaults are missing before they are filled
    assert ours == validate_like_snakemake(theirs)
