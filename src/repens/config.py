"""Resolve and cross-check the pipeline configuration (``config.yaml``).

This module imports neither torch nor Snakemake: the workflow imports it to turn
one (experiment, dataset, method, seed) into a flat job specification, and to
check what a JSON schema cannot (references between sections).

Settings are layered, later layers winning:

1. the method entry (``methods.<name>``),
2. ``experiments.<exp>.settings``, 3. ``experiments.<exp>.datasets.<dataset>``,
4. ``experiments.<exp>.method_settings.<method>``,
5. ``experiments.<exp>.datasets.<dataset>.method_settings.<method>`` (a method's
   setting on one dataset only, e.g. Appendix G's learning rates),
6. the same four layers under ``experiments.<exp>.quick`` when ``scale: quick``.

So ``paper`` is Appendix G as written and ``quick`` only patches what it must.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

__all__ = [
    "ConfigError",
    "METHOD_KEYS",
    "check_config",
    "resolve_job",
    "method_options",
    "experiment_seeds",
    "method_label",
    "resolve_hmc_job",
    "report_datasets",
]

#: keys that describe the algorithm; the rest of a resolved job are training settings
METHOD_KEYS = (
    "rule",
    "space",
    "estimator",
    "eta",
    "num_eigs",
    "function_prior",
    "prior_samples",
    "prior_eta",
    "gp_lengthscale",
    "gp_variance",
    "temperature",
    "mmd_weight",
)

_RULE_OPTIONS = {
    "ensemble": set(),
    "anchored": set(),
    "svgd": set(),
    "wgd": {"estimator", "eta", "num_eigs"},
    "langevin": {"temperature", "mmd_weight", "prior_samples"},
}
_FUNCTION_OPTIONS = {"function_prior", "prior_samples", "prior_eta", "gp_lengthscale", "gp_variance"}
_ESTIMATOR_OPTIONS = {"kde": set(), "sge": {"eta"}, "ssge": {"eta", "num_eigs"}}


#: names the pipeline uses for outputs that are not methods
RESERVED_METHODS = {"hmc": "HMC reference posterior", "iid": "exact-sample baseline of the synthetic table"}


class ConfigError(ValueError):
    """A configuration mistake, with the offending key in the message."""


def _merge(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        if layer:
            out.update(copy.deepcopy(dict(layer)))
    return out


def method_label(config: Mapping[str, Any], method: str) -> str:
    """The label tables and figures show for ``method`` (the paper's name)."""
    return config["methods"][method].get("label", method)


def experiment_seeds(config: Mapping[str, Any], experiment: str) -> list[int]:
    """The experiment's own ``seeds`` if it has them, else the global list."""
    return list(config["experiments"][experiment].get("seeds", config["seeds"]))


def _allowed_options(rule: str, space: str, estimator: str | None) -> set[str]:
    allowed = set(_RULE_OPTIONS[rule])
    if space == "function":
        allowed |= _FUNCTION_OPTIONS
    if rule == "wgd":
        allowed = (allowed - {"eta", "num_eigs"}) | _ESTIMATOR_OPTIONS.get(estimator, set()) | {"estimator"}
    return allowed


def method_options(job: Mapping[str, Any]) -> dict[str, Any]:
    """The options of a resolved job that its update rule accepts (keyword arguments).

    Experiment-wide settings may set an option (say ``prior_samples``) for every
    method; each rule receives only the options it uses.
    """
    allowed = _allowed_options(job["rule"], job.get("space", "weight"), job.get("estimator"))
    return {k: job[k] for k in METHOD_KEYS if k in allowed and k in job and job[k] is not None}


def _check_method(name: str, entry: Mapping[str, Any]) -> None:
    where = f"methods.{name}"
    rule, space = entry.get("rule"), entry.get("space", "weight")
    if rule not in _RULE_OPTIONS:
        raise ConfigError(f"{where}.rule: unknown rule {rule!r}; known: {sorted(_RULE_OPTIONS)}")
    if space == "function" and rule not in ("svgd", "wgd"):
        raise ConfigError(f"{where}.space: rule {rule!r} has no function-space form (only svgd, wgd)")
    estimator = entry.get("estimator")
    if rule == "wgd" and estimator not in _ESTIMATOR_OPTIONS:
        raise ConfigError(
            f"{where}.estimator: rule 'wgd' needs an estimator, one of {sorted(_ESTIMATOR_OPTIONS)}; got {estimator!r}"
        )
    allowed = _allowed_options(rule, space, estimator)
    for key in entry:
        if key in METHOD_KEYS and key not in ("rule", "space") and key not in allowed:
            raise ConfigError(f"{where}.{key}: option not used by rule {rule!r} in {space} space")


def check_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the key for mistakes a schema cannot see."""
    methods = config.get("methods") or {}
    for name, entry in methods.items():
        if name in RESERVED_METHODS:
            raise ConfigError(f"methods.{name}: the name is reserved for the {RESERVED_METHODS[name]}")
        _check_method(name, entry)
    if not config.get("seeds"):
        raise ConfigError("seeds: the seed list is empty")
    scale = config.get("scale")
    if scale not in ("quick", "paper"):
        raise ConfigError(f"scale: must be 'quick' or 'paper', got {scale!r}")
    for exp, spec in (config.get("experiments") or {}).items():
        where = f"experiments.{exp}"
        if "seeds" in spec and not spec["seeds"]:
            raise ConfigError(f"{where}.seeds: the seed list is empty")
        for i, method in enumerate(spec.get("methods", [])):
            if method not in methods:
                raise ConfigError(
                    f"{where}.methods[{i}]: unknown method {method!r}; defined under 'methods': {sorted(methods)}"
                )
        datasets = spec.get("datasets") or {}
        if not datasets:
            raise ConfigError(f"{where}.datasets: no dataset listed")
        for layer_name, layer in (("", spec), ("quick.", spec.get("quick") or {})):
            for ds in layer.get("datasets") or {}:
                if ds not in datasets:
                    raise ConfigError(f"{where}.{layer_name}datasets.{ds}: not a dataset of this experiment")
            # settings of a defined method the experiment does not run are kept (so a
            # method can be dropped from `methods` alone); an undefined name is a typo
            for m in layer.get("method_settings") or {}:
                if m not in methods:
                    raise ConfigError(f"{where}.{layer_name}method_settings.{m}: no method {m!r} under 'methods'")
            for ds, ds_layer in (layer.get("datasets") or {}).items():
                for m in (ds_layer or {}).get("method_settings") or {}:
                    if m not in methods:
                        raise ConfigError(
                            f"{where}.{layer_name}datasets.{ds}.method_settings.{m}: no method {m!r} under 'methods'"
                        )
            for i, ds in enumerate(layer.get("report_datasets") or []):
                if ds not in datasets:
                    raise ConfigError(f"{where}.{layer_name}report_datasets[{i}]: {ds!r} is not a dataset of this experiment")


def resolve_job(
    config: Mapping[str, Any], experiment: str, dataset: str, method: str, seed: int
) -> dict[str, Any]:
    """Flat specification of one training job (see module docstring for the layers).

    Returns a dict with the method keys (``rule``, ``space``, options), the training
    settings, and ``experiment``, ``dataset``, ``method``, ``seed``, ``scale``.
    """
    exp = config["experiments"][experiment]
    blocks = [exp] + ([exp.get("quick") or {}] if config["scale"] == "quick" else [])
    layers: list[Mapping[str, Any] | None] = [config["methods"][method]]
    for block in blocks:
        on_dataset = dict((block.get("datasets") or {}).get(dataset) or {})
        per_method = on_dataset.pop("method_settings", None) or {}
        layers += [
            block.get("settings"),
            on_dataset,
            (block.get("method_settings") or {}).get(method),
            per_method.get(method),
        ]
    job = _merge(*layers)
    job.pop("label", None)  # display only: changing it must not retrain (figures get labels separately)
    job.setdefault("space", "weight")
    job.update(experiment=experiment, dataset=dataset, method=method, seed=int(seed), scale=config["scale"])
    return job


def report_datasets(config: Mapping[str, Any], experiment: str) -> list[str]:
    """Datasets the experiment's table shows: ``report_datasets`` (quick patches it), else all."""
    exp = config["experiments"][experiment]
    chosen = exp.get("report_datasets")
    if config["scale"] == "quick":
        chosen = (exp.get("quick") or {}).get("report_datasets", chosen)
    return list(chosen or exp["datasets"])


def resolve_hmc_job(config: Mapping[str, Any], experiment: str, dataset: str, seed: int) -> dict[str, Any]:
    """Job of the HMC reference of ``experiment`` on ``dataset``: the experiment's and
    dataset's settings (no method layer) plus the merged ``hmc`` block (quick patches it)."""
    exp = config["experiments"][experiment]
    layers = [exp.get("settings"), (exp.get("datasets") or {}).get(dataset)]
    hmc_layers = [exp.get("hmc")]
    if config["scale"] == "quick":
        quick = exp.get("quick") or {}
        layers += [quick.get("settings"), (quick.get("datasets") or {}).get(dataset)]
        hmc_layers.append(quick.get("hmc"))
    job = _merge(*layers)
    for key in METHOD_KEYS + ("particles", "steps", "lr", "optimizer", "init_std", "bandwidth", "batch_size"):
        job.pop(key, None)  # training settings of the particle methods
    job.update(hmc=_merge(*hmc_layers), experiment=experiment, dataset=dataset, method="hmc",
               seed=int(seed), scale=config["scale"])
    return job
