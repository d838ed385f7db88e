"""What Table 1 costs on a device, said before anything is submitted.

``python -m repens budget`` lists the image experiment's jobs as the pipeline resolves
them (:func:`repens.pipeline.config.resolve_job`, the seeds of
:func:`repens.pipeline.config.experiment_seeds`, the methods and datasets of ``config.yaml``, so
the grid grows with the config), times a few training steps of each (dataset, method) on
the device it runs on (or reads step times saved earlier), and prints device-hours per
dataset x method and in total:

    hours = sum over seeds and stages of steps x seconds per step / 3600

A job's stages are what :func:`repens.experiments.image.run_image` trains: the ensemble
(``particles`` members, ``steps`` steps) and, for a hyper-deep ensemble (``l2_search``),
first the L2 search: ``search_trials`` candidates trained at once as one stack of the
``ensemble`` rule for ``search_steps`` steps (``steps`` when unset), i.e.
``search_trials x search_steps`` member-steps. Each stage is timed on its own stack.

A step's time is the marginal step (:func:`time_stage`): the difference between a short run
of the training loop and a longer one, over the extra steps, so the costs each run pays once
(its set-up; on a GPU three eager warm-up steps and the capture and check of the step's
graph) are not counted as steps, as ``benchmarks/bench_gpu_step.py`` measures it. The config
is read without ``jsonschema`` where it is not installed (a GPU node;
:func:`repens.pipeline.config.check_schema` then checks it itself).

Only training steps are counted: start-up, data loading, progress evaluation and the final
evaluation on the test and OOD sets are not (minutes per job against hours of steps at the
paper's scale). The figures are for one job at a time on the device;
``benchmarks/bench_gpu_share.py`` measures what k jobs sharing a GPU give.

The arithmetic (:func:`job_stages`, :func:`plan`, :func:`budget`, :func:`format_budget`)
imports no torch; :class:`StageRun` and :func:`time_stage` do.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from repens.core import registry
from repens.core.variants import VariantError, dataset_methods, expand_variants
from repens.jobs.job import ImageJob  # torch-free
from repens.pipeline.config import (
    EXPERIMENTS,
    ConfigError,
    check_config,
    check_schema,
    experiment_seeds,
    report_datasets,
    resolve_job,
)
from repens.pipeline.cost import duration

__all__ = [
    "BudgetError",
    "Stage",
    "Cell",
    "Row",
    "job_stages",
    "plan",
    "budget",
    "format_budget",
    "load_config",
    "read_timings",
    "write_timings",
    "timing_rows",
    "StageRun",
    "time_stage",
    "device_name",
    "TRAIN_IMAGES",
    "SHORT_RUN_STEPS",
]

EXPERIMENT = "image"

#: training images of each data set (the likelihood's N; the cost of a step does not depend on it)
TRAIN_IMAGES = {d.name: d.train_size for d in registry.DATASETS.values() if d.kind == "image" and not d.ood_only}

#: schema of config.yaml in a checkout (src/repens/pipeline/budget.py -> workflow/schemas/)
SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


class BudgetError(ValueError):
    """Bad input to the planner (config, timings file, option), in one line naming it."""


@dataclass(frozen=True)
class Stage:
    """One stack a job trains: ``name`` (``train``, or ``search`` for hyper-DE's L2 search),
    the spec whose step is timed, and its number of steps."""

    name: str
    spec: Mapping[str, Any]
    steps: int

    @cached_property
    def job(self) -> ImageJob:
        """The job of ``spec`` (:class:`repens.jobs.job.ImageJob`, its settings typed)."""
        return ImageJob.of(dict(self.spec))

    @property
    def members(self) -> int:
        return self.job.particles


def job_stages(spec: Mapping[str, Any]) -> list[Stage]:
    """The stacks one image job trains, in order (:func:`repens.experiments.image.run_image`):
    for ``l2_search`` first the search (``search_trials`` members of the ``ensemble`` rule in
    weight space, ``search_steps`` steps, ``steps`` when unset), then the ensemble."""
    job = ImageJob.of(dict(spec))
    stages = []
    if job.l2_search:
        search = job.replace(rule="ensemble", space="weight", particles=job.search_trials)
        steps = job.steps if job.search_steps is None else job.search_steps
        stages.append(Stage("search", search.to_spec(), int(steps)))
    stages.append(Stage("train", job.to_spec(), int(job.steps)))
    return stages


@dataclass(frozen=True)
class Cell:
    """One (dataset, method) of the table: its seeds and each seed's stages."""

    dataset: str
    method: str
    seeds: tuple[int, ...]
    stages: tuple[tuple[Stage, ...], ...]  # per seed


def plan(
    config: Mapping[str, Any], datasets: Sequence[str] | None = None, methods: Sequence[str] | None = None
) -> list[Cell]:
    """Every (dataset, method) of the image experiment that ``results/table1.tex`` trains
    (the table's datasets, :func:`repens.pipeline.config.report_datasets`, unless ``datasets``; the
    experiment's methods in config order unless ``methods``; on each dataset those that run there,
    :func:`repens.core.variants.dataset_methods`), each with its seeds' jobs."""
    exp = (config.get("experiments") or {}).get(EXPERIMENT)
    if exp is None:
        raise BudgetError(f"config key experiments.{EXPERIMENT}: missing (the planner costs Table 1's jobs)")
    known_ds, known_m = list(exp["datasets"]), list(exp.get("methods", []))
    chosen_ds = list(datasets) if datasets else report_datasets(config, EXPERIMENT)
    chosen_m = list(methods) if methods else known_m
    for name, chosen, known in (("datasets", chosen_ds, known_ds), ("methods", chosen_m, known_m)):
        for item in chosen:
            if item not in known:
                raise BudgetError(
                    f"--{name}: {item!r} is not one of experiments.{EXPERIMENT}.{name} ({', '.join(known)})"
                )
    seeds = tuple(experiment_seeds(config, EXPERIMENT))
    cells = []
    for ds in chosen_ds:
        runs_here = dataset_methods(config, EXPERIMENT, ds)
        for m in (m for m in chosen_m if m in runs_here):
            stages = tuple(tuple(job_stages(resolve_job(config, EXPERIMENT, ds, m, s))) for s in seeds)
            cells.append(Cell(ds, m, seeds, stages))
    return cells


#: seconds per step of one stage: (dataset, method, stage) -> seconds
Timing = Callable[[str, str, Stage], float]


@dataclass(frozen=True)
class Row:
    dataset: str
    method: str
    jobs: int
    #: steps of one job per stage name, and the seconds per step of each stage
    steps: Mapping[str, int]
    seconds_per_step: Mapping[str, float]
    #: device-seconds of all the cell's jobs
    seconds: float

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0


def budget(cells: Iterable[Cell], seconds_per_step: Timing) -> list[Row]:
    """Device-seconds of every cell: over its seeds and each seed's stages, steps x the
    stage's seconds per step (timed once per (dataset, method, stage): the seed does not
    change a step's cost)."""
    rows = []
    for cell in cells:
        rate: dict[str, float] = {}
        steps: dict[str, int] = {}
        total = 0.0
        for stages in cell.stages:
            for stage in stages:
                if stage.name not in rate:
                    rate[stage.name] = float(seconds_per_step(cell.dataset, cell.method, stage))
                    steps[stage.name] = stage.steps
                total += stage.steps * rate[stage.name]
        rows.append(Row(cell.dataset, cell.method, len(cell.seeds), steps, rate, total))
    return rows


def _fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def _fmt_hours(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def format_budget(rows: Sequence[Row], device: str, unit: str, header: Sequence[str] = ()) -> str:
    """The table the command prints: a line per (dataset, method), a subtotal per dataset
    and the total, hours labelled ``unit`` (``GPU-hours``, ``CPU-hours``)."""
    lines = [*header, f"device: {device}", ""]
    cols = (
        f"{'dataset':13s} {'method':10s} {'jobs':>4s} {'steps/job':>10s} {'s/step':>8s} "
        f"{'search/job':>10s} {'s/step':>8s} {'h/job':>9s} {unit:>10s}"
    )
    lines += [cols, "-" * len(cols)]
    total = 0.0
    datasets = list(dict.fromkeys(r.dataset for r in rows))
    for ds in datasets:
        sub, jobs = 0.0, 0
        for r in (r for r in rows if r.dataset == ds):
            search_steps = f"{r.steps['search']:,d}" if "search" in r.steps else "-"
            lines.append(
                f"{r.dataset:13s} {r.method:10s} {r.jobs:4d} {r.steps['train']:10,d} "
                f"{_fmt_seconds(r.seconds_per_step['train']):>8s} {search_steps:>10s} "
                f"{_fmt_seconds(r.seconds_per_step.get('search')):>8s} "
                f"{_fmt_hours(r.hours / max(r.jobs, 1)):>9s} {_fmt_hours(r.hours):>10s}"
            )
            sub += r.hours
            jobs += r.jobs
        lines.append(
            f"{ds:13s} {'(all)':10s} {jobs:4d} {'':>10s} {'':>8s} {'':>10s} {'':>8s} {'':>9s} {_fmt_hours(sub):>10s}"
        )
        lines.append("")
        total += sub
    jobs = sum(r.jobs for r in rows)
    lines.append(
        f"total: {jobs} jobs, {_fmt_hours(total)} {unit} (about {duration(total * 3600)} of one device, "
        "one job at a time)"
    )
    return "\n".join(lines)


def load_config(path: str | Path, scale: str | None = None) -> dict[str, Any]:
    """``config.yaml`` as the workflow reads it: numbers coerced and checked against the
    schema (when this is a checkout), ``scale`` overridden, then
    :func:`repens.pipeline.config.check_config`; a mistake is one :class:`BudgetError` line
    naming the file and the key."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as err:
        raise BudgetError(f"{path}: cannot read the config ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise BudgetError(f"{path}: not YAML ({' '.join(str(err).split())})") from None
    if not isinstance(config, dict):
        raise BudgetError(f"{path}: not a config (a YAML mapping of settings)")
    if scale is not None:
        config["scale"] = scale
    config.setdefault("scale", "quick")
    try:
        if SCHEMA.is_file():
            check_schema(config, yaml.safe_load(SCHEMA.read_text()))
        expand_variants(config)
        check_config(config)
    except (ConfigError, VariantError) as err:
        raise BudgetError(f"{path}: config key {err}") from None
    return config


# -- step times saved and read -------------------------------------------------------------


def timing_rows(rows: Sequence[Row], cells: Sequence[Cell], device: str, steps_timed: Mapping[tuple, int]) -> dict:
    """The measured step times as the JSON ``--save-timings`` writes and ``--timings`` reads."""
    out = []
    for row, cell in zip(rows, cells):
        for stage in cell.stages[0]:
            out.append(
                {
                    "dataset": row.dataset,
                    "method": row.method,
                    "stage": stage.name,
                    "seconds_per_step": row.seconds_per_step[stage.name],
                    "particles": stage.members,
                    "batch_size": stage.job.batch_size,
                    "scale": stage.job.scale,
                    "steps_timed": steps_timed.get((row.dataset, row.method, stage.name)),
                }
            )
    return {"device": device, "rows": out}


def write_timings(path: str | Path, data: Mapping[str, Any]) -> None:
    from repens.core.atomic import write_json_atomic

    write_json_atomic(Path(path), dict(data), indent=2)


def read_timings(path: str | Path) -> tuple[Timing, str]:
    """Step times from a file: what ``--save-timings`` wrote, or the ``--json`` of
    ``benchmarks/bench_image.py`` (its ``config`` is the dataset; ``batched`` rows only).
    Returns the timing (a missing entry, or one timed on another stack size or batch,
    raises :class:`BudgetError` naming the file and the entry) and the device named there."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise BudgetError(f"{path}: cannot read the step times ({err.strerror or err})") from None
    except json.JSONDecodeError as err:
        raise BudgetError(f"{path}: not JSON ({err})") from None
    rows = data.get("rows") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise BudgetError(
            f'{path}: expected a list of rows (or {{"rows": [...]}}) with dataset, method, seconds_per_step'
        )
    table: dict[tuple[str, str, str], dict] = {}
    devices = []
    for i, r in enumerate(rows):
        if r.get("mode", "batched") != "batched":
            continue
        dataset = r.get("dataset", r.get("config"))
        seconds = r.get("seconds_per_step")
        if not isinstance(dataset, str) or not isinstance(r.get("method"), str):
            raise BudgetError(f"{path}: row {i}: no dataset (or config) and method")
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise BudgetError(
                f"{path}: row {i} ({dataset}/{r['method']}): seconds_per_step {seconds!r} is not a positive number"
            )
        table[(dataset, r["method"], r.get("stage", "train"))] = r
        if r.get("device_name"):
            devices.append(str(r["device_name"]))
    device = data.get("device") if isinstance(data, dict) else None
    device = device or ", ".join(dict.fromkeys(devices)) or "unknown (not in the file)"

    def seconds_per_step(dataset: str, method: str, stage: Stage) -> float:
        row = table.get((dataset, method, stage.name))
        what = f"{dataset}/{method}" + (" (L2 search stack)" if stage.name == "search" else "")
        if row is None:
            raise BudgetError(
                f"{path}: no step time for {what}: {stage.members} members, batch "
                f"{stage.job.batch_size}; time it on the device with "
                "`python -m repens budget --save-timings FILE`"
            )
        for key, want in (("particles", stage.members), ("batch_size", stage.job.batch_size)):
            if row.get(key) is not None and row[key] != want:
                raise BudgetError(
                    f"{path}: the {what} step was timed with {key} {row[key]}, the config's job has {want}"
                )
        return float(row["seconds_per_step"])

    return seconds_per_step, f"{device} (step times from {path})"


# -- timing on this device (torch) ---------------------------------------------------------


def device_name(device: str = "auto") -> tuple[str, str]:
    """(a description of the device, the unit of its hours: ``GPU-hours`` or ``CPU-hours``)."""
    import torch

    from repens.experiments.image import resolve_device

    try:
        dev = resolve_device(device)
    except (RuntimeError, ValueError) as err:
        raise BudgetError(f"--device: {err}") from None
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)} (CUDA {torch.version.cuda}, torch {torch.__version__})", "GPU-hours"
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {model}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}", "CPU-hours"


class StageRun:
    """One stage's stack ready to train on ``device``: the network, the prior, initial
    particles and a minibatch sampler over random images of the data set's shape (pixels in
    [0, 1] for ``normalize: unit``, standard normal for ``standard``), through the real
    training loop (:func:`repens.training.fitting.fit_particles`), as
    :func:`repens.experiments.image.run_image` builds it."""

    def __init__(self, stage: Stage, device: str = "auto", images: int = 2048):
        import torch

        from repens.experiments.image import _batches, _initial, resolve_device
        from repens.models.networks import build_model
        from repens.models.particles import StackedModel
        from repens.models.posteriors import NetworkPosterior

        job = stage.job
        if job.step_size == "curvature":  # its one-time estimate is no step's cost
            job = job.replace(step_size="fixed")
        self.job, self.stage = job, stage
        self.device = dev = resolve_device(device)
        shape = EXPERIMENTS[EXPERIMENT].shapes[job.dataset]
        model = StackedModel(build_model(job, shape, 10).to(dev), chunk_size=job.chunk_size, input_shape=shape)
        self.generator = torch.Generator(device=dev).manual_seed(job.seed)
        g = torch.Generator().manual_seed(job.seed)
        n_images = max(images, job.batch_size)
        if job.normalize == "unit":
            x = torch.rand(n_images, *shape, generator=g)
        else:
            x = torch.randn(n_images, *shape, generator=g)
        y = torch.randint(10, (n_images,), generator=g)
        n = job.particles
        prior: Any = job.prior_std
        if stage.name == "search" or job.l2_search:  # one prior sd per member, as run_image gives them
            prior = torch.full((n, 1), float(job.prior_std), device=dev)
        num_train = TRAIN_IMAGES.get(job.dataset, 50000)
        if stage.name == "search":
            num_train = num_train - int(round(job.val_fraction * num_train))
        self.posterior = NetworkPosterior(model, "categorical", num_train=num_train, prior_std=prior)
        self.init = _initial(model, job, n, prior, self.generator).to(dev)
        self.next_batch = _batches(x.to(dev), y.to(dev), job.batch_size)

    def _sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, steps: int) -> float:
        """Seconds of ``steps`` training steps (the loop's set-up and last progress line included)."""
        import dataclasses

        from repens.training.fitting import fit_particles, train_settings

        settings = dataclasses.replace(train_settings(self.job, steps), log_every=steps)
        self._sync()
        t0 = time.perf_counter()
        fit_particles(self.job, self.posterior, self.init, settings, self.generator, next_batch=self.next_batch)
        self._sync()
        return time.perf_counter() - t0


#: steps of the short run :func:`time_stage` subtracts on a GPU: the eager warm-up steps
#: before a capture (repens.training.step_graph.WARMUP_STEPS, 3), the capture and its check (three
#: steps), with room to spare (benchmarks/bench_gpu_step.py's 10)
SHORT_RUN_STEPS = 10


def time_stage(
    stage: Stage,
    device: str = "auto",
    steps: int | None = None,
    warmup: int = 1,
    min_seconds: float = 3.0,
    max_steps: int = 200,
    short: int | None = None,
) -> tuple[float, int]:
    """(seconds per step, steps timed) of ``stage`` on ``device``: the marginal step.

    Each run of the training loop pays once for what is not a step: its set-up and, on a
    GPU, three eager warm-up steps and the capture of the step's graph with its check
    (:mod:`repens.training.step_graph`). So, after ``warmup`` untimed steps (the device's first-use
    costs), a short run of ``short`` steps (:data:`SHORT_RUN_STEPS` on a GPU, 1 elsewhere)
    and a run of ``short + steps`` steps are timed, and a step costs their difference over
    ``steps`` (``benchmarks/bench_gpu_step.py`` does the same): each run's own costs cancel.
    ``steps`` defaults to enough for ``min_seconds`` at the short run's pace, 2 to
    ``max_steps``. Should noise make the difference not positive, the long run's average
    step is returned (an upper bound)."""
    run = StageRun(stage, device)
    if short is None:
        short = SHORT_RUN_STEPS if run.device.type == "cuda" else 1
    short = max(1, int(short))
    if warmup > 0:
        run.run(warmup)
    base = run.run(short)
    if steps is None:
        pace = base / short
        steps = int(min(max_steps, max(2, math.ceil(min_seconds / max(pace, 1e-9)))))
    total = run.run(short + steps)
    marginal = (total - base) / steps
    if not marginal > 0:
        marginal = total / (short + steps)
    return marginal, steps
