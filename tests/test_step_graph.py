"""The graph-replayed training step (repens.training.step_graph), on the CPU: its bookkeeping runs
with :class:`EagerBackend`, whose "replay" runs the step again, so a run through it must
equal the plain loop bit for bit (the CUDA capture itself needs a GPU)."""

import logging

import pytest
import torch

import repens.training.train
from repens.methods.minibatches import EpochSampler
from repens.methods.rule import build
from repens.methods.updates import Update
from repens.models.posteriors import Batch
from repens.training.step_graph import EagerBackend, StepGraphs, StepState, backend_for
from repens.training.train import NonFiniteError, TrainSettings
from rule_hooks import crash_at, fit, nan_at, rule_for
from test_train import _network_problem


class CountingBackend(EagerBackend):
    def __init__(self, fail: bool = False) -> None:
        self.captured, self.warmups, self.fail = [], 0, fail

    def warm_up(self):
        self.warmups += 1
        return super().warm_up()

    def capture(self, run, generators):
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.captured.append(run)
        return super().capture(run, generators)


def _batch(rows: int, value: float = 0.0) -> Batch:
    return Batch(torch.full((rows, 2), value), torch.zeros(rows))


class NoisyStep:
    """A step that moves a particle by its batch's first entry plus a normal draw, through an
    optimizer with state (SGD with momentum), recording the batches it saw."""

    def __init__(self) -> None:
        self.generator = torch.Generator().manual_seed(0)
        self.params = torch.zeros(3, requires_grad=True)
        self.optimizer = torch.optim.SGD([self.params], lr=0.1, momentum=0.9)
        self.state = StepState(self.params, self.optimizer, self.generator)
        self.seen: list[float] = []

    def __call__(self, batch):
        self.seen.append(float(batch.x[0, 0]))
        direction = batch.x[0, 0] + torch.randn(3, generator=self.generator)
        self.params.grad = direction
        self.optimizer.step()
        return Update(direction)

    def graphs(self, backend, warmup=1):
        return StepGraphs(self, self.generator, backend, self.state, warmup=warmup)


def test_warm_up_then_one_graph_per_rate_and_batch_shape():
    step, backend = NoisyStep(), CountingBackend()
    graphs = step.graphs(backend, warmup=2)
    for lr, rows in [(0.1, 4), (0.1, 4), (0.1, 4), (0.1, 4), (0.1, 3), (0.1, 4), (0.1, 3)]:
        graphs(_batch(rows), lr)
    assert backend.warmups == 2 and graphs.captures == 2  # after the warm-up: (0.1, 4 rows), (0.1, 3 rows)
    graphs(_batch(4), 0.05)  # a decayed rate: captured anew, the old rate's graphs freed
    assert graphs.captures == 3 and [k[0] for k in graphs.graphs] == [0.05]
    assert graphs.failed is None
    # 8 steps; each of the 3 captures also ran a second eager step and 2 replays to check the graph
    assert len(step.seen) == 8 + 3 * 3


def test_steps_through_graphs_equal_eager_steps():
    """With the checks of each new graph (extra steps from a saved state, put back), the
    particles, the optimizer's state and the stream are those of the eager steps alone."""
    runs = []
    for graphs_on in (False, True):
        step = NoisyStep()
        graphs = step.graphs(CountingBackend(), warmup=1) if graphs_on else None
        for i, rows in enumerate([4, 4, 4, 3, 4, 3, 4]):
            batch = _batch(rows, float(i))
            graphs(batch, 0.1) if graphs_on else step(batch)
        runs.append(
            (
                step.params.detach().clone(),
                step.optimizer.state_dict()["state"][0]["momentum_buffer"].clone(),
                step.generator.get_state(),
            )
        )
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_each_replay_reads_the_new_batch_from_the_static_buffers():
    step = NoisyStep()
    graphs = step.graphs(CountingBackend(), warmup=1)
    for value in (0.0, 1.0, 2.0, 3.0):
        graphs(_batch(4, value), 0.1)
    assert step.seen[-2:] == [2.0, 3.0]  # the replays after the capture at 1.0
    static, _ = next(iter(graphs.graphs.values()))
    assert float(static.x[0, 0]) == 3.0  # the captured step's input buffer, refilled each step


def test_a_step_that_cannot_be_captured_trains_on_eagerly(caplog):
    step = NoisyStep()
    graphs = step.graphs(CountingBackend(fail=True), warmup=1)
    with caplog.at_level(logging.WARNING, logger="repens.step_graph"):
        for _ in range(4):
            graphs(_batch(4), 0.1)
    assert graphs.captures == 0 and caplog.text.count("capture failed: RuntimeError") == 1


class StuckStreamBackend(EagerBackend):
    """A faulty capture: every replay draws the same random numbers (the stream's state is
    put back before each), as a graph whose draws were baked in would."""

    def capture(self, run, generators):
        (generator,) = generators  # the one stream of the step
        start = generator.get_state()

        def replay():
            generator.set_state(start)
            return run()

        return replay


class SkippingBackend(EagerBackend):
    """A faulty capture: the replay does nothing."""

    def capture(self, run, generators):
        return lambda: None


class ExtraDrawBackend(EagerBackend):
    """A faulty capture: the replays are right but the second moves the stream one draw too far."""

    def capture(self, run, generators):
        calls = {"n": 0}

        def replay():
            out = run()
            calls["n"] += 1
            if calls["n"] == 2:
                torch.rand(1, generator=generators[0])
            return out

        return replay


@pytest.mark.parametrize(
    "backend,what",
    [
        (StuckStreamBackend(), "the particles"),
        (SkippingBackend(), "the particles"),
        (ExtraDrawBackend(), "the random stream's state"),
    ],
)
def test_a_graph_that_replays_anything_else_is_not_used(caplog, backend, what):
    eager = NoisyStep()
    for i in range(5):
        eager(_batch(4, float(i)))
    step = NoisyStep()
    graphs = step.graphs(backend, warmup=1)
    with caplog.at_level(logging.WARNING, logger="repens.step_graph"):
        for i in range(5):
            graphs(_batch(4, float(i)), 0.1)
    assert graphs.captures == 0 and f"two replays differ from two eager steps in {what}" in caplog.text
    assert torch.equal(step.params, eager.params) and torch.equal(
        step.generator.get_state(), eager.generator.get_state()
    )


def test_only_a_gpu_gets_a_graph_backend():
    assert backend_for(torch.device("cpu")) is None


@pytest.mark.parametrize(
    "rule,space,options,safe",
    [
        ("ensemble", "weight", {}, True),
        ("svgd", "weight", {}, True),
        ("wgd", "weight", {"estimator": "kde"}, True),
        ("wgd", "weight", {"estimator": "sge"}, True),
        ("wgd", "weight", {"estimator": "ssge"}, True),  # every eigenpair: an inverse on a GPU
        ("wgd", "weight", {"estimator": "ssge", "num_eigs": 5}, False),  # eigh checks its result on the host
        ("langevin", "weight", {"temperature": 1.0, "mmd_weight": 5.0}, True),
        ("anchored", "weight", {}, True),
        ("svgd", "function", {}, True),  # the ssge function prior, every eigenpair
        ("svgd", "function", {"function_prior": "gp"}, True),
        ("wgd", "function", {"estimator": "kde", "function_prior": "gp"}, True),
        ("wgd", "function", {"estimator": "ssge", "num_eigs": 3}, False),
    ],
)
def test_rules_declare_whether_a_step_can_be_captured(rule, space, options, safe):
    assert build(rule, space, None, **options).graph_safe is safe


@pytest.fixture
def graphs_on_the_cpu(monkeypatch):
    """train() replays its step through StepGraphs on the CPU (EagerBackend); the backends it
    made are collected, so a test can see that it did."""
    made = []

    def backend(device):
        made.append(CountingBackend())
        return made[-1]

    monkeypatch.setattr(repens.training.train, "backend_for", backend)
    return made


def _run(rule, options, settings, sampler_rows=4, seed=1, hook=None, checkpoint=None):
    """``rule`` on the network problem through ``train``; ``hook`` wraps the rule."""
    post, x, y, start = _network_problem()
    g = torch.Generator().manual_seed(seed)
    update = rule_for(rule, post, settings, **options)
    update = update if hook is None else hook(update)
    return fit(update, start, settings, g, next_batch=EpochSampler(x, y, sampler_rows), checkpoint=checkpoint)


@pytest.mark.parametrize(
    "rule,options", [("ensemble", {}), ("svgd", {}), ("langevin", {"temperature": 1.0, "mmd_weight": 5.0})]
)
def test_a_replayed_run_equals_the_plain_loop(graphs_on_the_cpu, rule, options):
    """Epochs of 10 rows in batches of 4 (a last batch of 2: two batch shapes) and a staircase
    decay every 3 steps (a new graph each time): the same particles and diagnostics bit for bit."""
    settings = TrainSettings(steps=23, lr=0.01, lr_decay=0.9, lr_decay_steps=3, nonfinite_check_every=5, log_every=5)
    replayed = _run(rule, options, settings)
    (backend,) = graphs_on_the_cpu
    assert len(backend.captured) >= 7  # a capture per rate, plus the short batches'
    plain = _run(rule, options, TrainSettings(**{**settings.__dict__, "cuda_graphs": False}))
    assert torch.equal(replayed.params, plain.params)
    assert replayed.repulsion == plain.repulsion


def test_a_bad_replayed_step_is_caught_at_the_next_check(graphs_on_the_cpu, tmp_path):
    # update 14 is step 8, a replay: steps 1-3 eager (batches of 4, 4, 2 rows); step 4 captures
    # the 4-row graph (4 updates: the step, a second eager step, two replays); step 5 replays
    # it; step 6 captures the 2-row graph (updates 9-12); steps 7 and 8 replay the 4-row one
    settings = TrainSettings(steps=20, lr=0.01, nonfinite_check_every=5)
    with pytest.raises(NonFiniteError, match="between steps 6 and 10/20"):
        _run("ensemble", {}, settings, hook=lambda rule: nan_at(rule, 14))
    assert graphs_on_the_cpu[0].captured  # the bad step was a replayed one


def test_resume_of_a_replayed_run_equals_the_uninterrupted_one(graphs_on_the_cpu, tmp_path):
    settings = TrainSettings(
        steps=23, lr=0.01, lr_decay=0.9, lr_decay_steps=3, nonfinite_check_every=4, checkpoint_seconds=0.0
    )
    options = {"temperature": 1.0, "mmd_weight": 5.0}
    reference = _run("langevin", options, settings)
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):  # a kill between two checkpoints, in a step replayed or checked
        _run("langevin", options, settings, hook=lambda rule: crash_at(rule, 15), checkpoint=ckpt)
    resumed = _run("langevin", options, settings, seed=99, checkpoint=ckpt)
    assert torch.equal(resumed.params, reference.params)


def test_the_environment_turns_graphs_off(monkeypatch, graphs_on_the_cpu):
    monkeypatch.setenv("REPENS_CUDA_GRAPHS", "0")
    assert TrainSettings(steps=1, lr=0.1).cuda_graphs is False
    _run("ensemble", {}, TrainSettings(steps=8, lr=0.01, nonfinite_check_every=4))
    assert graphs_on_the_cpu == []  # no backend was asked for
    monkeypatch.delenv("REPENS_CUDA_GRAPHS")
    assert TrainSettings(steps=1, lr=0.1).cuda_graphs is True


def test_every_stream_of_a_stack_is_saved_and_a_second_streams_extra_draw_is_caught(caplog):
    """A step drawing from two streams (a stack of seeds): the state holds both, and a replay
    that moves the second one draw too far is caught as that stream's."""

    class TwoStreams(NoisyStep):
        def __init__(self) -> None:
            super().__init__()
            self.other = torch.Generator().manual_seed(1)
            self.state = StepState(self.params, self.optimizer, (self.generator, self.other))

        def __call__(self, batch):
            torch.rand(2, generator=self.other)
            return super().__call__(batch)

    class SecondStreamDrawBackend(EagerBackend):
        def capture(self, run, generators):
            assert len(generators) == 2
            calls = {"n": 0}

            def replay():
                out = run()
                calls["n"] += 1
                if calls["n"] == 2:
                    torch.rand(1, generator=generators[1])
                return out

            return replay

    good = TwoStreams()
    graphs = StepGraphs(good, (good.generator, good.other), CountingBackend(), good.state, warmup=1)
    for value in (0.0, 1.0, 2.0):
        graphs(_batch(4, value), 0.1)
    assert graphs.captures == 1
    bad = TwoStreams()
    graphs = StepGraphs(bad, (bad.generator, bad.other), SecondStreamDrawBackend(), bad.state, warmup=1)
    with caplog.at_level(logging.WARNING, logger="repens.step_graph"):
        for value in (0.0, 1.0, 2.0):
            graphs(_batch(4, value), 0.1)
    assert graphs.captures == 0 and "random stream 1's state" in caplog.text
