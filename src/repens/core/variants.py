"""Variants: an experiment's methods run again with other settings, as a block of rows of their own.

An experiment's ``variants`` entry, e.g. Table 1 at the authors' released code's
initialisation::

    variants:
      code-init:
        label: code's init
        methods: [de, svgd, ...]
        datasets: [fashionmnist]
        settings: {init: torch}
        method_settings: {fsvgd: {function_output: softmax}}   # optional, per listed method

makes, for each listed method ``m``, the method ``m-code-init``: ``m``'s entry, labelled
"<m's label> (code's init)" and set beside ``m``'s paper row (``paper_row``), with ``m``'s
settings at every layer of the experiment (:mod:`repens.pipeline.config`) and the variant's
``settings`` on top of them (and its ``method_settings`` for ``m`` on top of those), run on
the listed data sets only. :func:`expand_variants` writes
these methods into the config as a user would by hand, so everything downstream (the grid,
resolve_job, the tables, the budget) sees ordinary methods; :func:`dataset_methods` is the
experiment's methods on one data set (a variant's methods only on its data sets).

Imports nothing of the package: the workflow, the command line and the reports read it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["VariantError", "dataset_methods", "expand_variants", "variant_methods"]


class VariantError(ValueError):
    """A variant naming what the config does not hold; the message names the key (the
    workflow reports it as it reports a :class:`repens.pipeline.config.ConfigError`)."""


def variant_methods(config: Mapping[str, Any], experiment: str) -> dict[str, tuple[str, str]]:
    """The methods ``experiment``'s variants make: name -> (the method, the variant)."""
    variants = (config["experiments"][experiment] or {}).get("variants") or {}
    return {f"{m}-{v}": (m, v) for v, spec in variants.items() for m in spec.get("methods", [])}


def dataset_methods(config: Mapping[str, Any], experiment: str, dataset: str) -> list[str]:
    """``experiment``'s methods that run on ``dataset``, in config order: a variant's only on
    the data sets it lists."""
    exp = config["experiments"][experiment]
    variants = exp.get("variants") or {}
    made = variant_methods(config, experiment)
    return [m for m in exp["methods"] if m not in made or dataset in variants[made[m][1]]["datasets"]]


def expand_variants(config: dict[str, Any]) -> None:
    """Write every experiment's variant methods into ``config`` (in place): their ``methods``
    entries, their place at the end of the experiment's ``methods``, their settings at each
    layer. Running it again changes nothing; a method of the same name defined otherwise, or a
    variant naming an unknown method or data set, is a :class:`VariantError` naming the key."""
    methods = config.setdefault("methods", {})
    for exp_name, exp in (config.get("experiments") or {}).items():
        for variant, spec in ((exp or {}).get("variants") or {}).items():
            where = f"experiments.{exp_name}.variants.{variant}"
            _check_variant(where, spec, methods, exp)
            for base in spec["methods"]:
                name = f"{base}-{variant}"
                entry = {
                    **copy.deepcopy(methods[base]),
                    "label": f"{methods[base].get('label', base)} ({spec['label']})",
                    "paper_row": methods[base].get("paper_row", base),
                }
                if name in methods and methods[name] != entry:
                    raise VariantError(
                        f"{where}: makes the method {name!r}, which methods.{name} defines already; remove one"
                    )
                methods[name] = entry
                if name not in exp["methods"]:
                    exp["methods"].append(name)
                _copy_settings(exp, base, name, spec)


def _check_variant(where: str, spec: Mapping[str, Any], methods: Mapping[str, Any], exp: Mapping[str, Any]) -> None:
    for i, base in enumerate(spec.get("methods", [])):
        if base not in methods:
            known = sorted(methods)
            raise VariantError(f"{where}.methods[{i}]: unknown method {base!r}; defined under 'methods': {known}")
    for base in spec.get("method_settings") or {}:
        if base not in spec.get("methods", []):
            raise VariantError(
                f"{where}.method_settings.{base}: {base!r} is not among the variant's methods {spec.get('methods', [])}"
            )
    for i, ds in enumerate(spec.get("datasets", [])):
        if ds not in (exp.get("datasets") or {}):
            raise VariantError(f"{where}.datasets[{i}]: {ds!r} is not a dataset of this experiment")


def _copy_settings(exp: dict[str, Any], base: str, name: str, spec: Mapping[str, Any]) -> None:
    """``base``'s method settings as ``name``'s at every layer of ``exp`` and of its quick
    block, with the variant's settings on top at the last layer of each (the data set's
    ``method_settings``), on the variant's data sets: they win at either scale."""
    for block in (exp, exp.get("quick")):
        if not block:
            continue
        if base in (block.get("method_settings") or {}):
            block["method_settings"][name] = copy.deepcopy(block["method_settings"][base])
        for ds in spec["datasets"]:
            datasets = block.setdefault("datasets", {})
            on_dataset = datasets[ds] = datasets.get(ds) or {}
            per_method = on_dataset.setdefault("method_settings", {})
            own = copy.deepcopy(per_method.get(base) or {})
            mine = (spec.get("method_settings") or {}).get(base) or {}
            per_method[name] = {**own, **copy.deepcopy(spec.get("settings") or {}), **copy.deepcopy(mine)}
