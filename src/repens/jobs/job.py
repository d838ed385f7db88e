"""A job's settings as typed, frozen objects: the one place where each default lives.

:func:`repens.pipeline.config.resolve_job` layers ``config.yaml`` into one flat dict per
training job (the *spec*); ``python -m repens train --spec JSON`` turns it into a
:class:`Job` with :meth:`Job.from_spec`, which picks the experiment's class
(:data:`JOB_TYPES`), rejects a key the class does not have with one line naming it,
converts numbers (``"1e-3"``, ``5.0`` for an integer) and fills the defaults.

A job keeps the spec it was made from. :meth:`Job.key` hashes that dict
(:func:`repens.core.jobkey.job_key`), so the key of a job, and every checkpoint and result
keyed by it, is what it was when jobs were dicts: a default filled in, or ``10`` read as
``10.0``, never changes a key. :meth:`Job.replace` makes a changed job with its spec
changed alike (``dataclasses.replace`` would leave the spec behind and is refused).

Defaults are written once, on their field. Settings of one experiment are fields of its
class (the toys batch 64 examples, the images 256); a network's settings are a small
class of their own (:class:`ToyNetwork`, :class:`UCINetwork`, :class:`ImageNetwork`)
that the model builders take, and that the HMC reference (:class:`HMCJob`) shares with
the toy runs. The update rules' options default to ``None``, meaning the rule's own
default (the keyword defaults in :mod:`repens.methods.updates`); a runner passes a rule only the
options it takes (:meth:`Job.rule_options`). The rule, space and estimator a job accepts
are the names :mod:`repens.core.registry` holds when the job is made (:data:`REGISTRY_CHOICES`).

``tests/test_job.py`` ties these classes to ``workflow/schemas/config.schema.yaml``:
every setting the schema lets reach a job is a field and every field is a setting (but
:data:`NOT_SETTINGS`; the schema's :data:`WORKFLOW_ONLY` keys never reach a job), with
the same types, choices and defaults, and every job the shipped config resolves to
round-trips through :meth:`Job.from_spec`.

No torch here: the workflow imports this module (through :mod:`repens.pipeline.config`) when it loads.
"""

from __future__ import annotations

import copy
import difflib
import math
import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Literal, Self, Union, get_args, get_origin, get_type_hints

from repens.core import registry
from repens.core.jobkey import job_key
from repens.jobs.rule_options import FUNCTION_SPACE, options_of

__all__ = [
    "SpecError",
    "Job",
    "SyntheticJob",
    "ToyJob",
    "UCIJob",
    "ImageJob",
    "HMCJob",
    "ToyNetwork",
    "UCINetwork",
    "ImageNetwork",
    "JOB_TYPES",
    "RULE_FIELDS",
    "NOT_SETTINGS",
    "WORKFLOW_ONLY",
    "settings_of",
    "default_of",
]

#: fields of a job naming its update rule and the rule's options (config: a method entry)
RULE_FIELDS = (
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
    "anchor_divisor",
    "function_output",
    "repulsion_scale",
)

#: fields no settings layer of config.yaml sets: resolve_job fills in which run a job is
#: from where it sits in the config, and rule train_uci adds the top-level ``uci_data``
NOT_SETTINGS = frozenset({"experiment", "dataset", "method", "seed", "scale", "uci_data"})

#: keys of the schema's method and settings layers that never reach a job: a method's
#: display name and the paper's row it is set beside (resolve_job drops them: changing
#: them must not retrain) and the nested layer
WORKFLOW_ONLY = frozenset({"label", "paper_row", "method_settings"})


class SpecError(ValueError):
    """A job spec with a key its experiment does not have, a missing setting or a value of
    the wrong type; the message names the key."""


# ------------------------------------------------------------------ conversion
_NONE = type(None)


def _describe(kind: Any) -> str:
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is dict:
        return "an object"
    if origin is tuple:
        if args[-1] is Ellipsis:
            return f"a list of {_describe(args[0]).removeprefix('an ').removeprefix('a ')}s"
        return f"a list of {len(args)} {_describe(args[0]).removeprefix('an ').removeprefix('a ')}s"
    return {
        int: "an integer",
        float: "a finite number",
        bool: "true or false",
        str: "a string",
        _NONE: "null",
        dict: "an object",
    }.get(kind, str(kind))


class _Mismatch(Exception):
    pass


def _convert(value: Any, kind: Any) -> Any:
    """``value`` as ``kind`` (an annotation of a field), or :class:`_Mismatch`."""
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        if value is None and _NONE in get_args(kind):
            return None
        for arm in get_args(kind):
            try:
                return _convert(value, arm)
            except _Mismatch:
                pass
        raise _Mismatch
    if origin is Literal:
        if isinstance(value, str) and value in get_args(kind):
            return value
        raise _Mismatch
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        args = get_args(kind)
        if args[-1] is Ellipsis:
            return tuple(_convert(v, args[0]) for v in value)
        if len(value) != len(args):
            raise _Mismatch
        return tuple(_convert(v, a) for v, a in zip(value, args))
    if isinstance(value, bool):  # a bool is an int to Python, never to a spec
        if kind is bool:
            return value
        raise _Mismatch
    if kind is int:
        if isinstance(value, str):
            value = _number(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)  # steps: 1e4
        raise _Mismatch
    if kind is float:
        if isinstance(value, str):
            value = _number(value)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
        raise _Mismatch
    if kind is str and isinstance(value, str):
        return value
    if dict in (kind, origin) and isinstance(value, Mapping):
        return copy.deepcopy(dict(value))
    raise _Mismatch


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _Mismatch from None


def _plain(value: Any) -> Any:
    """A field's value as JSON has it (tuples as lists)."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


_HINTS: dict[type, dict[str, Any]] = {}
_FIELDS: dict[type, dict[str, Any]] = {}


#: fields whose choices are a registry's names (:mod:`repens.core.registry`): declared ``str``,
#: they read as ``Literal`` of the names registered when a job is made
REGISTRY_CHOICES: dict[str, Any] = {
    "rule": registry.rule_names,
    "space": lambda: registry.SPACES,
    "estimator": registry.estimator_names,
}


def _with_choices(kind: Any, choices: tuple[str, ...]) -> Any:
    """``kind`` with its ``str`` read as ``Literal[choices]`` (also inside ``str | None``)."""
    if kind is str:
        return Literal[choices]
    if get_origin(kind) in (Union, types.UnionType):
        return Union[tuple(_with_choices(arm, choices) for arm in get_args(kind))]  # noqa: UP007 (a runtime tuple of arms)
    return kind


def _hints(cls: type) -> dict[str, Any]:
    """The evaluated annotation of every field of ``cls`` (the registry's choices as of now)."""
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    hints = _HINTS[cls]
    if not REGISTRY_CHOICES.keys() & hints.keys():
        return hints
    return {
        **hints,
        **{name: _with_choices(hints[name], choices()) for name, choices in REGISTRY_CHOICES.items() if name in hints},
    }


def _fields(cls: type) -> dict[str, Any]:
    """The settings of ``cls`` (every field but ``spec``) by name, in field order."""
    if cls not in _FIELDS:
        _FIELDS[cls] = {f.name: f for f in fields(cls) if f.name != "spec"}
    return _FIELDS[cls]


def default_of(cls: type, name: str) -> Any:
    """The default of setting ``name`` of ``cls`` (:data:`dataclasses.MISSING` if it has none)."""
    if name not in _fields(cls):
        raise KeyError(f"{cls.__name__} has no setting {name!r}")
    f = _fields(cls)[name]
    return f.default if f.default_factory is MISSING else f.default_factory()


@dataclass(frozen=True, kw_only=True)
class _Settings:
    """Typed settings: every field is converted to its annotation when the object is made."""

    @classmethod
    def setting_names(cls) -> frozenset[str]:
        """The keys a spec of this class may hold."""
        return frozenset(_fields(cls))

    @classmethod
    def required_names(cls) -> tuple[str, ...]:
        """Settings without a default, in field order."""
        return tuple(n for n, f in _fields(cls).items() if f.default is MISSING and f.default_factory is MISSING)

    @classmethod
    def pick(cls, settings: Mapping[str, Any]) -> Self:
        """The settings of ``cls`` found in ``settings`` (other keys ignored, missing ones defaulted)."""
        if isinstance(settings, cls):
            return settings
        names = cls.setting_names()
        for name in cls.required_names():
            if settings.get(name) is None:
                raise SpecError(f"{cls.__name__}: setting {name!r} is missing")
        return cls(**{k: v for k, v in settings.items() if k in names})

    def _where(self) -> str:
        return type(self).__name__

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for name in sorted(self.setting_names()):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, _convert(value, hints[name]))
            except _Mismatch:
                kind = hints[name]
                if get_origin(kind) is Literal:
                    raise SpecError(
                        f"{self._where()}: setting {name!r}: unknown {name} {value!r}; known: {list(get_args(kind))}"
                    ) from None
                raise SpecError(
                    f"{self._where()}: setting {name!r}: expected {_describe(kind)}, got {value!r}"
                ) from None
        self._check()

    def _check(self) -> None:
        """Checks between settings (after conversion); raise :class:`SpecError`."""


# ------------------------------------------------------------------ networks
@dataclass(frozen=True, kw_only=True)
class ToyNetwork(_Settings):
    """The BNN of the toy problems (G.2 / G.3), shared by the method runs and HMC."""

    #: widths of the MLP's hidden ReLU layers
    hidden: tuple[int, ...] = (50, 50)
    #: sd of the N(0, prior_std^2 I) prior on every weight and bias
    prior_std: float = 1.0
    #: sd of the Gaussian likelihood (regression; the data's own noise sd)
    noise_std: float = 0.5


@dataclass(frozen=True, kw_only=True)
class UCINetwork(_Settings):
    """The one-hidden-layer regression network of Table 2, on standardized targets."""

    #: sd of the Gaussian likelihood on standardized targets (Pearce et al. 2020, Table 4)
    noise_std: float
    #: hidden widths (None: one layer of n_hidden.txt units, 50; 100 for protein)
    hidden: tuple[int, ...] | None = None
    #: Pearce et al. (2020) prior: first-layer bias variance (W_1 b_1/D, later layers 1/fan_in); None: prior_std
    prior_bias_var: float | None = None
    #: sd of an isotropic prior on every weight, used when prior_bias_var is None
    prior_std: float = 1.0
    #: whether the output layer has a bias (Pearce et al. 2020, Sec. 3: "we have dropped the final bias")
    output_bias: bool = True


@dataclass(frozen=True, kw_only=True)
class ImageNetwork(_Settings):
    """The classifier of Table 1 (repens.models.networks.build_model)."""

    #: mlp (hidden) or resnet (depth, width, norm)
    model: Literal["mlp", "resnet"] = "mlp"
    #: mlp: widths of the hidden ReLU layers (G.4: 3 x 100)
    hidden: tuple[int, ...] = (100, 100, 100)
    #: resnet: depth 6n+2 (32: ResNet32)
    depth: int = 32
    #: resnet: base width (16 in He et al. 2016)
    width: int = 16
    #: resnet: normalisation (see docs/choices.md)
    norm: Literal["group", "none"] = "group"


# ------------------------------------------------------------------ jobs
@dataclass(frozen=True, kw_only=True)
class _Spec(_Settings):
    """Settings made from a spec (a JSON object) that keep it: the key, the record of the run."""

    #: the experiment (a runner of repens.experiments.RUNNERS)
    experiment: str
    #: the data set (synthetic: the target)
    dataset: str
    #: the method's key in config.yaml
    method: str
    #: seed of every random stream of the run
    seed: int
    #: the config's scale (quick or paper) the job was resolved at; provenance only
    scale: str | None = None
    #: the spec this job was made from, as given (read-only; :meth:`to_spec` copies it)
    spec: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Self:
        """The job of ``spec``: an unknown key, a missing setting or a value of the wrong
        type raises :class:`SpecError` naming the key."""
        if not isinstance(spec, Mapping):
            raise SpecError(f"a job spec is a JSON object, got {type(spec).__name__}")
        cls = cls._class_for(spec)
        where = _where_of(cls, spec)
        names = cls.setting_names()
        for key in spec:
            if key not in names:
                close = difflib.get_close_matches(str(key), sorted(names), n=1)
                hint = (
                    f"did you mean {close[0]!r}?" if close else f"{cls.__name__} settings: {', '.join(sorted(names))}"
                )
                raise SpecError(f"{where}: unknown setting {key!r} ({hint})")
        for name in cls.required_names():
            if spec.get(name) is None:
                raise SpecError(f"{where}: setting {name!r} is missing")
        return cls(**spec, spec=copy.deepcopy(dict(spec)))

    @classmethod
    def of(cls, job: Self | Mapping[str, Any]) -> Self:
        """``job`` itself if it is one of ``cls``, else the job of the spec ``job`` (what a runner is given)."""
        return job if isinstance(job, cls) else cls.from_spec(job)

    @classmethod
    def _class_for(cls, spec: Mapping[str, Any]) -> type[Self]:
        return cls

    def to_spec(self) -> dict[str, Any]:
        """The spec (a copy): ``from_spec(job.to_spec()) == job``."""
        return copy.deepcopy(self.spec)

    def key(self, *extra: Any) -> str:
        """:func:`repens.core.jobkey.job_key` of the spec (and ``extra``)."""
        return job_key(self.spec, *extra)

    def replace(self, **changes: Any) -> Self:
        """This job with ``changes`` made to it and to its spec."""
        return type(self).from_spec({**self.spec, **{k: _plain(v) for k, v in changes.items()}})

    def _where(self) -> str:
        return _where_of(type(self), self.__dict__)

    def __post_init__(self) -> None:
        super().__post_init__()
        names = sorted(self.setting_names())
        if not self.spec:  # made directly: the spec holds what differs from the defaults
            spec = {
                n: _plain(getattr(self, n))
                for n in names
                if default_of(type(self), n) is MISSING or getattr(self, n) != default_of(type(self), n)
            }
            object.__setattr__(self, "spec", spec)
            return
        hints = _hints(type(self))
        for name in names:
            try:
                said = _convert(self.spec[name], hints[name]) if name in self.spec else default_of(type(self), name)
            except _Mismatch:
                said = self.spec[name]
            if said != getattr(self, name):
                raise SpecError(
                    f"{self._where()}: {name}={getattr(self, name)!r} but the job's spec says "
                    f"{said!r}; make a changed job with job.replace({name}=...), which changes both"
                )


def _where_of(cls: type, spec: Mapping[str, Any]) -> str:
    parts = [str(spec[k]) for k in ("dataset", "method", "seed") if spec.get(k) is not None]
    return f"{spec.get('experiment', cls.__name__)} job" + (f" {'/'.join(parts)}" if parts else "")


@dataclass(frozen=True, kw_only=True)
class Job(_Spec):
    """One training job: one method, one data set, one seed. ``Job.from_spec`` makes the
    experiment's subclass (:data:`JOB_TYPES`)."""

    #: the experiment whose runner takes this class (subclasses)
    EXPERIMENT: ClassVar[str] = ""
    #: progress lines over a run when log_every is unset
    LOG_LINES: ClassVar[int] = 10

    # the update rule (config: the method entry) -------------------------------
    #: the update rule (one of repens.core.registry.RULES)
    rule: str
    #: where the repulsion acts (repens.core.registry.SPACES; function: the rules with a function-space form)
    space: str = "weight"
    #: wgd: the estimator of grad log rho (one of repens.core.registry.ESTIMATORS; None: the rule's default)
    estimator: str | None = None
    #: sge/ssge: ridge of the estimator (None: the rule's default)
    eta: float | None = None
    #: ssge: eigenfunctions kept (None keeps all)
    num_eigs: int | None = None
    #: function space: the function prior's score, ssge from prior draws or a GP (None: the rule's default)
    function_prior: Literal["ssge", "gp"] | None = None
    #: prior draws per step (function prior; langevin's MMD term) (None: the rule's default)
    prior_samples: int | None = None
    #: function prior, ssge: ridge (None: the rule's default)
    prior_eta: float | None = None
    #: function prior, gp: RBF lengthscale (None: the rule's default)
    gp_lengthscale: float | None = None
    #: function prior, gp: RBF variance (None: the rule's default)
    gp_variance: float | None = None
    #: langevin: temperature of the noise (None: the rule's default)
    temperature: float | None = None
    #: langevin: weight of the MMD repulsion (DRLE; None: the rule's default, none)
    mmd_weight: float | None = None
    #: anchored: what divides the anchoring term, n_train (Eq. 11) or batch (Pearce et al.'s code)
    #: (None: the rule's default, n_train)
    anchor_divisor: Literal["n_train", "batch"] | None = None
    #: function space: the output the rule's kernel and scores see, logits or softmax (the
    #: released code's default) (None: the rule's default, logits)
    function_output: Literal["logits", "softmax"] | None = None
    #: svgd (both spaces): factor on the kernel-gradient term, a number or num_train (N, the
    #: released code's --num_train) (None: the rule's default, 1)
    repulsion_scale: Literal["num_train"] | float | None = None

    # training -----------------------------------------------------------------
    #: number of particles (ensemble members)
    particles: int
    #: optimizer steps
    steps: int
    #: learning rate
    lr: float
    #: the optimizer of the particles
    optimizer: Literal["adam", "sgd"] = "adam"
    #: RBF kernel bandwidth h in exp(-|x-y|^2/h), or the median heuristic
    bandwidth: Literal["median"] | float = "median"
    #: steps between progress lines (None: LOG_LINES lines over the run)
    log_every: int | None = None
    #: seconds between periodic checkpoints (None: $REPENS_CHECKPOINT_SECONDS, else 300; repens.training.train)
    checkpoint_seconds: float | None = None
    #: fixed: lr is the step; curvature: eta = curvature_fraction / L at the initial particles,
    #: capped by lr (repens.training.fitting.curvature_step; ULA for the Langevin rules)
    step_size: Literal["fixed", "curvature"] = "fixed"
    #: curvature step: eta * L (0.1: ULA's variance +5 % in the stiffest direction; repens.methods.step_size)
    curvature_fraction: float = 0.1
    #: fraction of the steps run first as a deep ensemble (Eq. 2; adam at lr and its schedule), after
    #: which the rule runs from those particles at a constant step (repens.training.fitting.burn_in)
    burn_in: float = 0.0

    @classmethod
    def _class_for(cls, spec: Mapping[str, Any]) -> type[Job]:
        experiment = spec.get("experiment")
        if cls is Job:
            if experiment not in JOB_TYPES:
                raise SpecError(f"job spec: experiment {experiment!r} has no runner; known: {sorted(JOB_TYPES)}")
            return JOB_TYPES[experiment]
        if experiment != cls.EXPERIMENT:
            raise SpecError(f"job spec: experiment {experiment!r} is not a {cls.EXPERIMENT} job ({cls.__name__})")
        return cls

    def rule_options(self) -> dict[str, Any]:
        """The options the update rule takes, as keyword arguments (those set)."""
        allowed = options_of(self.rule, self.space, self.estimator)
        return {k: getattr(self, k) for k in RULE_FIELDS if k in allowed and getattr(self, k) is not None}

    def log_interval(self, steps: int) -> int:
        """Steps between progress lines of a run of ``steps`` steps."""
        return self.log_every if self.log_every is not None else max(1, steps // self.LOG_LINES)

    def _check(self) -> None:
        if not 0.0 <= self.burn_in < 1.0:
            raise SpecError(f"{self._where()}: burn_in must be a fraction of the steps in [0, 1), got {self.burn_in}")
        if self.space == "function" and self.rule not in FUNCTION_SPACE:
            raise SpecError(
                f"{self._where()}: rule {self.rule!r} has no function-space form "
                f"(only {', '.join(sorted(FUNCTION_SPACE))})"
            )


@dataclass(frozen=True, kw_only=True)
class SyntheticJob(Job):
    """Appendix G.1: particles sampling a 2-D target (``dataset``: gaussian, funnel)."""

    EXPERIMENT: ClassVar[str] = "synthetic"
    LOG_LINES: ClassVar[int] = 10

    #: sd of the N(0, init_std^2 I) initial particles
    init_std: float


@dataclass(frozen=True, kw_only=True)
class ToyJob(ToyNetwork, Job):
    """Appendix G.2 / G.3: a BNN on the 1-D regression or 2-D classification toy."""

    EXPERIMENT: ClassVar[str] = "toy"
    LOG_LINES: ClassVar[int] = 20

    #: training points per minibatch
    batch_size: int = 64


@dataclass(frozen=True, kw_only=True)
class UCIJob(UCINetwork, Job):
    """Table 2: one method on the standard splits of one UCI data set, trained as one stack."""

    EXPERIMENT: ClassVar[str] = "uci"
    LOG_LINES: ClassVar[int] = 20

    #: optimizer steps (None: epochs passes over the training rows)
    steps: int | None = None
    #: training rows per minibatch
    batch_size: int
    #: passes over the training rows when steps is None (None: n_epochs.txt, 40; 20 for protein)
    epochs: int | None = None
    #: the learning rate decays by lr_decay every lr_decay_steps steps, staircase (Pearce et al.
    #: 2020, Table 4 "Decay Rate"); 1: constant
    lr_decay: float = 1.0
    #: optimizer steps between decays (None: one epoch, ceil(N / B) steps)
    lr_decay_steps: int | None = None
    #: the first K splits (None: all, 20; 5 for protein)
    splits: int | None = None
    #: the UCI data root (None: $REPENS_UCI_DATA, else data/uci); not part of the key
    uci_data: str | None = None


@dataclass(frozen=True, kw_only=True)
class ImageJob(ImageNetwork, Job):
    """Table 1: an ensemble classifier on FashionMNIST or CIFAR-10, OOD on ``ood``."""

    EXPERIMENT: ClassVar[str] = "image"
    LOG_LINES: ClassVar[int] = 20

    #: the OOD test set (mnist, svhn)
    ood: str
    #: training images per minibatch
    batch_size: int = 256
    #: sd of the N(0, prior_std^2 I) prior (a hyper-deep ensemble's L2 search replaces it per member)
    prior_std: float = 1.0
    #: initial particles: prior draws (G.4), He initialisation (G.5), or PyTorch's default
    #: layer initialisation, as the released FashionMNIST code starts its particles
    init: Literal["prior", "he", "torch"] = "prior"
    #: pixels: unit = [0, 1]; standard = standardised per channel with the training set's statistics
    normalize: Literal["unit", "standard"] = "unit"
    #: particles evaluated at once (None: all)
    chunk_size: int | None = None
    #: float32 matmuls and convolutions on a GPU: highest = full fp32, high = TF32 allowed
    #: (PyTorch 1.7-1.11's default on Ampere GPUs); None: torch's defaults
    #: (repens.experiments.image.apply_matmul_precision)
    matmul_precision: Literal["highest", "high"] | None = None
    #: hyper-deep ensemble: random search of the L2 strength first
    l2_search: bool = False
    #: log-uniform range of the L2 strength (prior precision) the search draws from
    l2_range: tuple[float, float] = (1e-3, 1e3)
    #: L2 strengths the search tries (all trained at once, as one stack)
    search_trials: int = 20
    #: best strengths the ensemble keeps (members cycle through them)
    search_top: int = 5
    #: steps of the search's training (None: steps)
    search_steps: int | None = None
    #: share of the training set held out to rank the strengths
    val_fraction: float = 0.1
    #: what ranks the strengths on that split: each candidate's NLL (lowest first) or its
    #: accuracy (highest first); G.4 keeps "5 top values" without saying by what
    search_rank: Literal["nll", "accuracy"] = "nll"

    def _check(self) -> None:
        super()._check()
        if self.l2_search:
            if not 0 < self.search_top <= self.search_trials:
                raise SpecError(
                    f"{self._where()}: search_top={self.search_top} is more than "
                    f"search_trials={self.search_trials} (or below 1)"
                )
            low, high = self.l2_range
            if not 0 < low < high:
                raise SpecError(
                    f"{self._where()}: l2_range [{low}, {high}] is empty (the first bound must be "
                    "the lower, both positive)"
                )


@dataclass(frozen=True, kw_only=True)
class HMCJob(ToyNetwork, _Spec):
    """The NUTS reference of a toy problem (repens.pipeline.config.resolve_hmc_job): the toy's network
    and the ``hmc`` block (repens.training.hmc.HMCSettings checks its keys)."""

    #: the reference's name in result paths
    method: str = "hmc"
    #: the NUTS settings (repens.training.hmc.HMCSettings.from_dict; missing keys take its defaults)
    hmc: dict[str, Any] = field(default_factory=dict)
    #: dtype of the network and the chains
    dtype: Literal["float32", "float64"] = "float32"
    #: torch CPU threads while sampling
    threads: int = 1


#: the job class of each experiment (``Job.from_spec`` picks by the spec's ``experiment``)
JOB_TYPES: dict[str, type[Job]] = {cls.EXPERIMENT: cls for cls in (SyntheticJob, ToyJob, UCIJob, ImageJob)}


def settings_of(cls: type[_Spec]) -> frozenset[str]:
    """The keys of ``cls`` that config.yaml's settings layers may set (all but :data:`NOT_SETTINGS`)."""
    return cls.setting_names() - NOT_SETTINGS
