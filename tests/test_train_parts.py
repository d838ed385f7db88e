"""The training loop's parts, each on its own: schedule, guard, checkpoints, signals,
progress, the step; and their composition equal to ``train``."""

import os
import signal

import pytest
import torch

from repens.models.posteriors import TargetPosterior
from repens.models.targets import Gaussian
from repens.summaries.converged import parse_log
from repens.training.train import (
    Checkpointer,
    Every,
    FiniteGuard,
    Interrupted,
    NonFiniteError,
    Progress,
    TrainSettings,
    _state_key,
    apply_lr,
    init,
    run,
    scheduled_lr,
    step,
    stop_if_signalled,
    stop_signals,
    train,
)
from rule_hooks import Hooked, rule_for


def setup(settings, seed=0, rule="svgd", **options):
    """The rule on a Gaussian target for ``settings`` and its state at 10 random particles."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randn(10, 2, generator=g, dtype=torch.float64)
    update = rule_for(rule, TargetPosterior(Gaussian()), settings, **options)
    return update, update.init(start, g)


def test_schedule_is_the_staircase_set_where_it_changes():
    s = TrainSettings(steps=100, lr=1.0, lr_decay=0.5, lr_decay_steps=10)
    assert [scheduled_lr(s, t, start=0) for t in (0, 1, 9, 10, 11, 20, 35)] == [1.0, None, None, 0.5, None, 0.25, None]
    assert scheduled_lr(s, 35, start=35) == 0.125  # a resumed run sets the rate of its first step
    assert scheduled_lr(TrainSettings(steps=10, lr=0.3), 0, start=0) is None  # constant: the optimizer's own


def test_apply_lr_sets_every_group_and_none_leaves_them():
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
    apply_lr(opt, None)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.1]
    apply_lr(opt, 0.025)
    assert [g["lr"] for g in opt.param_groups] == [0.025, 0.025]


def test_guard_per_step_raises_naming_the_step():
    guard = FiniteGuard(TrainSettings(steps=5, lr=0.1), torch.device("cpu"), start=2)
    assert guard.flag is None
    guard.observe(torch.ones(3))
    with pytest.raises(NonFiniteError, match=r"at step 3/5 \(lr=0.1\)"):
        guard.observe(torch.tensor([1.0, float("inf")]))
    guard.stepped(3)
    assert guard.checked == 3


def test_deferred_guard_raises_at_its_check_naming_the_steps_and_resets():
    guard = FiniteGuard(TrainSettings(steps=10, lr=0.1, nonfinite_check_every=4), torch.device("cpu"), start=0)
    guard.observe(torch.ones(3))
    guard.stepped(1)  # not yet due
    guard.observe(torch.tensor([float("nan")]))  # folded into the flag, no raise here
    with pytest.raises(NonFiniteError, match="between steps 1 and 4/10"):
        guard.stepped(4)
    guard.flag.fill_(True)
    guard.stepped(8)
    assert guard.checked == 8 and bool(guard.flag)
    guard.stepped(10)  # the last step is always checked
    assert guard.checked == 10


def test_step_is_the_rules_update_then_the_finiteness_check():
    settings = TrainSettings(steps=1, lr=0.1, optimizer="sgd")
    update, state = setup(settings)
    before = state.params.detach().clone()
    direction = update.direction(state).direction
    loop = init(update, state, settings)
    result = step(loop, None)
    torch.testing.assert_close(result.direction, direction)
    torch.testing.assert_close(loop.params.detach(), before + 0.1 * direction)  # ascends phi
    poisoned = Hooked(update, after=lambda n, out: type(out)(out.direction * float("nan")))
    with pytest.raises(NonFiniteError, match="at step 1/1"):
        step(init(poisoned, update.init(before), settings), None)


def test_the_langevin_step_adds_its_noise_after_the_optimizers_step():
    settings = TrainSettings(steps=1, lr=0.1, optimizer="sgd")
    drawn = []

    def noise(params, generator):
        drawn.append(params.detach().clone())
        return torch.ones_like(params)

    update, state = setup(settings, rule="langevin", temperature=0.5, noise=noise)
    before = state.params.detach().clone()
    direction = update.direction(state).direction
    step(init(update, state, settings), None)
    torch.testing.assert_close(drawn[0], before + 0.1 * direction)  # after the optimizer's step
    torch.testing.assert_close(state.params.detach(), drawn[0] + (2 * 0.1 * 0.5) ** 0.5)


def test_checkpointer_round_trips(tmp_path):
    settings = TrainSettings(steps=10, lr=0.05)
    update, state = setup(settings, rule="langevin", temperature=1.0)
    loop = init(update, state, settings)
    for _ in range(3):
        step(loop, None)
    saver = Checkpointer(tmp_path / "c.ckpt", _state_key("job", settings, loop.params))
    saver.save(loop, 3, [(3, [0.5])])

    _, fresh_state = setup(settings, seed=9, rule="langevin", temperature=1.0)
    other = init(update, fresh_state, settings)
    assert saver.resume(other) == (3, [(3, [0.5])])
    assert torch.equal(other.params, loop.params)
    assert torch.equal(other.generator.get_state(), loop.generator.get_state())
    assert other.optimizer.state_dict()["state"][0]["step"] == loop.optimizer.state_dict()["state"][0]["step"]


def test_checkpointer_sets_aside_a_checkpoint_of_another_key(tmp_path, caplog):
    settings = TrainSettings(steps=10, lr=0.05)
    loop = init(*setup(settings), settings)
    path = tmp_path / "c.ckpt"
    Checkpointer(path, _state_key("job-a", settings, loop.params)).save(loop, 1, [])
    with caplog.at_level("INFO", logger="repens.train"):
        assert Checkpointer(path, _state_key("job-b", settings, loop.params)).resume(loop) is None
    assert not path.exists() and path.with_name(path.name + ".stale").exists()
    assert Checkpointer(None, "any").resume(loop) is None  # no file: nothing to resume


def test_checkpointer_checks_the_updates_before_it_writes(tmp_path):
    settings = TrainSettings(steps=10, lr=0.05, nonfinite_check_every=5)
    loop = init(*setup(settings), settings)
    loop.guard.flag.fill_(False)
    path = tmp_path / "c.ckpt"
    with pytest.raises(NonFiniteError, match="between steps 1 and 2/10"):
        Checkpointer(path, "k").save(loop, 2, [])
    assert not path.exists()


def test_signal_part_snapshots_then_raises_naming_signal_and_place():
    snaps = []
    stop_if_signalled({"signum": None}, lambda: snaps.append(1), "step 3", None)
    assert snaps == []
    with pytest.raises(Interrupted, match="SIGINT at step 7; checkpoint written to run.ckpt") as err:
        stop_if_signalled({"signum": signal.SIGINT}, lambda: snaps.append(7), "step 7", "run.ckpt")
    assert snaps == [7] and err.value.signum == signal.SIGINT


def test_stop_signals_records_the_signal_and_restores_the_handler():
    previous = signal.getsignal(signal.SIGTERM)
    with stop_signals(True) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop["signum"] == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == previous
    with stop_signals(False) as stop:  # no checkpoint file: nothing caught
        assert signal.getsignal(signal.SIGTERM) == previous


def test_progress_logs_at_its_cadence_with_the_repulsion_ratio(caplog, tmp_path):
    settings = TrainSettings(steps=25, lr=0.1, log_every=10)
    update, state = setup(settings)
    progress = Progress(settings, start=0, on_log=lambda done, params: {"mean": float(params.mean())})
    assert [d for d in range(1, 26) if progress.due(d)] == [10, 20, 25]
    result = update.direction(state)
    repulsion = []
    with caplog.at_level("INFO", logger="repens.train"):
        progress.record(10, result, state.params, repulsion)
    assert repulsion and repulsion[0][0] == 10 and len(repulsion[0][1]) == 1
    line = next(r.getMessage() for r in caplog.records if "step 10/25" in r.getMessage())
    assert "mean=" in line
    # the ratio kept is the one the line shows, and the log parser reads it back
    (log := tmp_path / "run.log").write_text(f"2026-01-01 00:00:00,000 repens.train INFO {line}\n")
    ((_, fields),) = [point for segment in parse_log(log) for point in segment["points"]]
    assert fields["repulsion"] == pytest.approx(repulsion[0][1][0], rel=1e-3) and fields["repulsion"] > 0


def test_progress_line_of_a_rule_without_repulsion_has_no_ratio(caplog):
    settings = TrainSettings(steps=10, lr=0.1, log_every=10)
    update, state = setup(settings, rule="ensemble")
    progress = Progress(settings, start=0)
    repulsion = []
    with caplog.at_level("INFO", logger="repens.train"):
        progress.record(10, update.direction(state), state.params, repulsion)
    assert repulsion == [] and not any("repulsion=" in r.getMessage() for r in caplog.records)


def test_every_is_due_after_its_seconds():
    assert not Every(1e9).due()
    every = Every(0.0)
    assert every.due()
    every.seconds = 1e9
    every.restart()
    assert not every.due()


def test_init_and_run_compose_to_train(tmp_path):
    settings = TrainSettings(steps=30, lr=0.05, lr_decay=0.9, lr_decay_steps=7)
    reference = train(*setup(settings, rule="langevin", temperature=1.0), settings)
    loop = init(*setup(settings, rule="langevin", temperature=1.0), settings)
    repulsion = run(loop, settings, lambda gen: None, Checkpointer(None, "k"))
    assert torch.equal(loop.params.detach(), reference.params) and repulsion == reference.repulsion
