"""repens.jobs.job: a job's typed settings, tied to the config schema and to resolve_job."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
from pathlib import Path
from typing import Literal, Union, get_args, get_origin

import pytest
import yaml

from repens.core.jobkey import job_key
from repens.jobs.job import (
    JOB_TYPES,
    NOT_SETTINGS,
    RULE_FIELDS,
    WORKFLOW_ONLY,
    HMCJob,
    ImageJob,
    ImageNetwork,
    Job,
    SpecError,
    SyntheticJob,
    ToyJob,
    ToyNetwork,
    UCIJob,
    UCINetwork,
    _hints,
    default_of,
    settings_of,
)
from repens.jobs.rule_options import ESTIMATOR_OPTIONS, RULE_OPTIONS
from repens.pipeline.config import EXPERIMENTS, METHOD_KEYS, load_schema, method_options, resolve_hmc_job, resolve_job

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
DEFS = SCHEMA["$defs"]
#: the schema's layers that hold one job's settings (a method entry, settings, a dataset's)
LAYERS = ("method", "settings", "dataset_settings")
ALL_CLASSES = (*JOB_TYPES.values(), HMCJob, ToyNetwork, UCINetwork, ImageNetwork)


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        node = DEFS[node["$ref"].removeprefix("#/$defs/")]
    return node


def schema_settings() -> dict[str, dict]:
    """Every key a settings layer of the schema allows, with its (resolved) schema."""
    found: dict[str, dict] = {}
    for layer in LAYERS:
        for key, node in DEFS[layer]["properties"].items():
            found.setdefault(key, {}).update(_resolve(node))
    return found


def _json_types(node: dict) -> set[str]:
    node = _resolve(node)
    kind = node.get("type", [])
    found = {kind} if isinstance(kind, str) else set(kind)
    for arm in node.get("anyOf", []):
        found |= _json_types(arm)
    return found


def _annotation_types(kind) -> set[str]:
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        return set().union(*(_annotation_types(a) for a in get_args(kind)))
    if origin is Literal:
        return {"string"}
    if origin in (tuple, list):
        return {"array"}
    if origin is dict:
        return {"object"}
    return {int: {"integer"}, float: {"number"}, bool: {"boolean"}, str: {"string"}, type(None): {"null"}}[kind]


def _choices(node: dict) -> set[str] | None:
    """The strings the schema allows for a key (enum or const), or None if any string goes."""
    node = _resolve(node)
    if "enum" in node:
        return set(node["enum"])
    if "const" in node:
        return {node["const"]}
    arms = [_choices(a) for a in node.get("anyOf", [])]
    arms = [a for a in arms if a is not None]
    return set().union(*arms) if arms else None


def _literal(kind) -> set[str] | None:
    if get_origin(kind) is Literal:
        return set(get_args(kind))
    if get_origin(kind) in (Union, types.UnionType):
        found = [_literal(a) for a in get_args(kind)]
        found = [f for f in found if f is not None]
        return set().union(*found) if found else None
    return None


def classes_with(name: str) -> list[type]:
    return [cls for cls in JOB_TYPES.values() if name in cls.setting_names()]


# ------------------------------------------------------------------ the schema
def test_every_schema_setting_is_a_job_field_and_back():
    """What a settings layer may hold reaches a job as a field, and a job has no field the
    config cannot set (but the few NOT_SETTINGS, and what only the workflow reads)."""
    # a dataset's `hmc` patches its experiment's hmc block: it reaches the HMC reference's
    # job as part of its `hmc` field (resolve_hmc_job), never a training job
    assert "hmc" in HMCJob.setting_names() and "hmc" in schema_settings()
    from_schema = set(schema_settings()) - WORKFLOW_ONLY - {"hmc"}
    fields = set().union(*(settings_of(cls) for cls in JOB_TYPES.values()))
    assert from_schema - fields == set(), "schema keys that are no field of any job class"
    assert fields - from_schema == set(), "job fields the schema does not allow"
    assert WORKFLOW_ONLY <= set(schema_settings())  # still there, else drop them from the list
    assert set(METHOD_KEYS) == set(RULE_FIELDS) <= settings_of(Job)


def test_each_experiment_reads_its_class_fields():
    """check_config's table of what each runner reads is its class; a setting a class needs
    (no default) is one the config must give."""
    assert set(JOB_TYPES) == set(EXPERIMENTS)
    for name, cls in JOB_TYPES.items():
        caps = EXPERIMENTS[name]
        assert cls.EXPERIMENT == name
        assert caps.settings <= settings_of(cls), name
        needed = set(cls.required_names()) - NOT_SETTINGS - set(RULE_FIELDS)
        assert needed <= caps.required, (name, needed - caps.required)


def test_the_runners_are_the_job_classes_experiments():
    from repens.experiments import RUNNERS

    assert set(RUNNERS) == set(JOB_TYPES)


def test_field_types_match_the_schema():
    """integer/number/array/string/boolean agree; a null the schema allows the field takes
    (a field may also take None where the schema has no null: None is 'unset, the default')."""
    schema = schema_settings()
    for key, node in schema.items():
        if key in WORKFLOW_ONLY:
            continue
        want = _json_types(node)
        for cls in classes_with(key):
            have = _annotation_types(_hints(cls)[key])
            assert have - {"null"} == want - {"null"}, (cls.__name__, key, have, want)
            assert "null" not in want or "null" in have, (cls.__name__, key)


def test_field_choices_match_the_schema():
    schema = schema_settings()
    checked = set()
    for key, node in schema.items():
        choices = _choices(node)
        for cls in classes_with(key):
            assert _literal(_hints(cls)[key]) == choices, (cls.__name__, key)
            checked.add(key)
    assert {"rule", "space", "estimator", "optimizer", "bandwidth", "model", "norm", "init", "normalize"} <= checked
    assert set(get_args(_hints(Job)["rule"])) == set(RULE_OPTIONS)
    assert _literal(_hints(Job)["estimator"]) == set(ESTIMATOR_OPTIONS)


def test_defaults_agree_with_the_schema():
    """Where the schema states a default (snakemake's validate fills it in), the field's is the same."""
    stated = 0
    for layer in LAYERS:
        for key, node in DEFS[layer]["properties"].items():
            for where in (node, _resolve(node)):
                if "default" in where:
                    stated += 1
                    for cls in classes_with(key):
                        assert default_of(cls, key) == where["default"], (cls.__name__, key)
    assert stated >= 1  # space: weight


def test_hmc_block_is_hmc_settings():
    from repens.experiments.hmc import _DTYPES
    from repens.training.hmc import HMCSettings

    assert set(DEFS["hmc"]["properties"]) == {f.name for f in dataclasses.fields(HMCSettings)}
    assert set(get_args(_hints(HMCJob)["dtype"])) == set(_DTYPES)
    assert settings_of(HMCJob) == settings_of(ToyNetwork) | {"hmc", "dtype", "threads"}


def test_network_choices_are_the_builders():
    from repens.models.networks import MODELS

    assert set(get_args(_hints(ImageNetwork)["model"])) == set(MODELS)


def test_every_field_has_a_one_line_doc():
    for cls in ALL_CLASSES:
        lines = inspect.getsource(cls).splitlines()
        own = {f for f, kind in cls.__annotations__.items() if not str(kind).startswith("ClassVar")}
        for i, line in enumerate(lines):
            m = re.match(r"    (\w+): ", line)
            if m and m.group(1) in own:
                assert lines[i - 1].strip().startswith("#:"), (cls.__name__, m.group(1))


# ------------------------------------------------------------------ every job of config.yaml
def resolved_jobs():
    for scale in ("quick", "paper"):
        config = dict(CONFIG, scale=scale)
        for exp, spec in CONFIG["experiments"].items():
            seed = spec.get("seeds", CONFIG["seeds"])[0]
            for ds in spec["datasets"]:
                for method in spec["methods"]:
                    yield resolve_job(config, exp, ds, method, seed)


def test_every_resolved_job_round_trips():
    jobs = list(resolved_jobs())
    assert len(jobs) > 100
    for spec in jobs:
        job = Job.from_spec(spec)
        assert type(job) is JOB_TYPES[spec["experiment"]]
        assert job.to_spec() == spec and job.to_spec() is not job.spec
        assert Job.from_spec(job.to_spec()) == job
        assert Job.from_spec(json.loads(json.dumps(spec))) == job  # as the CLI reads --spec
        # the key is the one the runners computed from the dict: checkpoints stay valid
        assert job.key() == job_key(spec) and job.key("splits", [0, 1]) == job_key(spec, "splits", [0, 1])
        assert job.rule_options() == method_options(spec) == method_options(job)
        for name in job.setting_names():
            if name not in spec:
                assert getattr(job, name) == default_of(type(job), name)


def test_every_hmc_job_round_trips():
    for scale in ("quick", "paper"):
        for ds in CONFIG["experiments"]["toy"]["datasets"]:
            spec = resolve_hmc_job(dict(CONFIG, scale=scale), "toy", ds, 42)
            job = HMCJob.from_spec(spec)
            assert job.to_spec() == spec and job.key() == job_key(spec)
            toy = CONFIG["experiments"]["toy"]
            # the experiment's block, then the dataset's patch, then (quick) the quick block's
            expected = toy["hmc"] | toy["datasets"][ds].get("hmc", {})
            if scale == "quick":
                expected |= toy["quick"]["hmc"] | toy["quick"].get("datasets", {}).get(ds, {}).get("hmc", {})
            assert job.hmc == expected


# ------------------------------------------------------------------ from_spec
def toy_spec(**changes):
    spec = resolve_job(dict(CONFIG, scale="quick"), "toy", "regression", "drle", 42)
    spec.update(changes)
    return spec


def test_defaults_are_filled_once():
    spec = {
        "experiment": "toy",
        "dataset": "regression",
        "method": "de",
        "seed": 1,
        "rule": "ensemble",
        "particles": 3,
        "steps": 40,
        "lr": 0.01,
    }
    job = Job.from_spec(spec)
    assert (job.batch_size, job.hidden, job.prior_std, job.noise_std) == (64, (50, 50), 1.0, 0.5)
    assert (job.optimizer, job.bandwidth, job.space, job.log_interval(40)) == ("adam", "median", "weight", 2)
    assert job.to_spec() == spec  # defaults are not written into the spec (nor into the key)
    image = ImageJob.from_spec({**spec, "experiment": "image", "dataset": "fashionmnist", "ood": "mnist"})
    assert (image.batch_size, image.hidden, image.l2_range, image.search_steps) == (
        256,
        (100, 100, 100),
        (1e-3, 1e3),
        None,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lrr": 0.1}, "unknown setting 'lrr' (did you mean 'lr'?)"),
        ({"init_std": 1.0}, "unknown setting 'init_std'"),  # a synthetic setting on a toy job
        ({"lr": None}, "setting 'lr' is missing"),
        ({"particles": 2.5}, "setting 'particles': expected an integer, got 2.5"),
        ({"particles": True}, "setting 'particles': expected an integer"),
        ({"lr": "fast"}, "setting 'lr': expected a finite number"),
        ({"lr": float("nan")}, "setting 'lr': expected a finite number"),
        ({"optimizer": "adamw"}, "setting 'optimizer': unknown optimizer 'adamw'; known: ['adam', 'sgd']"),
        ({"hidden": [8, "x"]}, "setting 'hidden': expected a list of integers"),
        ({"bandwidth": "mean"}, "setting 'bandwidth'"),
        ({"rule": "ensemble", "space": "function"}, "rule 'ensemble' has no function-space form"),
        ({"experiment": "nope"}, "experiment 'nope' has no runner"),
    ],
)
def test_bad_spec_is_one_line_naming_the_key(change, message):
    with pytest.raises(SpecError) as err:
        Job.from_spec(toy_spec(**change))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_key_and_other_experiment():
    spec = toy_spec()
    del spec["steps"]
    with pytest.raises(SpecError, match="toy job regression/drle/42: setting 'steps' is missing"):
        Job.from_spec(spec)
    with pytest.raises(SpecError, match="'toy' is not a uci job"):
        UCIJob.from_spec(toy_spec())
    uci = resolve_job(CONFIG, "uci", "boston", "de", 42)
    assert UCIJob.from_spec({k: v for k, v in uci.items() if k != "steps"}).steps is None  # UCI: epochs


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"search_top": 30}, "search_top=30 is more than search_trials=10"),
        ({"l2_range": [10.0, 0.1]}, "l2_range [10.0, 0.1] is empty"),
    ],
)
def test_search_settings_are_checked_together(change, message):
    spec = resolve_job(CONFIG, "image", "fashionmnist", "hyper-de", 38)
    with pytest.raises(SpecError, match=re.escape(message)):
        Job.from_spec({**spec, **change})
    Job.from_spec({**spec, **change, "l2_search": False})  # no search, nothing to check


def test_numbers_are_converted_and_the_spec_kept():
    job = Job.from_spec(toy_spec(lr="1e-3", steps=1e4, prior_std=1, hidden=[8.0]))
    assert (job.lr, job.steps, job.prior_std, job.hidden) == (0.001, 10000, 1.0, (8,))
    assert type(job.steps) is int and type(job.prior_std) is float
    assert job.spec["prior_std"] == 1 and job.key() == job_key(
        toy_spec(lr="1e-3", steps=1e4, prior_std=1, hidden=[8.0])
    )


def test_replace_changes_the_spec_and_dataclasses_replace_is_refused():
    job = Job.from_spec(toy_spec())
    faster = job.replace(lr=0.5, hidden=(4, 4))
    assert (faster.lr, faster.spec["lr"], faster.spec["hidden"]) == (0.5, 0.5, [4, 4])
    assert faster.key() != job.key() and job.lr != 0.5
    with pytest.raises(SpecError, match=r"lr=0.5 but the job's spec says .*job.replace\(lr=...\)"):
        dataclasses.replace(job, lr=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.lr = 0.5


def test_direct_construction_writes_its_spec():
    job = SyntheticJob(
        experiment="synthetic",
        dataset="gaussian",
        method="svgd",
        seed=3,
        rule="svgd",
        particles=10,
        steps=20,
        lr=0.1,
        init_std=1.0,
        bandwidth=0.5,
    )
    assert job.spec == {
        "experiment": "synthetic",
        "dataset": "gaussian",
        "method": "svgd",
        "seed": 3,
        "rule": "svgd",
        "particles": 10,
        "steps": 20,
        "lr": 0.1,
        "init_std": 1.0,
        "bandwidth": 0.5,
    }
    assert Job.from_spec(job.spec) == job and job.key() == job_key(job.spec)
    with pytest.raises(SpecError, match="setting 'steps': expected an integer"):
        ToyJob(
            experiment="toy", dataset="regression", method="de", seed=0, rule="ensemble", particles=2, steps=2.5, lr=0.1
        )


def test_rule_options_are_the_rules_own():
    drle = Job.from_spec(toy_spec())
    assert drle.rule_options() == {"temperature": 1.0, "mmd_weight": float(drle.spec["mmd_weight"])}
    assert drle.mmd_weight > 1e4  # lambda of the order of the likelihood (config.yaml, toy)
    spec = resolve_job(CONFIG, "toy", "regression", "ssge-fwgd", 42)
    # ssge-fwgd: the estimator and its ridge; num_eigs null (keep all) is the rule's default
    assert Job.from_spec({**spec, "prior_samples": 7}).rule_options() == {
        "estimator": "ssge",
        "eta": 0.01,
        "prior_samples": 7,
    }
    assert Job.from_spec({**spec, "rule": "svgd", "estimator": None, "eta": None}).rule_options() == {}


def test_networks_from_jobs_and_dicts():
    assert ToyNetwork.pick({"hidden": [7], "lr": 0.1}) == ToyNetwork(hidden=(7,))
    toy = Job.from_spec(toy_spec(hidden=[3]))
    assert ToyNetwork.pick(toy) is toy
    with pytest.raises(SpecError, match="UCINetwork: setting 'noise_std' is missing"):
        UCINetwork.pick({"prior_std": 0.7})
    with pytest.raises(SpecError, match="unknown model 'vgg'"):
        ImageNetwork.pick({"model": "vgg"})


def test_curvature_fraction_default_is_the_step_size_rules():
    from repens.methods.step_size import DEFAULT_FRACTION

    assert default_of(Job, "curvature_fraction") == DEFAULT_FRACTION
