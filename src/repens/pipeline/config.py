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
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repens.core import registry
from repens.jobs.job import RULE_FIELDS, HMCJob, ImageJob, Job, SpecError, SyntheticJob, ToyJob, UCIJob, settings_of
from repens.jobs.rule_options import ESTIMATOR_OPTIONS, FUNCTION_SPACE, RULE_OPTIONS, options_of

__all__ = [
    "ConfigError",
    "EXPERIMENTS",
    "SEED_RANGE",
    "coerce_numbers",
    "check_schema",
    "load_schema",
    "with_registry",
    "method_groups",
    "schema_errors",
    "check_data_folders",
    "METHOD_KEYS",
    "check_config",
    "resolve_job",
    "method_options",
    "experiment_seeds",
    "method_label",
    "resolve_hmc_job",
    "report_datasets",
    "HMC_MIN_CHAINS",
    "HMC_MIN_KEPT",
    "setting_source",
    "hmc_setting_source",
]

#: keys that describe the algorithm; the rest of a resolved job are training settings
METHOD_KEYS = RULE_FIELDS

#: a method's keys that only reports read: its display name and the paper's row it is set
#: beside (``paper_row``); resolve_job drops them, so changing them never retrains
DISPLAY_KEYS = ("label", "paper_row")

#: names the pipeline uses for outputs that are not methods
RESERVED_METHODS = {"hmc": "HMC reference posterior", "iid": "exact-sample baseline of the synthetic table"}


#: seeds accepted: every generator the jobs seed (torch.Generator, numpy) takes them,
#: with room for the per-split / per-chain offsets the runners add
SEED_RANGE = (0, 2**32 - 1)

#: training settings every runner reads (fields of repens.jobs.job.Job; the rule's are METHOD_KEYS)
_COMMON_SETTINGS = settings_of(Job) - set(METHOD_KEYS)


def _reads(job_type: type[Job]) -> frozenset[str]:
    """The settings only ``job_type``'s runner reads: its fields beyond every job's."""
    return settings_of(job_type) - _COMMON_SETTINGS - set(METHOD_KEYS)


@dataclass(frozen=True)
class Experiment:
    """What an experiment's runner can do, for checks at load time (no torch here;
    ``tests/test_config.py`` checks these lists against the runners' registries)."""

    datasets: frozenset[str]
    #: settings keys the runner reads, besides the method options and _COMMON_SETTINGS
    #: (the fields of its repens.jobs.job class)
    settings: frozenset[str]
    #: keys every resolved job must have
    required: frozenset[str]
    #: particles are network weights seen through data batches (function-space rules work)
    network: bool
    #: a validation split exists (the hyper-deep ensemble's L2 search needs one)
    validation: bool = False
    #: datasets that exist only as OOD test sets (image experiment)
    ood_only: frozenset[str] = frozenset()
    #: image shape of each dataset, so an OOD set matches the training set
    shapes: Mapping[str, tuple[int, ...]] | None = None


_IMAGE_SHAPES = registry.image_shapes()

EXPERIMENTS: dict[str, Experiment] = {
    "synthetic": Experiment(
        datasets=frozenset(registry.datasets_of("synthetic")),
        settings=_reads(SyntheticJob),
        required=frozenset({"particles", "steps", "lr", "init_std"}),
        network=False,
    ),
    "toy": Experiment(
        datasets=frozenset(registry.datasets_of("toy")),
        settings=_reads(ToyJob),
        required=frozenset({"particles", "steps", "lr"}),
        network=True,
    ),
    "image": Experiment(
        datasets=frozenset(registry.datasets_of("image")),
        settings=_reads(ImageJob),
        required=frozenset({"particles", "steps", "lr", "ood", "model"}),
        network=True,
        validation=True,
        ood_only=frozenset(registry.datasets_of("image", ood_only=True)),
        shapes=_IMAGE_SHAPES,
    ),
    "uci": Experiment(
        datasets=frozenset(registry.uci_datasets()),
        settings=_reads(UCIJob),
        required=frozenset({"particles", "lr", "batch_size", "noise_std", "prior_bias_var"}),
        network=True,
    ),
}

#: settings that only the hyper-deep ensemble's L2 search reads
_SEARCH_SETTINGS = frozenset({"l2_range", "search_rank", "search_steps", "search_top", "search_trials", "val_fraction"})


class ConfigError(ValueError):
    """A configuration mistake, with the offending key in the message."""


def _merge(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        if layer:
            out.update(copy.deepcopy(dict(layer)))
    return out


def paper_rows(config: Mapping[str, Any]) -> dict[str, str]:
    """Each method's ``paper_row`` (the paper's row it is set beside), where it has one."""
    return {m: e["paper_row"] for m, e in config["methods"].items() if (e or {}).get("paper_row")}


def method_label(config: Mapping[str, Any], method: str) -> str:
    """The label tables and figures show for ``method`` (the paper's name)."""
    return config["methods"][method].get("label", method)


def method_groups(config: Mapping[str, Any]) -> registry.MethodGroups:
    """The method groups the claims compare, from the config's ``methods``
    (:func:`repens.core.registry.method_groups`); a method set beside another's row of the
    paper (``paper_row``: a variant's, :mod:`repens.core.variants`) is in none: the claims
    are about the paper's rows."""
    return registry.method_groups({m: e for m, e in config["methods"].items() if not (e or {}).get("paper_row")})


def experiment_seeds(config: Mapping[str, Any], experiment: str) -> list[int]:
    """The experiment's own ``seeds`` if it has them, else the global list; at quick
    scale the quick block's ``seeds`` where it has them."""
    exp = config["experiments"][experiment]
    seeds = exp.get("seeds", config["seeds"])
    if config.get("scale") == "quick":
        seeds = (exp.get("quick") or {}).get("seeds", seeds)
    return list(seeds)


def paper_seeds(config: Mapping[str, Any]) -> dict[str, list[int]]:
    """Each experiment's seeds at the paper's scale (:func:`experiment_seeds`)."""
    paper = {**config, "scale": "paper"}
    return {experiment: experiment_seeds(paper, experiment) for experiment in config["experiments"]}


def method_options(job: Job | Mapping[str, Any]) -> dict[str, Any]:
    """The options of a job (or a resolved job's dict) that its update rule accepts
    (keyword arguments): :meth:`repens.jobs.job.Job.rule_options`.

    Experiment-wide settings may set an option (say ``prior_samples``) for every
    method; each rule receives only the options it uses.
    """
    if isinstance(job, Job):
        return job.rule_options()
    allowed = options_of(job["rule"], job.get("space", "weight"), job.get("estimator"))
    return {k: job[k] for k in METHOD_KEYS if k in allowed and k in job and job[k] is not None}


def _check_method(name: str, entry: Mapping[str, Any]) -> None:
    where = f"methods.{name}"
    rule, space = entry.get("rule"), entry.get("space", "weight")
    if rule not in RULE_OPTIONS:
        raise ConfigError(f"{where}.rule: unknown rule {rule!r}; known: {sorted(RULE_OPTIONS)}")
    if space == "function" and rule not in FUNCTION_SPACE:
        raise ConfigError(
            f"{where}.space: rule {rule!r} has no function-space form (only {', '.join(sorted(FUNCTION_SPACE))})"
        )
    estimator = entry.get("estimator")
    if registry.RULES[rule].estimator and estimator not in ESTIMATOR_OPTIONS:
        raise ConfigError(
            f"{where}.estimator: rule {rule!r} needs an estimator, one of {sorted(ESTIMATOR_OPTIONS)}; "
            f"got {estimator!r}"
        )
    allowed = options_of(rule, space, estimator)
    for key in entry:
        if key in METHOD_KEYS and key not in ("rule", "space") and key not in allowed:
            raise ConfigError(f"{where}.{key}: option not used by rule {rule!r} in {space} space")


def _check_claims_variants(where: str, spec: Mapping[str, Any]) -> None:
    """Each of an experiment's ``claims_variants``, and its ``paper_protocol``, names one of its variants."""
    for i, variant in enumerate(spec.get("claims_variants") or []):
        if variant not in (spec.get("variants") or {}):
            raise ConfigError(f"{where}.claims_variants[{i}]: {variant!r} is not one of the experiment's variants")
    protocol = spec.get("paper_protocol")
    if protocol is not None and protocol not in (spec.get("variants") or {}):
        raise ConfigError(f"{where}.paper_protocol: {protocol!r} is not one of the experiment's variants")


def check_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the key for mistakes a schema cannot see."""
    methods = config.get("methods") or {}
    for name, entry in methods.items():
        if name in RESERVED_METHODS:
            raise ConfigError(f"methods.{name}: the name is reserved for the {RESERVED_METHODS[name]}")
        _check_method(name, entry)
        row = (entry or {}).get("paper_row")
        if row is not None and (row not in methods or row == name):
            raise ConfigError(
                f"methods.{name}.paper_row: {row!r} is not another method of methods (known: {sorted(methods)})"
            )
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
                    raise ConfigError(
                        f"{where}.{layer_name}report_datasets[{i}]: {ds!r} is not a dataset of this experiment"
                    )
        _check_claims_variants(where, spec)
    _check_finite(config, "")
    _check_all_seeds(config)
    for exp, spec in (config.get("experiments") or {}).items():
        _check_experiment(config, exp, spec)
        _check_hmc(config, exp, spec)


def _check_finite(value: Any, where: str) -> None:
    """NaN and infinity pass a schema's bounds (every comparison with NaN is false)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {value!r} is not a finite number")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]")


def _check_all_seeds(config: Mapping[str, Any]) -> None:
    """:func:`_check_seeds` of every seed list: the global one, each experiment's and each
    quick block's."""
    for key, seeds in [("seeds", config["seeds"])] + [
        (f"experiments.{exp}.{block}seeds", layer["seeds"])
        for exp, spec in (config.get("experiments") or {}).items()
        for block, layer in (("", spec), ("quick.", spec.get("quick") or {}))
        if isinstance(layer, Mapping) and "seeds" in layer
    ]:
        _check_seeds(key, seeds)


def _check_seeds(where: str, seeds: list) -> None:
    low, high = SEED_RANGE
    seen: set[int] = set()
    for i, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, int) or not low <= seed <= high:
            raise ConfigError(f"{where}[{i}]: seed {seed!r} is outside [{low}, {high}]")
        if seed in seen:
            raise ConfigError(
                f"{where}[{i}]: seed {seed} is repeated (each seed is one run; a repeat would count one run twice)"
            )
        seen.add(seed)


def _layers_of(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], str | None]]:
    """Every settings layer of an experiment as (key path, settings, method or None)."""
    out: list[tuple[str, Mapping[str, Any], str | None]] = []
    for prefix, block in (("", spec), ("quick.", spec.get("quick") or {})):
        out.append((f"{prefix}settings", block.get("settings") or {}, None))
        for m, layer in (block.get("method_settings") or {}).items():
            out.append((f"{prefix}method_settings.{m}", layer or {}, m))
        for ds, ds_layer in (block.get("datasets") or {}).items():
            ds_layer = dict(ds_layer or {})
            ds_layer.pop("hmc", None)  # the dataset's HMC reference settings (resolve_hmc_job)
            for m, layer in (ds_layer.pop("method_settings", None) or {}).items():
                out.append((f"{prefix}datasets.{ds}.method_settings.{m}", layer or {}, m))
            out.append((f"{prefix}datasets.{ds}", ds_layer, None))
    return out


def _method_allowed(entry: Mapping[str, Any]) -> frozenset[str]:
    return options_of(entry["rule"], entry.get("space", "weight"), entry.get("estimator"))


def _check_experiment(config: Mapping[str, Any], exp: str, spec: Mapping[str, Any]) -> None:
    """Checks that need the experiment's capabilities (:data:`EXPERIMENTS`) and every resolved job."""
    where = f"experiments.{exp}"
    caps = EXPERIMENTS.get(exp)
    if caps is None:
        raise ConfigError(f"{where}: no runner for experiment {exp!r}; known: {sorted(EXPERIMENTS)}")
    methods = config["methods"]
    for ds in spec["datasets"]:
        if ds not in caps.datasets:
            raise ConfigError(f"{where}.datasets.{ds}: unknown {exp} dataset {ds!r}; known: {sorted(caps.datasets)}")
    run = list(spec.get("methods", []))
    known_settings = _COMMON_SETTINGS | caps.settings
    for path, layer, method in _layers_of(spec):
        for key in layer:
            if key in METHOD_KEYS:
                if method is not None:
                    if key not in _method_allowed(methods[method]):
                        raise ConfigError(
                            f"{where}.{path}.{key}: option not used by method {method!r} "
                            f"(rule {methods[method]['rule']!r}, {methods[method].get('space', 'weight')} space)"
                        )
                elif not any(key in _method_allowed(methods[m]) for m in run):
                    raise ConfigError(f"{where}.{path}.{key}: option used by none of the experiment's methods {run}")
            elif key not in known_settings:
                raise ConfigError(
                    f"{where}.{path}.{key}: not a setting of the {exp} experiment (it reads: {sorted(known_settings)})"
                )
    for method in run:
        entry = methods[method]
        if entry.get("space", "weight") == "function" and not caps.network:
            raise ConfigError(
                f"{where}.methods: {method!r} is a function-space rule, which needs a network and "
                f"data batches; the {exp} experiment has neither"
            )
        for key in entry:
            if key not in METHOD_KEYS and key not in DISPLAY_KEYS and key not in known_settings:
                with_split = sorted(name for name, other in EXPERIMENTS.items() if other.validation)
                reason = (
                    f"the L2 search needs a validation split, which only the {', '.join(with_split)} experiment has"
                    if key in _SEARCH_SETTINGS | {"l2_search"}
                    else f"the {exp} runner does not read it"
                )
                raise ConfigError(f"{where}.methods: method {method!r} sets {key!r}, which cannot apply here: {reason}")
    scales = ("paper", "quick")
    for ds in spec["datasets"]:
        for method in run:
            for scale in scales:
                job = resolve_job(dict(config, scale=scale), exp, ds, method, 0)
                _check_job(job, caps, f"{where} ({scale} scale, dataset {ds}, method {method})")


def _check_job(job: Mapping[str, Any], caps: Experiment, where: str) -> None:
    missing = sorted(k for k in caps.required if job.get(k) is None)
    if missing:
        raise ConfigError(f"{where}: no {missing[0]!r} in any settings layer")
    try:
        typed = Job.from_spec(job)  # what the runner will be given (repens.jobs.job checks the settings together)
    except SpecError as err:
        raise ConfigError(f"{where}: {err}") from None
    if isinstance(typed, ImageJob) and caps.shapes is not None:
        ood, ds = typed.ood, typed.dataset
        known = sorted(caps.datasets | caps.ood_only)
        if ood not in caps.shapes:
            raise ConfigError(f"{where}: ood {ood!r} is not an image data set; known: {known}")
        if ood == ds:
            raise ConfigError(f"{where}: ood {ood!r} is the training data set itself")
        if caps.shapes[ood] != caps.shapes[ds]:
            raise ConfigError(f"{where}: ood {ood!r} has images {caps.shapes[ood]}, {ds!r} has {caps.shapes[ds]}")


#: what the HMC reference's diagnostics need (repens.training.hmc.predictive_diagnostics): R-hat
#: compares chains, so at least 2; split R-hat halves each chain's kept draws, at least 4
HMC_MIN_CHAINS = 2
HMC_MIN_KEPT = 4
#: repens.training.hmc.HMCSettings' defaults of the settings checked here (tests/test_checks.py
#: compares them), for a config that leaves them unset
_HMC_DEFAULTS = {"chains": 8, "samples": 1000, "thin": 1}


def _hmc_blocks(config: Mapping[str, Any], experiment: str, dataset: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``hmc`` blocks resolve_hmc_job merges for ``dataset``, as (key path, block), in its order."""
    exp = config["experiments"][experiment]
    where = f"experiments.{experiment}"
    blocks = [
        (f"{where}.hmc", exp.get("hmc")),
        (f"{where}.datasets.{dataset}.hmc", ((exp.get("datasets") or {}).get(dataset) or {}).get("hmc")),
    ]
    if config["scale"] == "quick":
        quick = exp.get("quick") or {}
        blocks += [
            (f"{where}.quick.hmc", quick.get("hmc")),
            (f"{where}.quick.datasets.{dataset}.hmc", ((quick.get("datasets") or {}).get(dataset) or {}).get("hmc")),
        ]
    return [(path, block) for path, block in blocks if block]


def hmc_setting_source(config: Mapping[str, Any], experiment: str, dataset: str, key: str) -> str:
    """The config key that sets ``hmc.<key>`` of the dataset's HMC reference at the config's
    scale (the last layer resolve_hmc_job merges that has it), e.g.
    ``experiments.toy.quick.hmc.chains``; ``<experiment's hmc>.<key> (default)`` if none does."""
    found = [path for path, block in _hmc_blocks(config, experiment, dataset) if key in block]
    return f"{found[-1]}.{key}" if found else f"experiments.{experiment}.hmc.{key} (default)"


def _check_hmc(config: Mapping[str, Any], exp: str, spec: Mapping[str, Any]) -> None:
    """The HMC reference of every dataset, at both scales, can be diagnosed: at least
    :data:`HMC_MIN_CHAINS` chains and :data:`HMC_MIN_KEPT` kept draws per chain (the
    sampler would otherwise run to the end and then fail its R-hat)."""
    if exp != "toy" and not any(_hmc_blocks(dict(config, scale="quick"), exp, ds) for ds in spec.get("datasets") or {}):
        return  # only the toy experiment has an HMC reference; another's hmc block is checked if set
    for ds in spec.get("datasets") or {}:
        for scale in ("paper", "quick"):
            scaled = dict(config, scale=scale)
            hmc = {**_HMC_DEFAULTS, **resolve_hmc_job(scaled, exp, ds, 0)["hmc"]}
            chains, samples, thin = (hmc[k] for k in ("chains", "samples", "thin"))
            if not isinstance(chains, int) or chains < HMC_MIN_CHAINS:
                raise ConfigError(
                    f"{hmc_setting_source(scaled, exp, ds, 'chains')}: {chains!r} chain(s) for the HMC reference of "
                    f"{ds} at {scale} scale; its R-hat compares chains and needs at least {HMC_MIN_CHAINS}"
                )
            if isinstance(samples, int) and isinstance(thin, int) and thin > 0 and samples // thin < HMC_MIN_KEPT:
                keys = " / ".join(hmc_setting_source(scaled, exp, ds, k) for k in ("samples", "thin"))
                raise ConfigError(
                    f"{keys}: samples {samples} // thin {thin} keeps {samples // thin} draw(s) per chain for the HMC "
                    f"reference of {ds} at {scale} scale; split R-hat needs at least {HMC_MIN_KEPT}"
                )


def setting_source(config: Mapping[str, Any], experiment: str, dataset: str, method: str, key: str) -> str:
    """The config key that sets ``key`` of the job (experiment, dataset, method) at the
    config's scale: the last layer :func:`resolve_job` merges that has it, e.g.
    ``experiments.image.quick.settings.particles``; ``<key> (default)`` if none does."""
    exp = config["experiments"][experiment]
    where = f"experiments.{experiment}"
    layers: list[tuple[str, Mapping[str, Any] | None]] = [(f"methods.{method}", config["methods"].get(method))]
    blocks = [(where, exp)] + ([(f"{where}.quick", exp.get("quick") or {})] if config["scale"] == "quick" else [])
    for prefix, block in blocks:
        on_dataset = (block.get("datasets") or {}).get(dataset) or {}
        layers += [
            (f"{prefix}.settings", block.get("settings")),
            (
                f"{prefix}.datasets.{dataset}",
                {k: v for k, v in on_dataset.items() if k not in ("hmc", "method_settings")},
            ),
            (f"{prefix}.method_settings.{method}", (block.get("method_settings") or {}).get(method)),
            (
                f"{prefix}.datasets.{dataset}.method_settings.{method}",
                (on_dataset.get("method_settings") or {}).get(method),
            ),
        ]
    found = [path for path, layer in layers if layer and key in layer]
    return f"{found[-1]}.{key}" if found else f"{key} (default)"


def check_data_folders(config: Mapping[str, Any]) -> None:
    """A data folder the user names must exist (a download cannot fill another's mirror):
    ``image_data_mirror``, ``uci_data``, and where ``uci_data`` is unset the folder
    ``$REPENS_UCI_DATA`` names in its place."""
    import os
    from pathlib import Path

    for key in ("image_data_mirror", "uci_data"):
        folder = config.get(key)
        if folder and not Path(folder).is_dir():
            raise ConfigError(f"{key}: folder {folder} does not exist")
    folder = os.environ.get("REPENS_UCI_DATA")
    if not config.get("uci_data") and folder and not Path(folder).is_dir():
        raise ConfigError(
            f"uci_data: unset, and environment variable REPENS_UCI_DATA={folder!r} names no "
            "folder; point it (or uci_data) at an existing one, or unset both to download into data/uci"
        )


_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_NULL = {"null", "Null", "NULL", "~"}


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _types(schema: Mapping[str, Any], root: Mapping[str, Any]) -> set[str]:
    schema = _resolve(schema, root)
    kind = schema.get("type")
    found = set([kind] if isinstance(kind, str) else kind or [])
    for alternative in schema.get("anyOf", []) + schema.get("oneOf", []):
        found |= _types(alternative, root)
    return found


def _scalar(value: str, types: set[str]) -> Any:
    """``value`` as the number, boolean or null the schema asks for, else unchanged."""
    if "integer" in types and _INT.fullmatch(value):
        return int(value)
    if types & {"number", "integer"} and _FLOAT.fullmatch(value):
        number = float(value.lower().replace(".inf", "inf").replace(".nan", "nan"))
        if "number" not in types and number.is_integer():
            return int(number)  # steps: 1e4
        return number
    if "boolean" in types and value in _BOOL:
        return _BOOL[value]
    if "null" in types and value in _NULL:
        return None
    return value


def coerce_numbers(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """``value`` with every string the schema wants as a number (or boolean, or null) converted.

    YAML 1.1 (PyYAML) reads ``1e-3`` without a dot as a string, and Snakemake's
    ``--config`` passes nested values and list items as strings; a person who writes
    ``lr: 1e-3`` or ``--config seeds=[1,2]`` means numbers. Strings where the schema
    also allows a string are converted only if they are spelled as numbers; anything
    else is left for the schema to reject, naming the key.
    """
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if isinstance(value, str):
        types = _types(schema, root)
        if "string" in types and not types & {"number", "integer"}:
            return value
        return _scalar(value, types)
    alternatives = [_resolve(a, root) for a in schema.get("anyOf", []) + schema.get("oneOf", [])] or [schema]
    if isinstance(value, dict):
        for sub in alternatives:
            props, patterns = sub.get("properties", {}), sub.get("patternProperties", {})
            if not props and not patterns:
                continue
            for key in list(value):
                child = props.get(key) or next((s for p, s in patterns.items() if re.search(p, key)), None)
                if child is not None:
                    value[key] = coerce_numbers(value[key], child, root)
            break
    elif isinstance(value, list):
        for sub in alternatives:
            if "items" in sub:
                value[:] = [coerce_numbers(v, sub["items"], root) for v in value]
                break
    return value


#: ``x-registry`` names in the schema -> the registry's names its ``enum`` holds
#: (:func:`with_registry`): the schema's choices of rule, space and estimator are declared
#: in :mod:`repens.core.registry` only
SCHEMA_REGISTRIES = {
    "rules": registry.rule_names,
    "spaces": lambda: registry.SPACES,
    "estimators": registry.estimator_names,
}


def with_registry(schema: Any) -> Any:
    """A copy of ``schema`` with an ``enum`` of the registry's names (as of now) in every
    node that says ``x-registry: <name>`` (:data:`SCHEMA_REGISTRIES`)."""
    if isinstance(schema, Mapping):
        out = {k: with_registry(v) for k, v in schema.items()}
        if "x-registry" in out:
            out["enum"] = list(SCHEMA_REGISTRIES[out["x-registry"]]())
        return out
    if isinstance(schema, list):
        return [with_registry(v) for v in schema]
    return schema


def load_schema(path: str | Path | None = None) -> dict[str, Any]:
    """The workflow's config schema (``workflow/schemas/config.schema.yaml``, or ``path``)
    with the registry's choices filled in (:func:`with_registry`)."""
    import yaml

    path = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml" if path is None else path
    return with_registry(yaml.safe_load(Path(path).read_text()))


def check_schema(config: dict[str, Any], schema: Mapping[str, Any], *, fill_defaults: bool = False) -> None:
    """Coerce the numbers of ``config`` in place (:func:`coerce_numbers`), then check it
    against the JSON ``schema`` with the registry's choices filled in (:func:`with_registry`):
    its best-matching error raises :class:`ConfigError` ``"<key>: <message>"`` (the key
    dotted, ``(top level)`` for the config itself). With ``fill_defaults`` the same pass
    sets each missing property that the schema gives a ``default`` (as
    ``snakemake.utils.validate`` does, so the workflow validates its config once).

    Where ``jsonschema`` is not installed (a GPU node: ``repens budget`` there), the
    check is :func:`schema_errors`, this module's own reading of the keywords the
    pipeline's schema uses; the error shown is the one nearest the top of the config,
    as jsonschema's best match picks it."""
    schema = with_registry(schema)
    coerce_numbers(config, schema)
    try:
        import jsonschema
    except ImportError:
        errors = schema_errors(config, schema)
        if errors:
            path, message = min(errors, key=lambda e: len(e[0]))  # the first of the shallowest
            raise ConfigError(f"{'.'.join(str(p) for p in path) or '(top level)'}: {message}") from None
        return
    validator = _defaults_filling(jsonschema.Draft202012Validator) if fill_defaults else jsonschema.Draft202012Validator
    error = jsonschema.exceptions.best_match(validator(schema).iter_errors(config))
    if error is not None:
        key = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        raise ConfigError(f"{key}: {error.message}")


def _defaults_filling(validator_class):
    """``validator_class`` whose ``properties`` keyword first sets each missing property's
    ``default`` on the instance (jsonschema's FAQ recipe, as ``snakemake.utils.validate``)."""
    from jsonschema import validators

    check_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):  # noqa: ANN001, ANN202
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, subschema["default"])
        yield from check_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": set_defaults})


#: JSON Schema keywords :func:`schema_errors` reads; the others it meets are annotations
#: (``description``, ``default``, ``title``, ``$schema``, ``$defs``) and are skipped
SCHEMA_KEYWORDS = frozenset(
    {
        "$ref",
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
    }
)


def _type_fits(value: Any, schema: Mapping[str, Any] | bool, root: Mapping[str, Any]) -> bool:
    """Whether ``value`` is of a type ``schema`` allows (or the schema names none)."""
    if not isinstance(schema, Mapping):
        return bool(schema)
    kinds = _resolve(schema, root).get("type")
    if kinds is None:
        return True
    return any(_is_type(value, k) for k in ([kinds] if isinstance(kinds, str) else kinds))


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    return isinstance(value, kinds.get(kind, ()))


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``True`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def schema_errors(
    value: Any, schema: Mapping[str, Any] | bool, root: Mapping[str, Any] | None = None, path: tuple = ()
) -> list[tuple[tuple, str]]:
    """Every violation of the JSON ``schema`` (draft 2020-12, the keywords of
    :data:`SCHEMA_KEYWORDS`, local ``$ref`` only) by ``value``, as (path, message); the
    messages are worded as jsonschema words them. No jsonschema needed."""
    root = schema if root is None else root  # type: ignore[assignment]
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [(path, f"False schema does not allow {value!r}")]
    schema = _resolve(schema, root)  # type: ignore[arg-type]
    errors: list[tuple[tuple, str]] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is_type(value, k) for k in kinds):
            return [(path, f"{value!r} is not of type {', '.join(repr(k) for k in kinds)}")]
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        errors.append((path, f"{value!r} is not one of {schema['enum']!r}"))
    if "const" in schema and not _same(value, schema["const"]):
        errors.append((path, f"{schema['const']!r} was expected"))
    if _is_type(value, "number"):
        errors += _number_errors(value, schema, path)
    if isinstance(value, str):
        errors += _string_errors(value, schema, path)
    if isinstance(value, list):
        errors += _array_errors(value, schema, root, path)
    if isinstance(value, dict):
        errors += _object_errors(value, schema, root, path)
    errors += _combinator_errors(value, schema, root, path)
    return errors


def _number_errors(value: Any, schema: Mapping[str, Any], path: tuple) -> list[tuple[tuple, str]]:
    """:func:`schema_errors`' bounds on a number."""
    errors: list[tuple[tuple, str]] = []
    for key, fails, words in (
        ("minimum", lambda v, m: v < m, "less than the minimum of"),
        ("maximum", lambda v, m: v > m, "greater than the maximum of"),
        ("exclusiveMinimum", lambda v, m: v <= m, "less than or equal to the minimum of"),
        ("exclusiveMaximum", lambda v, m: v >= m, "greater than or equal to the maximum of"),
    ):
        if key in schema and fails(value, schema[key]):
            errors.append((path, f"{value!r} is {words} {schema[key]!r}"))
    return errors


def _string_errors(value: str, schema: Mapping[str, Any], path: tuple) -> list[tuple[tuple, str]]:
    """:func:`schema_errors`' length and pattern checks on a string."""
    errors: list[tuple[tuple, str]] = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append((path, f"{value!r} is too short"))
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append((path, f"{value!r} is too long"))
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append((path, f"{value!r} does not match {schema['pattern']!r}"))
    return errors


def _array_errors(
    value: list, schema: Mapping[str, Any], root: Mapping[str, Any], path: tuple
) -> list[tuple[tuple, str]]:
    """:func:`schema_errors`' checks on an array, its items' included."""
    errors: list[tuple[tuple, str]] = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            (path, f"{value!r} should be non-empty" if schema["minItems"] == 1 else f"{value!r} is too short")
        )
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append((path, f"{value!r} is too long"))
    if schema.get("uniqueItems"):
        seen: list[Any] = []
        for item in value:
            if any(_same(item, s) for s in seen):
                errors.append((path, f"{value!r} has non-unique elements"))
                break
            seen.append(item)
    if "items" in schema:
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], root, path + (i,))
    return errors


def _object_errors(
    value: dict, schema: Mapping[str, Any], root: Mapping[str, Any], path: tuple
) -> list[tuple[tuple, str]]:
    """:func:`schema_errors`' checks on an object, its properties' included."""
    errors: list[tuple[tuple, str]] = []
    for key in schema.get("required", []):
        if key not in value:
            errors.append((path, f"{key!r} is a required property"))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            (
                path,
                f"{value!r} should be non-empty"
                if schema["minProperties"] == 1
                else f"{value!r} does not have enough properties",
            )
        )
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append((path, f"{value!r} has too many properties"))
    props, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extra = []
    for key, item in value.items():
        matched = False
        if key in props:
            matched = True
            errors += schema_errors(item, props[key], root, path + (key,))
        for pattern, sub in patterns.items():
            if re.search(pattern, str(key)):
                matched = True
                errors += schema_errors(item, sub, root, path + (key,))
        if not matched:
            extra.append(key)
    errors += _additional_errors(value, extra, schema, root, path)
    return errors


def _additional_errors(
    value: dict, extra: list, schema: Mapping[str, Any], root: Mapping[str, Any], path: tuple
) -> list[tuple[tuple, str]]:
    """:func:`schema_errors`' check of the ``extra`` keys (matched by no property or pattern)."""
    errors: list[tuple[tuple, str]] = []
    props, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    additional = schema.get("additionalProperties", True)
    if extra and additional is False:
        if patterns and not props:
            listed = ", ".join(repr(k) for k in extra)
            verb = "does" if len(extra) == 1 else "do"
            errors.append(
                (
                    path,
                    f"{listed} {verb} not match any of the regexes: {', '.join(repr(p) for p in sorted(patterns))}",
                )
            )
        else:
            listed = ", ".join(repr(k) for k in extra)
            errors.append(
                (
                    path,
                    f"Additional properties are not allowed ({listed} "
                    f"{'was' if len(extra) == 1 else 'were'} unexpected)",
                )
            )
    elif extra and isinstance(additional, Mapping):
        for key in extra:
            errors += schema_errors(value[key], additional, root, path + (key,))
    return errors


def _combinator_errors(
    value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], path: tuple
) -> list[tuple[tuple, str]]:
    """:func:`schema_errors`' ``allOf``, ``anyOf``, ``oneOf`` and ``not``."""
    errors: list[tuple[tuple, str]] = []
    for sub in schema.get("allOf", []):
        errors += schema_errors(value, sub, root, path)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            results = [schema_errors(value, sub, root, path) for sub in schema[key]]
            valid = sum(1 for r in results if not r)
            # the one alternative of the value's type speaks for all (jsonschema's best match
            # descends into it too): "'maybe' is not one of ['true', 'false']"
            typed = [r for sub, r in zip(schema[key], results) if _type_fits(value, sub, root)]
            if valid == 0 and len(typed) == 1:
                errors += typed[0]
            elif valid == 0:
                errors.append((path, f"{value!r} is not valid under any of the given schemas"))
            elif key == "oneOf" and valid > 1:
                errors.append((path, f"{value!r} is valid under each of the given schemas"))
    if "not" in schema and not schema_errors(value, schema["not"], root, path):
        errors.append((path, f"{value!r} should not be valid under {schema['not']!r}"))
    return errors


def resolve_job(config: Mapping[str, Any], experiment: str, dataset: str, method: str, seed: int) -> dict[str, Any]:
    """Flat specification of one training job (see module docstring for the layers).

    Returns a dict with the method keys (``rule``, ``space``, options), the training
    settings, and ``experiment``, ``dataset``, ``method``, ``seed``, ``scale``.
    """
    exp = config["experiments"][experiment]
    blocks = [exp] + ([exp.get("quick") or {}] if config["scale"] == "quick" else [])
    layers: list[Mapping[str, Any] | None] = [config["methods"][method]]
    for block in blocks:
        on_dataset = dict((block.get("datasets") or {}).get(dataset) or {})
        on_dataset.pop("hmc", None)  # the HMC reference's, not training's (resolve_hmc_job)
        per_method = on_dataset.pop("method_settings", None) or {}
        layers += [
            block.get("settings"),
            on_dataset,
            (block.get("method_settings") or {}).get(method),
            per_method.get(method),
        ]
    job = _merge(*layers)
    for key in DISPLAY_KEYS:  # display only: changing them must not retrain (reports get them separately)
        job.pop(key, None)
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
    dataset's settings (no method layer) plus the merged ``hmc`` blocks: the experiment's,
    then the dataset's (``datasets.<dataset>.hmc``), then at quick scale the quick block's
    and its dataset's."""
    exp = config["experiments"][experiment]
    on_dataset = dict((exp.get("datasets") or {}).get(dataset) or {})
    layers = [exp.get("settings"), on_dataset]
    hmc_layers = [exp.get("hmc"), on_dataset.pop("hmc", None)]
    if config["scale"] == "quick":
        quick = exp.get("quick") or {}
        quick_dataset = dict((quick.get("datasets") or {}).get(dataset) or {})
        layers += [quick.get("settings"), quick_dataset]
        hmc_layers += [quick.get("hmc"), quick_dataset.pop("hmc", None)]
    # the network's settings only (repens.jobs.job.HMCJob): not the particle methods' training
    job = {k: v for k, v in _merge(*layers).items() if k in HMCJob.setting_names()}
    job.update(
        hmc=_merge(*hmc_layers),
        experiment=experiment,
        dataset=dataset,
        method="hmc",
        seed=int(seed),
        scale=config["scale"],
    )
    return job
