"""Checks that stop a bad setting before any job starts, each in one line naming it.

The workflow runs them (workflow/rules/preflight.smk) and raises their
:class:`CheckError` as a Snakemake ``WorkflowError``:

* at load (``snakemake -n`` too): the YAML of config.yaml and of every ``--configfile``
  (:func:`check_config_files`: a key written twice, a syntax error), the method labels
  (:func:`check_labels`: mathtext the figures can draw), the environment variables the
  package reads (:func:`check_environment`), and the folders the workflow writes
  (:func:`check_output_folders`: ``results`` or ``logs`` must not be a regular file);
* once the jobs are planned, before the first starts (a real run only): whether the
  cluster's clients are on PATH (:func:`missing_cluster_clients`) and whether each planned
  training or sampling job fits in memory (:func:`memory_estimate`, :func:`check_memory`).

The sampler's settings (two HMC chains at least, four kept draws per chain) are checked
with the rest of the config by :func:`repens.pipeline.config.check_config`.

Like repens.pipeline.config, this module imports neither torch nor Snakemake (matplotlib only to
parse a label holding ``$``). The environment variables themselves (:data:`ENVIRONMENT`,
:func:`env_setting`, :class:`CheckError`, :class:`EnvError`) live in the low module
:mod:`repens.core.environment`, which a training job reads; they are re-exported here.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repens.core import registry
from repens.core.environment import ENVIRONMENT, CheckError, EnvError, EnvSetting, env_setting

__all__ = [
    "CheckError",
    "EnvError",
    "ENVIRONMENT",
    "EnvSetting",
    "check_config_files",
    "check_yaml_file",
    "check_labels",
    "label_problem",
    "env_setting",
    "check_environment",
    "check_output_folders",
    "blocked_folder",
    "missing_cluster_clients",
    "MemoryEstimate",
    "memory_estimate",
    "parameter_count",
    "machine_memory_bytes",
    "check_memory",
    "LARGEST_GPU_BYTES",
    "gib",
]


# ------------------------------------------------------------------ YAML files
def check_config_files(paths: Iterable[str | os.PathLike]) -> None:
    """:func:`check_yaml_file` on each file (each once, in order; missing ones skipped:
    Snakemake names those itself)."""
    seen: set[Path] = set()
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in seen or not resolved.is_file():
            continue
        seen.add(resolved)
        check_yaml_file(path)


def check_yaml_file(path: str | os.PathLike) -> None:
    """Raise :class:`CheckError` ``<file>:<line>:<column>: ...`` for a YAML syntax error
    or a key written twice in one mapping (YAML loaders keep the last one silently).

    A key that a merge (``<<: *anchor``) brings in and the mapping then sets again is an
    override, not a repeat. JSON files (a YAML subset) are checked the same way. The file
    is read with the loader Snakemake's config reader (yte) uses, PyYAML's FullLoader.
    """
    import yaml

    text = Path(path).read_text(encoding="utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.FullLoader)
        if node is not None:
            _repeated_keys(node, (), path)
        yaml.load(text, Loader=yaml.FullLoader)  # constructor errors (unknown tags, ...)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = err.problem or err.context or "not valid YAML"
        if err.problem and err.context:
            opened = err.context_mark
            at = f" at line {opened.line + 1}, column {opened.column + 1}" if opened and opened is not mark else ""
            what += f" ({err.context}{at})"
        raise CheckError(f"{where}: YAML syntax error: {what}") from None
    except yaml.YAMLError as err:
        raise CheckError(f"{path}: not valid YAML: {err}") from None


_MERGE = "tag:yaml.org,2002:merge"


def _repeated_keys(node: Any, where: tuple[str, ...], path: str | os.PathLike) -> None:
    import yaml

    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                continue
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)
            ident = (key_node.tag, name)
            if ident in first:
                mark = key_node.start_mark
                dotted = ".".join((*where, str(name)))
                before = first[ident]
                both = (
                    f"line {mark.line + 1}, columns {before.column + 1} and {mark.column + 1}"
                    if before.line == mark.line
                    else f"lines {before.line + 1} and {mark.line + 1}"
                )
                raise CheckError(
                    f"{path}:{mark.line + 1}:{mark.column + 1}: key {dotted} is written twice ({both}); "
                    "YAML would keep the last one silently: keep one"
                )
            first[ident] = key_node.start_mark
            _repeated_keys(value_node, (*where, str(name)), path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _repeated_keys(item, (*where[:-1], f"{where[-1]}[{i}]") if where else (f"[{i}]",), path)


# ------------------------------------------------------------------ labels
def label_problem(label: str) -> str | None:
    """Why matplotlib cannot draw ``label`` (None if it can): a label with an even number
    of unescaped ``$`` is mathtext (matplotlib.cbook.is_math_text), parsed here as a
    figure would parse it; one with none is plain text."""
    text = str(label)
    dollars = text.count("$") - text.count(r"\$")
    if dollars <= 0 or dollars % 2:
        return None
    from matplotlib.mathtext import MathTextParser

    try:
        MathTextParser("path").parse(text, dpi=72)
    except (ValueError, RuntimeError) as err:  # pyparsing's errors arrive as ValueError
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        return lines[-1] if lines else type(err).__name__
    return None


def check_labels(config: Mapping[str, Any]) -> None:
    """Every ``methods.<name>.label`` parses as the figures will draw it."""
    for name, entry in (config.get("methods") or {}).items():
        label = (entry or {}).get("label")
        if label is None:
            continue
        problem = label_problem(label)
        if problem:
            raise CheckError(
                f'methods.{name}.label: "{label}" is not valid matplotlib mathtext ({problem}); '
                r"fix the $...$ part or escape a literal dollar as \$"
            )


# ------------------------------------------------------------------ environment
def check_environment(environ: Mapping[str, str] | None = None, config: Mapping[str, Any] | None = None) -> None:
    """:func:`env_setting` of every variable of :data:`ENVIRONMENT` that is set.
    ``REPENS_UCI_DATA`` is skipped where ``config`` sets ``uci_data`` (which wins over it)."""
    environ = os.environ if environ is None else environ
    for name in ENVIRONMENT:
        if name == "REPENS_UCI_DATA" and config is not None and config.get("uci_data"):
            continue
        env_setting(name, environ)


# ------------------------------------------------------------------ output folders
def blocked_folder(folder: str | os.PathLike) -> str | None:
    """What stops ``folder`` (relative to the working directory) from being a folder the
    workflow writes into: the first of it and its parents that is a regular file or a
    broken link, as a one-line reason; None if nothing does."""
    path = Path(folder)
    for part in reversed((path, *path.parents)):
        if str(part) in ("", "."):
            continue
        if part.is_symlink() and not part.exists():
            return f"{part} is a link to {os.readlink(part)}, which does not exist"
        if part.exists() and not part.is_dir():
            kind = "a regular file" if part.is_file() else "not a folder"
            return f"{part} is {kind}"
    return None


def check_output_folders(folders: Iterable[str | os.PathLike]) -> None:
    """Every folder the workflow writes into can be one (``results``, ``logs`` and each
    folder its rules' outputs, logs and benchmarks name before their first wildcard)."""
    for folder in sorted({str(f) for f in folders}):
        reason = blocked_folder(folder)
        if reason:
            raise CheckError(f"{reason}, but the workflow writes files under {folder}/: move or remove it")


def literal_folder(pattern: str) -> str:
    """The folder of a rule's path ``pattern`` before its first wildcard
    (``results/toy/{dataset}/x.npz`` -> ``results/toy``)."""
    head = str(pattern).split("{", 1)[0]
    return head.rstrip("/") if head.endswith("/") else os.path.dirname(head)


# ------------------------------------------------------------------ cluster clients
#: the commands an executor runs on this machine to submit and follow its jobs
CLUSTER_CLIENTS = {"slurm": ("sbatch", "sacct")}


def missing_cluster_clients(executor: str | None, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """One line naming the clients ``executor`` needs that are not on PATH (None if all are,
    or the executor needs none)."""
    needed = CLUSTER_CLIENTS.get(str(executor), ())
    missing = [name for name in needed if which(name) is None]
    if not missing:
        return None
    return (
        f"executor {executor} (--profile slurm or --executor {executor}) runs "
        f"{' and '.join(needed)}, and {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
        "not on PATH: run from a login node of the cluster (or load its SLURM module), or run "
        "without the profile on this machine"
    )


# ------------------------------------------------------------------ memory
#: the interpreter with torch loaded: 0.68-0.72 GB max RSS measured on the smallest jobs
#: (reference/*/benchmark.tsv, synthetic and UCI), rounded up
BASE_BYTES = 2**30
#: bytes of a float32
FLOAT = 4
#: particle-sized buffers alive at once: the weights, their gradient, Adam's two moments, the
#: update with its drift and repulsion parts, a checkpoint copy
PARAM_COPIES = 8
#: n x n buffers of the repulsive rules: squared distances, Gram matrix, kernel gradient
#: terms, the estimator's solves and eigenvectors
KERNEL_COPIES = 6
#: per hidden unit and example in training: the activation kept for backward, its
#: pre-activation, the gradient flowing back, a ReLU mask
ACTIVATION_COPIES = 4
#: image data sets: (training images, test images, image shape), from the registry
IMAGE_SETS = {d.name: (d.train_size, d.test_size, d.shape) for d in registry.DATASETS.values() if d.kind == "image"}
IMAGE_CLASSES = 10
#: images a prediction pass takes at once (repens.experiments.image.predict_details)
IMAGE_EVAL_BATCH = 1000
#: UCI data sets of the standard splits: (rows, input features, splits, hidden units), from the registry
UCI_SETS = {d.name: (d.rows, d.features, d.splits, d.hidden) for d in registry.DATASETS.values() if d.kind == "uci"}
#: toy problems (repens.data.toy): (inputs, outputs, training points, test points), from the registry
TOY_SETS = {
    d.name: (d.inputs, d.outputs, d.train_size, d.test_size) for d in registry.DATASETS.values() if d.kind == "toy"
}
#: test inputs a HMC predictive pass takes at once (repens.experiments.hmc.predict_and_diagnose)
HMC_EVAL_POINTS = 400
#: repens.training.hmc.HMCSettings' defaults of what the estimate reads
HMC_DEFAULTS = {"chains": 8, "samples": 1000, "thin": 1}


@dataclass
class MemoryEstimate:
    """A rough upper bound of one job's peak memory, in bytes, by what holds it."""

    #: bytes by term: base, data, particles, kernel, activations (a sampling job: draws, predictive)
    terms: dict[str, float]
    #: the size behind the terms, for the message ("50 particles x 99,710 parameters, batch 256")
    sizes: str
    #: terms that live on the GPU when the job trains on one (the rest stay on the host)
    device_terms: frozenset[str] = field(default_factory=frozenset)

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    def host(self, on_gpu: bool) -> float:
        return sum(v for k, v in self.terms.items() if not on_gpu or k not in self.device_terms or k == "data")

    def device(self) -> float:
        return sum(v for k, v in self.terms.items() if k in self.device_terms)

    def largest(self) -> str:
        return max(self.terms, key=lambda k: self.terms[k])


def _mlp(widths: list[int], output_bias: bool = True) -> tuple[int, int, int]:
    """(parameters, activations per example, widest layer) of a ReLU MLP of layer ``widths``."""
    params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:])) - (0 if output_bias else widths[-1])
    return params, sum(widths[1:]), max(widths[1:])


def _resnet(depth: int, width: int, shape: tuple[int, ...], norm: str, classes: int) -> tuple[int, int, int]:
    """(parameters, activations per example, widest layer) of repens.models.networks.ResNet: a 3x3
    stem, three stages of (depth - 2) / 6 basic blocks (channels width, 2 width, 4 width;
    the spatial size halves from one stage to the next), GroupNorm's two vectors per
    convolution."""
    blocks = max((depth - 2) // 6, 1)
    normed = 2 if norm == "group" else 0
    channels, pixels = shape[0], math.prod(shape[1:])
    params = channels * width * 9 + normed * width
    acts = pixels * width
    cin = width
    for stage in range(3):
        cout = width * 2**stage
        for _ in range(blocks):
            params += cin * cout * 9 + cout * cout * 9 + 2 * normed * cout
            acts += 2 * cout * pixels // 4**stage
            cin = cout
    return params + cin * classes + classes, acts + classes, pixels * width


def _network(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """(parameters, activations per example, widest layer) of one particle of the job ``spec``."""
    experiment, dataset = spec.get("experiment"), spec.get("dataset")
    if experiment == "synthetic":
        return 2, 0, 0  # both targets (repens.models.targets) are 2-D
    if experiment in ("toy", None) or spec.get("method") == "hmc":
        d_in, d_out, _, _ = TOY_SETS.get(dataset, (2, 5, 200, 3600))
        return _mlp([d_in, *(spec.get("hidden") or (50, 50)), d_out])
    if experiment == "uci":
        _, features, _, hidden = UCI_SETS.get(dataset, (10000, 16, 20, 50))
        return _mlp([features, *(spec.get("hidden") or (hidden,)), 1], spec.get("output_bias", True))
    if experiment == "image":
        shape = IMAGE_SETS.get(dataset, IMAGE_SETS["cifar10"])[2]
        if spec.get("model", "mlp") == "resnet":
            return _resnet(
                int(spec.get("depth", 32)), int(spec.get("width", 16)), shape, spec.get("norm", "group"), IMAGE_CLASSES
            )
        return _mlp([math.prod(shape), *(spec.get("hidden") or (100, 100, 100)), IMAGE_CLASSES])
    raise ValueError(f"no memory model for experiment {experiment!r}")


def parameter_count(spec: Mapping[str, Any]) -> int:
    """Parameters of one particle (one network) of the job ``spec``."""
    return _network(spec)[0]


def _hmc_memory(spec: Mapping[str, Any], params: int, widest: int, terms: dict[str, float]) -> MemoryEstimate:
    """:func:`memory_estimate` of an HMC reference: its chains' state, kept draws and predictive."""
    hmc = {**HMC_DEFAULTS, **(spec.get("hmc") or {})}
    chains, kept = int(hmc["chains"]), int(hmc["samples"]) // max(int(hmc["thin"]), 1)
    _, outputs, _, test = TOY_SETS.get(spec.get("dataset"), (2, 5, 200, 3600))
    draws = chains * kept
    terms["particles"] = float(chains * params * 8 * PARAM_COPIES)
    terms["draws"] = float(draws * params * FLOAT)
    terms["predictive"] = float(
        draws * min(test, HMC_EVAL_POINTS) * (2 * widest * FLOAT + outputs * 8) + draws * test * FLOAT
    )
    return MemoryEstimate(terms, f"{chains:,} chains x {kept:,} kept draws x {params:,} parameters")


def _training_stack(spec: Mapping[str, Any], terms: dict[str, float]) -> tuple[int, int, int, int]:
    """``(sets, particles, batch, evaluated)`` of a training job (see :func:`memory_estimate`);
    adds its data set's bytes to ``terms["data"]`` (UCI and image jobs)."""
    experiment, dataset = spec.get("experiment"), spec.get("dataset")
    particles = int(spec.get("particles") or 1)
    batch = int(spec.get("batch_size") or 0)
    sets, evaluated = 1, 0
    if experiment == "synthetic":
        batch = 0
    elif experiment == "toy":
        _, _, train, test = TOY_SETS.get(dataset, (2, 5, 200, 3600))
        batch, evaluated = min(batch or 64, train), test
    elif experiment == "uci":
        rows, features, splits, _ = UCI_SETS.get(dataset, (10000, 16, 20, 50))
        sets = int(spec.get("splits") or splits)
        batch, evaluated = min(batch or rows, rows), rows // 10 + 1
        terms["data"] = float(rows * (features + 1) * 8 * 3)  # the table, and a split's standardised copy
    elif experiment == "image":
        train, test, shape = IMAGE_SETS.get(dataset, IMAGE_SETS["cifar10"])
        ood = IMAGE_SETS.get(spec.get("ood"), IMAGE_SETS["svhn"])[1]
        pixels = math.prod(shape)
        per_value = FLOAT + (8 if spec.get("normalize") == "standard" else 1)
        terms["data"] = float((train + test + ood) * pixels * per_value)
        evaluated = IMAGE_EVAL_BATCH
        if spec.get("l2_search"):
            particles = max(particles, int(spec.get("search_trials") or 20))
    return sets, particles, batch, evaluated


def memory_estimate(spec: Mapping[str, Any]) -> MemoryEstimate:
    """A rough upper bound of the peak memory of the job ``spec`` (a training job's spec, as
    repens.pipeline.config.resolve_job makes it, or an HMC reference's, resolve_hmc_job).

    Training: with S particles trained at once (a UCI job stacks ``splits`` sets of
    ``particles``; a hyper-deep ensemble's L2 search ``search_trials``), D parameters per
    particle, batch B and A activations per example (hidden units, or a ResNet's feature
    maps, repens.models.networks), in float32:

    * base: the interpreter with torch (:data:`BASE_BYTES`);
    * data: the data set in float32 (image data: its training and test images and the OOD
      test images, plus the uint8 originals, or a float64 copy of the training images where
      they are standardised);
    * particles: ``S x D x 4 x`` :data:`PARAM_COPIES`;
    * kernel (svgd, wgd, DRLE's MMD): ``sets x n^2 x 4 x`` :data:`KERNEL_COPIES`, n the
      particles of one set;
    * activations: ``S x B x A x 4 x`` :data:`ACTIVATION_COPIES` in training, plus a
      prediction pass (no gradients: two layers alive at once) over E inputs at a time,
      ``S x E x 2 W x 4``, W the widest layer.

    An HMC reference (``method: hmc``) holds, for C chains of K kept draws: the sampler
    state (``C x D x 8 x PARAM_COPIES``), the draws (``C K x D x 4``) and the predictive
    pass over :data:`HMC_EVAL_POINTS` test inputs at a time (``C K x 400 x (2 W x 4 +
    outputs x 8)``) plus the regression predictive it keeps (``C K x T x 4``).

    Calibration: the paper-scale FashionMNIST jobs on a CPU (50 particles, batch 256) peaked
    at 1.26-1.41 GB (reference/image/*/benchmark.tsv); this bound gives 1.5 GB.
    """
    params, acts, widest = _network(spec)
    terms: dict[str, float] = {"base": float(BASE_BYTES)}
    if spec.get("method") == "hmc":
        return _hmc_memory(spec, params, widest, terms)
    sets, particles, batch, evaluated = _training_stack(spec, terms)
    members = sets * particles
    terms["particles"] = float(members * params * FLOAT * PARAM_COPIES)
    rule = registry.RULES.get(spec.get("rule"))  # an n x n kernel between particles
    repulsive = (rule is not None and rule.repulsive) or (spec.get("rule") == "langevin" and spec.get("mmd_weight"))
    if repulsive:
        n = particles + int(spec.get("prior_samples") or 0)
        terms["kernel"] = float(sets * n * n * FLOAT * KERNEL_COPIES)
    terms["activations"] = float(members * FLOAT * (batch * acts * ACTIVATION_COPIES + evaluated * 2 * widest))
    sizes = f"{members:,} particles x {params:,} parameters" + (f", batch {batch:,}" if batch else "")
    if sets > 1:
        sizes = f"{sets} splits x {particles:,} particles x {params:,} parameters, batch {batch:,}"
    return MemoryEstimate(terms, sizes, frozenset({"data", "particles", "kernel", "activations"}))


def gib(n: float) -> str:
    """Bytes as GiB (or TiB, PiB) with one decimal."""
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30)):
        if n >= size or unit == "GiB":
            return f"{n / size:,.1f} {unit}"
    raise AssertionError


def machine_memory_bytes() -> int | None:
    """This machine's memory for a process, in bytes: physical memory, or the cgroup's
    limit where one is lower (a container); None where neither can be read."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (total is None or int(text) < total):
            total = int(text)
    return total


#: the most memory one GPU has (NVIDIA B200: 192 GB), the bound of a GPU job whose GPU is
#: not known before it starts (a cluster's)
LARGEST_GPU_BYTES = 192 * 10**9


def check_memory(
    job: str,
    estimate: MemoryEstimate,
    limit: float | None,
    limit_what: str,
    knob: str,
    device_limit: float | None = None,
    on_gpu: bool = False,
    device_what: str = "this machine's GPU",
) -> None:
    """:class:`CheckError` when the job's estimate exceeds what it can have: ``limit`` bytes
    on the host (``limit_what`` says whose: "this machine's memory", "mem_mb ...") and,
    on a GPU, ``device_limit`` bytes of GPU memory (None: not checked; ``device_what`` says
    whose). ``knob`` names the settings that size it, with the config keys that set them."""
    host = estimate.host(on_gpu)
    checks = [(host, limit, limit_what)]
    if on_gpu:
        checks.append((estimate.device(), device_limit, device_what))
    for need, have, what in checks:
        if have is not None and need > have:
            raise CheckError(
                f"{job} would need about {gib(need)} of memory ({estimate.sizes}; a rough upper bound, "
                f"mostly {estimate.largest()}: repens.pipeline.checks.memory_estimate), more than the {gib(have)} of "
                f"{what}: lower {knob}, or run it where there is more memory"
            )
