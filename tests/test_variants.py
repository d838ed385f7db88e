"""Variants of an experiment's methods (repens.core.variants)."""

import copy
from pathlib import Path

import pytest
import yaml

from repens.core.variants import VariantError, dataset_methods, expand_variants, variant_methods
from repens.pipeline.config import ConfigError, check_config, check_schema, method_groups, resolve_job

ROOT = Path(__file__).resolve().parents[1]


def _config(scale="paper", **variant):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["scale"] = scale
    config["experiments"]["image"]["claims_variants"] = ["code-init"]
    config["experiments"]["image"]["paper_protocol"] = "code-init"
    config["experiments"]["image"]["variants"] = {
        "code-init": {
            "label": "code's init",
            "methods": ["de", "kde-wgd"],
            "datasets": ["fashionmnist"],
            "settings": {"init": "torch"},
            **variant,
        }
    }
    return config


def test_a_variant_is_its_method_with_the_variants_settings_on_top():
    config = _config()
    expand_variants(config)
    check_config(config)
    entry = config["methods"]["kde-wgd-code-init"]
    assert entry["label"] == "kde-WGD (code's init)" and entry["paper_row"] == "kde-wgd"
    base = resolve_job(config, "image", "fashionmnist", "kde-wgd", 38)
    made = resolve_job(config, "image", "fashionmnist", "kde-wgd-code-init", 38)
    assert base["lr"] == made["lr"] == 0.001  # the method's own per-dataset setting is kept
    assert (base["init"], made["init"]) == ("prior", "torch")
    assert {k: v for k, v in made.items() if k not in ("init", "method")} == {
        k: v for k, v in base.items() if k not in ("init", "method")
    }
    assert config["experiments"]["image"]["methods"][-2:] == ["de-code-init", "kde-wgd-code-init"]
    assert variant_methods(config, "image") == {
        "de-code-init": ("de", "code-init"),
        "kde-wgd-code-init": ("kde-wgd", "code-init"),
    }


def test_the_variants_settings_win_at_quick_scale_too():
    config = _config(scale="quick", settings={"init": "torch", "particles": 7})
    expand_variants(config)
    assert resolve_job(config, "image", "fashionmnist", "de", 38)["particles"] == 10  # the quick patch
    made = resolve_job(config, "image", "fashionmnist", "de-code-init", 38)
    assert (made["particles"], made["init"], made["steps"]) == (7, "torch", 600)


def test_a_variant_runs_on_its_datasets_only():
    config = _config()
    expand_variants(config)
    assert "de-code-init" in dataset_methods(config, "image", "fashionmnist")
    cifar = dataset_methods(config, "image", "cifar10")
    assert "de-code-init" not in cifar and "kde-wgd-code-init" not in cifar and cifar[:2] == ["de", "svgd"]
    assert dataset_methods(config, "uci", "boston") == config["experiments"]["uci"]["methods"]


def test_expanding_twice_changes_nothing():
    config = _config()
    expand_variants(config)
    once = copy.deepcopy(config)
    expand_variants(config)
    assert config == once


@pytest.mark.parametrize(
    "change, message",
    [
        ({"methods": ["de", "nope"]}, "experiments.image.variants.code-init.methods[1]: unknown method 'nope'"),
        ({"datasets": ["svhn"]}, "experiments.image.variants.code-init.datasets[0]: 'svhn' is not a dataset"),
    ],
)
def test_a_variant_naming_what_is_not_there_is_one_line_naming_the_key(change, message):
    with pytest.raises(VariantError, match=message.replace("[", r"\[").replace("]", r"\]")):
        expand_variants(_config(**change))


def test_a_method_of_the_same_name_defined_otherwise_is_refused():
    config = _config()
    config["methods"]["de-code-init"] = {"rule": "svgd", "label": "something else"}
    with pytest.raises(VariantError, match="makes the method 'de-code-init', which methods.de-code-init defines"):
        expand_variants(config)


def test_the_schema_takes_a_variant_and_names_a_missing_key():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    check_schema(_config(), schema)
    config = _config()
    del config["experiments"]["image"]["variants"]["code-init"]["settings"]
    with pytest.raises(ConfigError, match="variants.code-init"):
        check_schema(config, schema)


def test_the_claims_groups_leave_a_variants_methods_out():
    config = _config()
    expand_variants(config)
    groups = method_groups(config)
    assert "kde-wgd" in groups.wgd and "kde-wgd-code-init" not in groups.wgd
    everything = {m for group in (groups.weight_space, groups.function_space, groups.wgd, groups.fwgd) for m in group}
    assert not {m for m in everything if m.endswith("-code-init")}
