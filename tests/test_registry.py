"""repens.core.registry: the update rules, estimators, spaces and data sets, declared once; the
schema, the jobs, the option checks and the method groups read them from there."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repens.core import registry
from repens.core.registry import register_rule, unregister_rule
from repens.jobs.job import Job, SpecError
from repens.jobs.rule_options import ESTIMATOR_OPTIONS, FUNCTION_SPACE, RULE_OPTIONS, options_of
from repens.pipeline.config import (
    EXPERIMENTS,
    ConfigError,
    check_config,
    check_schema,
    load_schema,
    method_groups,
    resolve_job,
)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def load_config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def raw_schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


@pytest.fixture
def toy_rule():
    """A rule registered by this test alone (one decorator on its builder), removed after it."""

    @register_rule("toyrule", options={"temperature"}, repulsive=True)
    def toyrule(posterior, temperature=1.0, **common):
        return ("built", posterior, temperature, common)

    try:
        yield toyrule
    finally:
        unregister_rule("toyrule")
    assert "toyrule" not in registry.RULES


def _with_toy_method(config: dict, entry: dict | None = None) -> dict:
    config = copy.deepcopy(config)
    config["methods"]["toy-method"] = entry or {"rule": "toyrule", "temperature": 0.5, "label": "Toy"}
    config["experiments"]["toy"]["methods"].append("toy-method")
    return config


# ------------------------------------------------------------------ one module adds a rule
def test_a_registered_rule_passes_the_schema(toy_rule):
    config = _with_toy_method(load_config())
    check_schema(config, raw_schema())  # the workflow passes the schema file as read
    assert "toyrule" in load_schema()["$defs"]["method"]["properties"]["rule"]["enum"]


def test_an_unregistered_rule_fails_the_schema():
    config = _with_toy_method(load_config())
    with pytest.raises(ConfigError, match=r"^methods\.toy-method\.rule: 'toyrule' is not one of \['ensemble', "):
        check_schema(config, raw_schema())


def test_a_registered_rule_is_a_job_rule(toy_rule):
    spec = {
        "experiment": "toy",
        "dataset": "regression",
        "method": "toy-method",
        "seed": 1,
        "rule": "toyrule",
        "temperature": 0.5,
        "particles": 2,
        "steps": 3,
        "lr": 0.1,
    }
    job = Job.from_spec(spec)
    assert job.rule == "toyrule" and job.rule_options() == {"temperature": 0.5}
    with pytest.raises(SpecError, match="has no function-space form"):
        Job.from_spec({**spec, "space": "function"})


def test_an_unregistered_rule_is_no_job_rule():
    spec = {
        "experiment": "toy",
        "dataset": "regression",
        "method": "m",
        "seed": 1,
        "rule": "toyrule",
        "particles": 2,
        "steps": 3,
        "lr": 0.1,
    }
    with pytest.raises(
        SpecError,
        match=r"setting 'rule': unknown rule 'toyrule'; known: \['ensemble', 'svgd', "
        r"'wgd', 'anchored', 'langevin'\]",
    ):
        Job.from_spec(spec)


def test_a_registered_rule_has_its_options_checked(toy_rule):
    assert options_of("toyrule") == {"temperature"}
    assert RULE_OPTIONS["toyrule"] == {"temperature"} and "toyrule" not in FUNCTION_SPACE
    config = load_config()
    check_config(_with_toy_method(config))
    spec = resolve_job(_with_toy_method(config), "toy", "regression", "toy-method", 42)
    assert Job.from_spec(spec).rule_options() == {"temperature": 0.5}
    with pytest.raises(ConfigError, match=r"methods\.toy-method\.eta: option not used by rule 'toyrule'"):
        check_config(_with_toy_method(config, {"rule": "toyrule", "eta": 0.1}))


def test_a_registered_rule_joins_its_method_group(toy_rule):
    groups = method_groups(_with_toy_method(load_config()))
    assert groups.weight_space[-1] == "toy-method"
    assert "toy-method" not in groups.function_space + groups.wgd + groups.fwgd


def test_a_registered_rule_is_built_by_its_builder(toy_rule):
    pytest.importorskip("torch")
    from repens.methods.rule import build, builder

    assert builder("toyrule") is toy_rule
    assert build("toyrule", "weight", "post", temperature=2.0, lr=0.1) == ("built", "post", 2.0, {"lr": 0.1})
    with pytest.raises(ValueError, match="no function-space form"):
        builder("toyrule", "function")


# ------------------------------------------------------------------ declared once
def test_the_schema_file_declares_no_rule_space_or_estimator_names():
    props = raw_schema()["$defs"]["method"]["properties"]
    for key, names in (
        ("rule", registry.rule_names()),
        ("space", registry.SPACES),
        ("estimator", registry.estimator_names()),
    ):
        assert "enum" not in props[key], key
        assert load_schema()["$defs"]["method"]["properties"][key]["enum"] == list(names), key


def test_the_registry_is_what_the_modules_read():
    from repens.data.uci_files import UCI_DATASETS, UCI_FOLDERS

    assert registry.rule_names() == ("ensemble", "svgd", "wgd", "anchored", "langevin")
    assert dict(RULE_OPTIONS) == {
        "ensemble": set(),
        "anchored": {"anchor_divisor"},
        "svgd": {"repulsion_scale"},
        "wgd": {"estimator"},
        "langevin": {"temperature", "mmd_weight", "prior_samples"},
    }
    assert set(FUNCTION_SPACE) == {"svgd", "wgd"}
    assert registry.function_space_rules() == {"svgd": "fsvgd", "wgd": "fwgd"}
    assert dict(ESTIMATOR_OPTIONS) == {"kde": set(), "sge": {"eta"}, "ssge": {"eta", "num_eigs"}}
    assert UCI_FOLDERS == {
        "boston": "bostonHousing",
        "concrete": "concrete",
        "energy": "energy",
        "kin8nm": "kin8nm",
        "naval": "naval-propulsion-plant",
        "power": "power-plant",
        "protein": "protein-tertiary-structure",
        "wine": "wine-quality-red",
        "yacht": "yacht",
    }
    assert UCI_DATASETS == tuple(UCI_FOLDERS.values())


def test_experiments_train_on_the_registrys_datasets():
    assert EXPERIMENTS["synthetic"].datasets == {"gaussian", "funnel"}
    assert EXPERIMENTS["toy"].datasets == {"regression", "classification"}
    assert EXPERIMENTS["image"].datasets == {"fashionmnist", "mnist", "cifar10"}
    assert EXPERIMENTS["image"].ood_only == {"svhn"}
    assert EXPERIMENTS["image"].shapes == {
        "fashionmnist": (1, 28, 28),
        "mnist": (1, 28, 28),
        "cifar10": (3, 32, 32),
        "svhn": (3, 32, 32),
    }
    assert EXPERIMENTS["uci"].datasets == set(registry.uci_datasets())


def test_the_image_data_sets_are_the_registrys():
    pytest.importorskip("numpy")
    from repens.data.images import IMAGE_DATASETS

    assert tuple(IMAGE_DATASETS) == registry.image_datasets()


def test_the_runners_datasets_are_the_registrys():
    pytest.importorskip("torch")
    from repens.data.toy import TOY_DATASETS
    from repens.models.targets import TARGETS

    assert set(TOY_DATASETS) == set(registry.datasets_of("toy"))
    assert set(TARGETS) == set(registry.datasets_of("synthetic"))


def test_dataset_labels_and_ood_sets():
    """What the reports show (report.uci / report.image label tables) and the OOD set each
    image data set is tested on in config.yaml."""
    assert {d: registry.dataset_label(d) for d in registry.uci_datasets()} == {
        "boston": "Boston",
        "concrete": "Concrete",
        "energy": "Energy",
        "kin8nm": "Kin8nm",
        "naval": "Naval",
        "power": "Power",
        "protein": "Protein",
        "wine": "Wine",
        "yacht": "Yacht",
    }
    assert {d: registry.dataset_label(d) for d in registry.image_datasets()} == {
        "fashionmnist": "FashionMNIST",
        "cifar10": "CIFAR10",
        "mnist": "MNIST",
        "svhn": "SVHN",
    }
    assert registry.dataset_label("unknown") == "unknown" and registry.ood_of("unknown") is None
    assert {d: registry.ood_label(d) for d in ("fashionmnist", "cifar10", "mnist")} == {
        "fashionmnist": "MNIST",
        "cifar10": "SVHN",
        "mnist": "?",
    }  # report.image OOD_LABELS
    assert {d: registry.dataset_label(d, short=True) for d in ("fashionmnist", "cifar10")} == {
        "fashionmnist": "FMNIST",
        "cifar10": "CIFAR10",
    }  # report.evidence DATASET_LABELS
    assert registry.datasets_of("toy") == ("regression", "classification")  # report.toy DATASETS
    config = load_config()
    image = config["experiments"]["image"]["datasets"]
    for name, entry in image.items():
        assert registry.ood_of(name) == entry["ood"], name
    assert {d: registry.ood_of(d) for d in ("fashionmnist", "cifar10")} == {"fashionmnist": "mnist", "cifar10": "svhn"}
    assert registry.uci_datasets() == (
        "boston",
        "concrete",
        "energy",
        "kin8nm",
        "naval",
        "power",
        "protein",
        "wine",
        "yacht",
    )
    with pytest.raises(ValueError, match="unknown data set 'nope'"):
        registry.dataset("nope")


# ------------------------------------------------------------------ method groups
def test_method_groups_of_the_shipped_config():
    """The groups the claims compare, as they were written out by hand: same members, same order."""
    groups = method_groups(load_config())
    assert groups.weight_space == ("de", "svgd", "kde-wgd", "sge-wgd", "ssge-wgd")
    assert groups.function_space == ("fsvgd", "kde-fwgd", "sge-fwgd", "ssge-fwgd")
    assert groups.wgd == ("kde-wgd", "sge-wgd", "ssge-wgd")
    assert groups.fwgd == ("kde-fwgd", "sge-fwgd", "ssge-fwgd")
    assert groups.counterparts == (("kde-wgd", "kde-fwgd"), ("sge-wgd", "sge-fwgd"), ("ssge-wgd", "ssge-fwgd"))


def test_a_method_added_to_the_config_joins_its_groups():
    config = load_config()
    config["methods"]["ridge-wgd"] = {"rule": "wgd", "estimator": "sge", "eta": 0.1}
    config["methods"]["ridge-fwgd"] = {"rule": "wgd", "space": "function", "estimator": "sge", "eta": 0.1}
    config["methods"]["fsvgd-gp"] = {"rule": "svgd", "space": "function", "function_prior": "gp"}
    groups = method_groups(config)
    assert groups.weight_space[-1] == "ridge-wgd" and groups.wgd[-1] == "ridge-wgd"
    assert groups.function_space[-2:] == ("ridge-fwgd", "fsvgd-gp") and groups.fwgd[-1] == "ridge-fwgd"
    assert groups.counterparts[-1] == ("ridge-wgd", "ridge-fwgd")
    assert ("sge-wgd", "sge-fwgd") in groups.counterparts  # eta 0.01 pairs with eta 0.01 only
    assert len(groups.counterparts) == 4


def test_non_repulsive_rules_stay_out_of_the_groups():
    groups = method_groups(load_config())
    every = set(groups.weight_space + groups.function_space)
    assert not every & {"anchored", "dle", "drle", "hyper-de", "de-code-init"}


# ------------------------------------------------------------------ planning stays light
def test_the_registry_imports_neither_torch_nor_numpy():
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'src')!r}); import repens.core.registry, "
        "repens.jobs.rule_options, repens.jobs.job, repens.pipeline.config, repens.data.uci_files; "
        "print(' '.join(sys.modules))"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert not loaded & {"torch", "numpy"}


def test_a_rule_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        register_rule("svgd", lambda posterior, **options: None)
    with pytest.raises(ValueError, match="function-space form needs its builder"):
        register_rule("half", lambda posterior, **options: None, function_space="fhalf")
    assert "half" not in registry.RULES


# ------------------------------------------------------------------ declared by the rules' modules
def test_each_rule_is_declared_by_its_module_and_read_without_importing_it(tmp_path):
    """The registry's rules are the ``REGISTRY_ENTRY`` literals of repens/methods/rules/*.py,
    in their order; a module without one (a helper) declares nothing."""
    assert [(r.name, r.module) for r in registry.declared_rules()] == [
        ("ensemble", "ensemble"),
        ("svgd", "svgd"),
        ("wgd", "wgd"),
        ("anchored", "anchored"),
        ("langevin", "langevin"),
    ]
    (tmp_path / "zeta.py").write_text('import torch\nREGISTRY_ENTRY = {"name": "zeta", "options": ["eta"]}\n')
    (tmp_path / "alpha.py").write_text('REGISTRY_ENTRY = {"name": "alpha", "order": 1, "repulsive": True}\n')
    (tmp_path / "helper.py").write_text("import torch\n")
    (tmp_path / "_private.py").write_text('REGISTRY_ENTRY = {"name": "private"}\n')
    found = registry.declared_rules(tmp_path)
    assert [(r.name, r.module, r.options, r.repulsive) for r in found] == [
        ("alpha", "alpha", frozenset(), True),
        ("zeta", "zeta", frozenset({"eta"}), False),
    ]
    (tmp_path / "bad.py").write_text('REGISTRY_ENTRY = {"name": "bad", "strength": 1}\n')
    with pytest.raises(ValueError, match="takes only"):
        registry.declared_rules(tmp_path)
