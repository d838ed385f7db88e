"""What a CUDA graph captures of a training step, looked at op by op on the CPU.

A captured step must not make a tensor from host data (a host-to-device copy inside a capture
raises cudaErrorStreamCaptureUnsupported, and a value baked in at capture is stale at every
replay), must not wait for the host (``.item()``, ``nonzero``, a checked solve: the capture
is invalidated), and must draw its random numbers from the run's generator, the one
registered with the graph (a draw from the global stream is replayed with the same numbers).

:class:`StepRecord` records every aten op (a ``TorchDispatchMode``) and every host read
at the Python level (a ``TorchFunctionMode``: ``.cpu()``, ``.tolist()``, ``.numpy()``, which
dispatch nothing for a tensor already on the CPU) and names each offending op with the line
of ``src/repens`` that ran it. :class:`RecordingBackend` stands in for the CUDA backend of
:mod:`repens.training.step_graph`: ``train()`` goes through its warm-up, capture and check, and the
op trace is taken where the CUDA backend would capture. Inside :func:`repens.models.kernels.gpu_paths`
the CPU runs the GPU's code paths (no host-side branches), so the trace is the GPU step's.
Every method of config.yaml is run as the image experiment builds it (:func:`fit_particles`
with the job resolved from config.yaml, the image MLP and a tiny ResNet).

The fallback of a capture that fails (:class:`repens.training.step_graph.CudaGraphBackend` with its CUDA
calls stood in for by :class:`FakeCuda`) is checked at the end: the stream and the memory pool
come back, the run goes on eagerly with the eager run's results and one warning.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest
import torch
import yaml
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import repens.training.step_graph
import repens.training.train
from repens.experiments.image import _batches
from repens.jobs.job import ImageJob
from repens.models.kernels import gpu_paths
from repens.models.networks import build_model
from repens.models.particles import StackedModel
from repens.models.posteriors import Batch, NetworkPosterior
from repens.pipeline.config import resolve_job
from repens.training.fitting import fit_particles, job_rule, train_settings
from repens.training.step_graph import CudaCalls, CudaGraphBackend, EagerBackend
from repens.training.train import TrainSettings
from repens.training.turns import GPU_TURNS

aten = torch.ops.aten
ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
METHODS = list(CONFIG["methods"])

#: ops that make a tensor from host data (a Python number or list copied in)
HOST_DATA = {
    aten.lift_fresh: "a tensor from host data",
    aten.lift_fresh_copy: "a tensor from host data",
    aten.scalar_tensor: "a tensor from a host number",
}
#: ops whose result (or whose output's size) the host reads: they synchronise with the device
HOST_WAITS = {
    aten._local_scalar_dense: "reads a value on the host (.item(), bool(), float())",
    aten.item: "reads a value on the host",
    aten.is_nonzero: "reads a value on the host (bool())",
    aten.nonzero: "an output sized by the data",
    aten.masked_select: "an output sized by the data",
    aten._unique: "an output sized by the data",
    aten._unique2: "an output sized by the data",
    aten.unique_dim: "an output sized by the data",
    aten.unique_consecutive: "an output sized by the data",
    aten.unique_dim_consecutive: "an output sized by the data",
    aten.bincount: "an output sized by the data",
    aten.repeat_interleave: "an output sized by the data",
    aten.equal: "reads a value on the host (torch.equal)",
    aten._linalg_check_errors: "a checked linear solve: its info is read on the host",
    aten._linalg_eigh: "eigh checks its result on the host",
}
#: Python-level calls that read a tensor on the host
HOST_CALLS = {
    "cpu": "a copy to the CPU",
    "numpy": "a copy to the host",
    "tolist": "a copy to a Python list",
    "__array__": "a copy to the host",
    "item": "reads a value on the host",
}


def _where() -> str:
    """The innermost line of ``src/repens`` on the stack: ``path:line (function)``."""
    for frame in reversed(traceback.extract_stack()):
        if "/src/repens/" in frame.filename.replace("\\", "/"):
            return f"{frame.filename.split('/src/')[-1]}:{frame.lineno} ({frame.name})"
    return "outside src/repens"


def _argument(func, args: tuple, kwargs: dict, name: str):
    """The argument ``name`` of an aten call (keyword, or by its position in the schema);
    ``...`` when the op has no such argument."""
    names = [a.name for a in func._schema.arguments]
    if name not in names:
        return ...
    if name in kwargs:
        return kwargs[name]
    i = names.index(name)
    return args[i] if i < len(args) else None


def _device(value) -> torch.device | None:
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, (str, torch.device)):
        return torch.device(value)
    return None


def _same_stream(a: torch.Generator, b: torch.Generator) -> bool:
    """Whether two generators are the same stream at the same place (the dispatcher hands a
    mode another Python object for the run's generator)."""
    return a.device == b.device and a.initial_seed() == b.initial_seed() and torch.equal(a.get_state(), b.get_state())


def offence(func, args: tuple, kwargs: dict, generator) -> str | None:
    """Why a CUDA graph cannot hold the aten call ``func(*args, **kwargs)``, or None;
    ``generator``: the run's stream, or a tuple of every stream registered with the graph."""
    registered = generator if isinstance(generator, tuple | list) else (generator,)
    packet = func.overloadpacket
    if packet in HOST_DATA:
        return HOST_DATA[packet]
    if packet in HOST_WAITS:
        return HOST_WAITS[packet]
    if packet in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ()):
            return "a boolean mask index: an output sized by the data"
    if packet is aten._to_copy:
        target = _device(kwargs.get("device"))
        if target is not None and target.type == "cpu" and args[0].device.type != "cpu":
            return "a copy to the CPU"
    if packet is aten.copy_ and args[0].device.type == "cpu" and args[1].device.type != "cpu":
        return "a copy to the CPU"
    if torch.Tag.nondeterministic_seeded in func.tags:
        drawn_from = _argument(func, args, kwargs, "generator")
        if drawn_from is ... or drawn_from is None:
            return "a random draw from the global stream, not the run's generator"
        if not any(_same_stream(drawn_from, g) for g in registered):
            return "a random draw from a generator that is not the run's"
    return None


class _Ops(TorchDispatchMode):
    def __init__(self, record: StepRecord) -> None:
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.record.ops.append(func)
        why = offence(func, args, kwargs, self.record.generator)
        if why is not None:
            self.record.offences.append(f"{func} ({why}) at {_where()}")
        return func(*args, **kwargs)


class _Calls(TorchFunctionMode):
    def __init__(self, record: StepRecord) -> None:
        super().__init__()
        self.record = record

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        why = HOST_CALLS.get(name)
        if name == "to" and args and isinstance(args[0], torch.Tensor):
            wanted = [a for a in (*args[1:], kwargs.get("device")) if isinstance(a, str) and a.startswith("cpu")]
            why = "a copy to the CPU" if wanted else None
        if why is not None:
            self.record.offences.append(f"Tensor.{name} ({why}) at {_where()}")
        return func(*args, **kwargs)


class StepRecord:
    """Inside, every aten op is recorded, and each one a CUDA graph cannot hold is named in
    ``offences`` with the line that ran it (see :func:`offence` and :data:`HOST_CALLS`)."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self.ops: list = []
        self.offences: list[str] = []
        self._modes = (_Calls(self), _Ops(self))

    def __enter__(self) -> StepRecord:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


class RecordingBackend(EagerBackend):
    """:class:`EagerBackend` whose each "capture" records the ops of its first replay: the
    step a CUDA capture would hold (warm-up, checks and fallbacks as on a GPU)."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def capture(self, run, generators):
        def replay():
            if len(self.records) > captures_before:
                return run()
            record = StepRecord(generators)
            with record:
                out = run()
            self.records.append(record)
            return out

        captures_before = len(self.records)
        return replay


# ------------------------------------------------------------------- the checker itself
def _offences(step) -> list[str]:
    g = torch.Generator().manual_seed(0)
    with StepRecord(g) as record:
        step(g)
    return record.offences


@pytest.mark.parametrize(
    "step,caught",
    [
        (lambda g: torch.ones(3) * torch.tensor([1.0, 2.0, 3.0]), "aten.lift_fresh"),
        (lambda g: torch.as_tensor(0.5, dtype=torch.float32), "aten.lift_fresh"),
        (lambda g: torch.where(torch.ones(3) > 0, torch.ones(3), 0.0), "aten.scalar_tensor"),
        (lambda g: torch.ones(3).sum().item(), "aten._local_scalar_dense"),
        (lambda g: bool((torch.ones(3) > 0).all()), "aten._local_scalar_dense"),
        (lambda g: float(torch.ones(3).sum()), "aten._local_scalar_dense"),
        (lambda g: torch.ones(3).nonzero(), "aten.nonzero"),
        (lambda g: torch.ones(3)[torch.ones(3) > 0], "boolean mask"),
        (lambda g: torch.ones(3).masked_select(torch.ones(3) > 0), "aten.masked_select"),
        (lambda g: torch.ones(3).unique(), "aten._unique2"),
        (lambda g: torch.linalg.inv(torch.eye(2)), "aten._linalg_check_errors"),
        (lambda g: torch.ones(3).tolist(), "Tensor.tolist"),
        (lambda g: torch.ones(3).cpu(), "Tensor.cpu"),
        (lambda g: torch.ones(3).to("cpu"), "Tensor.to"),
        (lambda g: torch.ones(3).numpy(), "Tensor.numpy"),
        (lambda g: torch.randn(3), "aten.randn.default (a random draw from the global stream"),
        (lambda g: torch.randn(3, generator=torch.Generator()), "not the run's"),
        (lambda g: torch.ones(3).normal_(), "aten.normal_"),
        (lambda g: torch.nn.functional.dropout(torch.ones(3), 0.5), "random draw from the global stream"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_record_names_what_a_graph_cannot_hold(step, caught):
    offences = _offences(step)
    assert any(caught in o for o in offences), offences
    assert all("outside src/repens" in o for o in offences)  # these lines are in this test


def test_the_record_lets_through_what_a_graph_can_hold():
    def step(g):
        x = torch.randn(4, 3, generator=g)
        y = torch.full_like(x, 2.0).mul_(3.0).addcdiv_(x, x.abs().add_(1.0), value=-0.5)
        torch.linalg.inv_ex(torch.eye(3) + y.mT @ y).inverse.median(-1)
        return torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").to(torch.float64)

    assert _offences(step) == []


# ------------------------------------------------------------------- every method's step
def _image_data(classes: int = 3, rows: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 1, 4, 4, generator=g)
    y = torch.randint(classes, (rows,), generator=g)
    return x, y


NETWORKS = {"mlp": {"model": "mlp", "hidden": [6]}, "resnet": {"model": "resnet", "depth": 8, "width": 2}}


def _image_run(method: str, network: str, steps: int = 6, particles: int = 4, **changes):
    """A few steps of ``method`` as the image experiment trains it (the job from config.yaml,
    the network of ``build_model``, prior draws as the initial particles, the minibatches of
    :func:`repens.experiments.image._batches`), on a tiny problem; a hyper-deep ensemble's
    step (``l2_search``) with one prior scale per member."""
    job = ImageJob.of(resolve_job(CONFIG, "image", "fashionmnist", method, seed=0))
    job = job.replace(**{**NETWORKS[network], "particles": particles, "batch_size": 8, **changes})
    x, y = _image_data()
    # as run_image builds it: the image MLP on the MLP path, the ResNet under vmap
    model = StackedModel(build_model(job, tuple(x.shape[1:]), 3), input_shape=tuple(x.shape[1:]))
    g = torch.Generator().manual_seed(1)
    prior_std = job.prior_std
    if job.l2_search:
        strengths = torch.logspace(-1, 2, particles, dtype=torch.float64)
        prior_std = (1.0 / strengths.sqrt()).float().view(-1, 1)
    init = model.sample_gaussian(particles, prior_std, g)
    posterior = NetworkPosterior(model, "categorical", num_train=x.shape[0], prior_std=prior_std)
    settings = train_settings(job, steps, nonfinite_check_every=5)
    return fit_particles(job, posterior, init, settings, g, next_batch=_batches(x, y, job.batch_size)).params


@pytest.fixture
def recording(monkeypatch):
    """train() captures its step through a :class:`RecordingBackend` on the CPU."""
    backend = RecordingBackend()
    monkeypatch.setattr(repens.training.train, "backend_for", lambda device: backend)
    return backend


@pytest.mark.parametrize("network", ["mlp", "resnet"])
@pytest.mark.parametrize("method", METHODS)
def test_a_captured_step_makes_no_host_data_waits_for_nothing_and_draws_from_the_run(
    recording, caplog, method, network
):
    with gpu_paths(), caplog.at_level(logging.WARNING, logger="repens.step_graph"):
        _image_run(method, network)
    assert recording.records, f"{method}: the step was not captured"
    assert "not replayed from a graph" not in caplog.text  # the replays equal the eager steps
    offences = sorted({o for record in recording.records for o in record.offences})
    assert offences == [], f"{method} ({network}): a CUDA graph cannot hold\n" + "\n".join(offences)


#: Table 1's FashionMNIST methods: the image experiment's, with the variants' (config.yaml)
FASHIONMNIST = [m for m in CONFIG["experiments"]["image"]["methods"]] + [
    f"{m}-{v}" for v, spec in (CONFIG["experiments"]["image"].get("variants") or {}).items() for m in spec["methods"]
]


def _stack_run(method: str, seeds: int = 5, steps: int = 6, particles: int = 4):
    """A few steps of ``seeds`` seeds of ``method`` stacked as one job, as the image
    experiment trains a stack (:func:`repens.experiments.image._fit_seed_stack`: the seeds'
    own streams for batches, prior draws and Langevin noise), on a tiny problem."""
    import repens.experiments.image as image
    from repens.core.variants import expand_variants

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    expand_variants(config)
    config["scale"] = "paper"
    base = ImageJob.of(resolve_job(config, "image", "fashionmnist", method, seed=0))
    job = base.replace(**NETWORKS["mlp"], particles=particles, batch_size=8, steps=steps)
    x, y = _image_data()
    model = image.SeedStackModel(build_model(job, tuple(x.shape[1:]), 3), input_shape=tuple(x.shape[1:]))
    generators = [torch.Generator().manual_seed(s) for s in range(seeds)]
    prior = job.prior_std
    if job.l2_search:  # one prior scale per member and seed, as the search leaves them
        prior = torch.logspace(-1, 1, particles).sqrt().reciprocal().view(1, -1, 1).expand(seeds, -1, -1)
    inits = torch.stack([model.sample_gaussian(particles, 1.0, g) for g in generators])
    streams = image.SeedStreams(generators, x, y, job.batch_size)
    posterior = image.SeedStackPosterior(model, "categorical", num_train=x.shape[0], prior_std=prior, streams=streams)
    return image._fit_seed_stack(job, posterior, inits, streams, None, "test", None, torch.device("cpu"))


@pytest.mark.parametrize("method", FASHIONMNIST)
def test_a_stack_of_five_seeds_is_captured_with_every_seeds_stream_registered(recording, caplog, monkeypatch, method):
    """Every FashionMNIST method as a stack of five seeds: the step is captured (rules that
    draw in their step too: each seed's stream is registered), holds nothing a graph cannot,
    and its replays equal the eager steps (else the run would warn and go on eagerly)."""
    import repens.experiments.image as image

    settings = image.train_settings
    monkeypatch.setattr(image, "train_settings", lambda *a, **k: settings(*a, **{**k, "nonfinite_check_every": 5}))
    with gpu_paths(), caplog.at_level(logging.WARNING, logger="repens.step_graph"):
        _stack_run(method)
    assert recording.records, f"{method}: the stack's step was not captured"
    assert "not replayed from a graph" not in caplog.text
    offences = sorted({o for record in recording.records for o in record.offences})
    assert offences == [], f"{method} (stack of 5): a CUDA graph cannot hold\n" + "\n".join(offences)


@pytest.mark.parametrize(
    "method,changes",
    [
        ("svgd", {"bandwidth": 0.5}),
        ("kde-wgd", {"bandwidth": 0.5}),
        ("fsvgd", {"function_prior": "gp"}),
        ("ssge-fwgd", {"function_prior": "ssge", "prior_samples": 6}),
        ("fsvgd", {"function_output": "softmax", "repulsion_scale": "num_train"}),
        ("kde-fwgd", {"function_output": "softmax"}),
        ("sge-fwgd", {"function_output": "softmax"}),
        ("ssge-fwgd", {"function_output": "softmax"}),
        ("svgd", {"repulsion_scale": "num_train"}),
    ],
)
def test_other_options_are_captured_too(recording, method, changes):
    """A fixed bandwidth (a 0-d tensor kept by the kernel), the GP function prior (``solve_ex``
    unchecked), more prior draws than particles."""
    with gpu_paths():
        _image_run(method, "mlp", **changes)
    assert recording.records
    assert [o for record in recording.records for o in record.offences] == []


def _direction(method: str, **changes) -> torch.Tensor:
    """One update direction of ``method`` at prior draws, in float64, on a tiny image batch."""
    job = ImageJob.of(resolve_job(CONFIG, "image", "fashionmnist", method, seed=0)).replace(
        **NETWORKS["mlp"], **changes
    )
    x, y = _image_data()
    model = StackedModel(build_model(job, tuple(x.shape[1:]), 3))
    g = torch.Generator().manual_seed(2)
    params = model.sample_gaussian(5, job.prior_std, g, dtype=torch.float64)
    posterior = NetworkPosterior(model, "categorical", num_train=x.shape[0], prior_std=job.prior_std)
    batch = Batch(x[:8].double(), y[:8])
    rule = job_rule(job, posterior, TrainSettings(steps=1, lr=job.lr))
    state = rule.init(params.flip(-2), g)  # an anchored ensemble anchored at other particles
    with torch.no_grad():
        state.params.copy_(params)
    return rule.direction(state, batch).direction


@pytest.mark.parametrize("method,changes", [(m, {}) for m in METHODS] + [("fsvgd", {"function_prior": "gp"})])
def test_the_gpu_paths_compute_the_cpus_direction(method, changes):
    """What only a GPU ran before (``cdist`` by differences, the median with its fallback
    computed, SSGE by an inverse in float64) gives the CPU's direction, to rounding."""
    cpu = _direction(method, **changes)
    with gpu_paths():
        gpu = _direction(method, **changes)
    torch.testing.assert_close(gpu, cpu, rtol=1e-9, atol=1e-9 * float(cpu.abs().max()))


def test_every_method_of_the_config_is_graph_safe():
    """Each method's step is captured on a GPU (ssge's ``num_eigs: null`` keeps every
    eigenpair: an inverse there, no ``eigh``)."""
    for method in METHODS:
        job = ImageJob.of(resolve_job(CONFIG, "image", "fashionmnist", method, seed=0))
        assert job_rule(job, None, TrainSettings(steps=1, lr=job.lr)).graph_safe, method


def test_the_cpus_own_paths_wait_for_the_host(recording):
    """Outside :func:`gpu_paths` the CPU decides on the host (the median's fallback, SSGE by
    ``eigh``): what the checks above look at is the GPU's step, not the CPU's."""
    _image_run("ssge-wgd", "mlp")
    offences = {o for record in recording.records for o in record.offences}
    assert any("aten._local_scalar_dense" in o and "(median_bandwidth)" in o for o in offences), offences
    assert any("aten._linalg_eigh" in o and "(ssge_score)" in o for o in offences), offences


# ------------------------------------------------------------------- a capture that fails
CAPTURE_ERROR = "CUDA error: operation not permitted when stream is capturing"


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def wait_stream(self, other: FakeStream) -> None:
        pass

    def __repr__(self) -> str:
        return self.name


class FakeGraph:
    """A CUDA graph's bookkeeping on the CPU, with CUDA's rules: a capture begins on a stream
    other than the default one and ends on the one it began on. ``capture_end`` fails as
    torch's older ``CUDAGraph::capture_end`` did on an invalidated capture: before it stops
    sending allocations to the graph's pool."""

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda, self.stream, self.pool, self.replays, self.was_reset = cuda, None, None, 0, False

    def register_generator_state(self, generator: torch.Generator) -> None:
        assert isinstance(generator, torch.Generator)
        # torch refuses a registration while another thread's capture is under way ("Cannot
        # register the state during capturing stage"): it must hold the process's capture turn
        assert GPU_TURNS.held_exclusively(), "a generator registered outside the capture turn"

    def capture_begin(self, pool, capture_error_mode: str = "global") -> None:  # noqa: ANN001
        # CUDA's default mode forbids unsafe calls to every thread during a capture: runs on
        # other threads (several stacks in one process) would break it
        assert capture_error_mode == "thread_local", capture_error_mode
        assert GPU_TURNS.held_exclusively() and GPU_TURNS.sharing() == 0, "a capture beside other threads' GPU work"
        if self.cuda.current is self.cuda.default:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream.")
        self.stream, self.pool = self.cuda.current, pool
        self.cuda.routing.add(pool)
        self.cuda.capturing = True

    def capture_end(self) -> None:
        if self.cuda.current is not self.stream:
            raise RuntimeError("Capture must end on the same stream it began on.")
        self.cuda.capturing = False
        if self.cuda.fail_at_end:
            raise RuntimeError(CAPTURE_ERROR)
        self.cuda.routing.discard(self.pool)

    def replay(self) -> None:
        self.replays += 1

    def reset(self) -> None:
        self.was_reset = True


class FakeCuda(CudaCalls):
    """:class:`repens.training.step_graph.CudaCalls` on the CPU: named streams, the pools the allocator
    sends blocks to (``routing``), graphs that fail at their end (``fail_at_end``). A capture
    runs the step on the CPU (there is nothing to record it): the state it moves is put back
    by :class:`repens.training.step_graph.StepGraphs` when the capture fails."""

    def __init__(self, fail_at_end: bool = False) -> None:
        self.default = self.current = FakeStream("default")
        self.fail_at_end, self.capturing = fail_at_end, False
        self.routing: set = set()
        self.graphs: list[FakeGraph] = []
        self.streams = 0

    def graph(self) -> FakeGraph:
        self.graphs.append(FakeGraph(self))
        return self.graphs[-1]

    def pool(self) -> tuple[int, int]:
        return (0, len(self.graphs))

    def stream(self) -> FakeStream:
        self.streams += 1
        return FakeStream(f"side {self.streams}")

    def current_stream(self) -> FakeStream:
        return self.current

    def set_stream(self, stream: FakeStream) -> None:
        self.current = stream

    def before_capture(self) -> None:
        pass

    def end_allocating_to(self, pool) -> bool:  # noqa: ANN001
        if pool not in self.routing:
            return False
        self.routing.discard(pool)
        return True


def _job_through(monkeypatch, backend, method: str = "drle", steps: int = 9):
    monkeypatch.setattr(repens.training.train, "backend_for", lambda device: backend)
    return _image_run(method, "mlp", steps=steps)


@pytest.mark.parametrize("method", ["drle", "sge-fwgd"])
def test_a_capture_that_fails_at_its_end_gives_back_the_stream_and_pool_and_trains_on_eagerly(
    monkeypatch, caplog, method
):
    """``capture_end`` raises: the job is back on its stream, nothing goes to the graph's pool,
    the graph is reset, the run goes on eagerly with the eager run's particles (prior draws and
    Langevin noise from the same stream), with one warning."""
    cuda = FakeCuda(fail_at_end=True)
    with caplog.at_level(logging.WARNING, logger="repens.step_graph"):
        failed = _job_through(monkeypatch, CudaGraphBackend(cuda), method)
    eager = _job_through(monkeypatch, None, method)
    assert torch.equal(failed, eager)
    assert cuda.current is cuda.default and not cuda.capturing and cuda.routing == set()
    assert len(cuda.graphs) == 1 and cuda.graphs[0].was_reset  # one capture tried, none after it
    warnings = [r for r in caplog.records if r.name == "repens.step_graph" and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"capture failed: RuntimeError: {CAPTURE_ERROR}" in warnings[0].getMessage()


def test_a_step_that_fails_inside_the_capture_ends_it_and_says_why(monkeypatch, caplog):
    """The step itself raises inside the capture (a host-to-device copy, say): the capture is
    ended all the same, on its own stream, and the step's error is the one reported."""
    cuda = FakeCuda()
    backend = CudaGraphBackend(cuda)

    def step():
        assert cuda.capturing and cuda.current is not cuda.default
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing (cudaMemcpyAsync)")

    with pytest.raises(RuntimeError, match="cudaMemcpyAsync"):
        backend.capture(step, torch.Generator())
    assert cuda.current is cuda.default and not cuda.capturing and cuda.routing == set()
    assert cuda.graphs[0].was_reset


def test_a_capture_that_cannot_begin_gives_the_stream_back(monkeypatch):
    cuda = FakeCuda()
    backend = CudaGraphBackend(cuda)
    cuda.set_stream = lambda stream: None  # the capture would begin on the default stream
    with pytest.raises(RuntimeError, match="non-default stream"):
        backend.capture(lambda: None, torch.Generator())
    assert cuda.current is cuda.default and cuda.routing == set() and cuda.graphs[0].was_reset


def test_a_capture_that_works_returns_to_the_stream_and_replays_the_graph():
    cuda = FakeCuda()
    backend = CudaGraphBackend(cuda)
    with backend.warm_up():
        assert cuda.current is not cuda.default
    assert cuda.current is cuda.default
    out = object()
    replay = backend.capture(lambda: out, torch.Generator())
    assert cuda.current is cuda.default and cuda.routing == set() and not cuda.graphs[0].was_reset
    assert replay() is out and replay() is out and cuda.graphs[0].replays == 2
