"""Training loop: resume after an interruption equals an uninterrupted run; NaN guard."""

import json
import os
import signal

import pytest
import torch

from repens.models.posteriors import TargetPosterior
from repens.models.targets import Gaussian
from repens.training.train import Interrupted, NonFiniteError, TrainSettings
from rule_hooks import Constant, Hooked, crash_at, fit, nan_at, rule_for

POSTERIOR = TargetPosterior(Gaussian())


def setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    start = torch.randn(30, 2, generator=g, dtype=torch.float64)
    return start, g


def signal_at(rule, n, signum):
    """``rule`` that sends this process ``signum`` at its ``n``-th update."""
    return Hooked(rule, lambda calls: os.kill(os.getpid(), signum) if calls == n else None)


# Langevin draws noise from the generator, so resuming must also restore its state.
@pytest.mark.parametrize("rule,options", [("wgd", {"estimator": "sge"}), ("langevin", {"temperature": 1.0})])
def test_resume_after_crash_equals_uninterrupted_run(tmp_path, rule, options):
    settings = TrainSettings(steps=40, lr=0.05, checkpoint_seconds=0.0)
    start, g = setup()
    update = rule_for(rule, POSTERIOR, settings, **options)
    reference = fit(update, start, settings, g).params

    start, g = setup()
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):  # a kill between two checkpoints
        fit(crash_at(update, 25), start, settings, g, checkpoint=ckpt)
    assert torch.load(ckpt, weights_only=False)["step"] == 24

    _, g2 = setup(seed=123)  # a fresh process: generator state comes from the checkpoint
    resumed = fit(update, start, settings, g2, checkpoint=ckpt).params
    assert torch.equal(resumed, reference)


def test_sigterm_checkpoints_and_stops(tmp_path):
    settings = TrainSettings(steps=50, lr=0.05)
    start, g = setup()
    update = rule_for("svgd", POSTERIOR, settings)
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(Interrupted):
        fit(signal_at(update, 10, signal.SIGTERM), start, settings, g, checkpoint=ckpt)
    assert torch.load(ckpt, weights_only=False)["step"] == 10
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))

    start, g = setup()
    reference = fit(update, start, settings, g).params
    _, g2 = setup()
    resumed = fit(update, start, settings, g2, checkpoint=ckpt).params
    assert torch.equal(resumed, reference)


def test_non_finite_update_stops_with_a_clear_error():
    start, g = setup()
    settings = TrainSettings(steps=5, lr=0.1)
    with pytest.raises(NonFiniteError, match="step 1/5"):
        fit(nan_at(rule_for("ensemble", POSTERIOR, settings), 1), start, settings, g)


def test_unknown_optimizer_is_rejected_before_training():
    start, g = setup()
    settings = TrainSettings(steps=5, lr=0.1, optimizer="rmsprop")
    with pytest.raises(ValueError, match="optimizer 'rmsprop'"):
        fit(rule_for("ensemble", POSTERIOR, settings), start, settings, g)


def test_a_rule_stepping_at_another_rate_than_the_settings_is_refused():
    start, g = setup()
    rule = rule_for("ensemble", POSTERIOR, TrainSettings(steps=5, lr=0.1))
    with pytest.raises(ValueError, match="lr 0.1 but the settings say 0.2"):
        fit(rule, start, TrainSettings(steps=5, lr=0.2), g)


def test_same_seed_same_result():
    outs = []
    for _ in range(2):
        start, g = setup(seed=5)
        settings = TrainSettings(steps=20, lr=0.1)
        outs.append(fit(rule_for("wgd", POSTERIOR, settings, estimator="ssge"), start, settings, g).params)
    assert torch.equal(outs[0], outs[1])


def test_langevin_noise_is_preconditioned_like_adam():
    from repens.methods.rules.langevin import langevin_noise_std

    params = torch.zeros(3, requires_grad=True)
    adam = torch.optim.Adam([params], lr=0.01)
    params.grad = torch.tensor([1.0, 4.0, 100.0])
    adam.step()  # after one step the bias-corrected second moment is grad^2
    std = langevin_noise_std(adam, params, 0.5)
    expected = torch.sqrt(2 * 0.01 * 0.5 / (torch.tensor([1.0, 4.0, 100.0]) + 1e-8))
    torch.testing.assert_close(std, expected)
    sgd = torch.optim.SGD([params], lr=0.01)
    assert langevin_noise_std(sgd, params, 0.5) == pytest.approx((2 * 0.01 * 0.5) ** 0.5)


@pytest.mark.parametrize("change", ["lr", "key"])
def test_checkpoint_of_other_settings_is_set_aside(tmp_path, caplog, change):
    """Kill under one setting, rerun under another: the result is a clean run's."""
    old = TrainSettings(steps=40, lr=0.1, checkpoint_seconds=0.0)
    new = TrainSettings(steps=40, lr=0.05 if change == "lr" else 0.1, checkpoint_seconds=0.0)
    new_key = "job-b" if change == "key" else "job-a"
    ckpt = tmp_path / "run.ckpt"
    start, g = setup()
    with pytest.raises(KeyboardInterrupt):
        fit(crash_at(rule_for("langevin", POSTERIOR, old, temperature=1.0), 25), start, old, g, checkpoint=ckpt,
            checkpoint_key="job-a")  # fmt: skip
    assert ckpt.exists()

    update = rule_for("langevin", POSTERIOR, new, temperature=1.0)
    start, g = setup()
    clean = fit(update, start, new, g).params
    start, g = setup()
    with caplog.at_level("INFO", logger="repens.train"):
        rerun = fit(update, start, new, g, checkpoint=ckpt, checkpoint_key=new_key).params
    assert torch.equal(rerun, clean)
    lines = [r.getMessage() for r in caplog.records if "other settings" in r.getMessage()]
    assert len(lines) == 1 and str(ckpt) in lines[0] and "starting from step 0" in lines[0], caplog.text
    assert "resumed" not in caplog.text
    assert (tmp_path / "run.ckpt.stale").exists()


def test_checkpoint_of_same_settings_resumes(tmp_path, caplog):
    settings = TrainSettings(steps=40, lr=0.05, checkpoint_seconds=0.0)
    update = rule_for("langevin", POSTERIOR, settings, temperature=1.0)
    start, g = setup()
    reference = fit(update, start, settings, g).params
    ckpt = tmp_path / "run.ckpt"
    start, g = setup()
    with pytest.raises(KeyboardInterrupt):
        fit(crash_at(update, 25), start, settings, g, checkpoint=ckpt, checkpoint_key="job-a")
    _, g2 = setup(seed=123)
    with caplog.at_level("INFO", logger="repens.train"):
        resumed = fit(update, start, settings, g2, checkpoint=ckpt, checkpoint_key="job-a").params
    assert torch.equal(resumed, reference)
    assert "resumed from" in caplog.text and "other settings" not in caplog.text


def test_checkpoint_without_key_is_set_aside(tmp_path, caplog):
    """A checkpoint from before keys (or a foreign file) is not resumed."""
    settings = TrainSettings(steps=10, lr=0.05)
    start, g = setup()
    ckpt = tmp_path / "run.ckpt"
    torch.save({"step": 5, "params": start + 100.0}, ckpt)
    update = rule_for("svgd", POSTERIOR, settings)
    clean = fit(update, start, settings, setup()[1]).params
    with caplog.at_level("INFO", logger="repens.train"):
        out = fit(update, start, settings, g, checkpoint=ckpt, checkpoint_key="k").params
    assert torch.equal(out, clean)
    assert "key none != " in caplog.text


def test_sigint_checkpoints_and_stops_like_sigterm(tmp_path):
    settings = TrainSettings(steps=50, lr=0.05)
    start, g = setup()
    update = rule_for("svgd", POSTERIOR, settings)
    before = signal.getsignal(signal.SIGINT)
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(Interrupted) as err:
        fit(signal_at(update, 10, signal.SIGINT), start, settings, g, checkpoint=ckpt)
    assert err.value.signum == signal.SIGINT and "SIGINT at step 10" in str(err.value)
    assert torch.load(ckpt, weights_only=False)["step"] == 10
    assert signal.getsignal(signal.SIGINT) is before

    start, g = setup()
    reference = fit(update, start, settings, g).params
    _, g2 = setup()
    resumed = fit(update, start, settings, g2, checkpoint=ckpt).params
    assert torch.equal(resumed, reference)


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_cli_exit_code_of_an_interrupted_run(tmp_path, monkeypatch, signum, code):
    from repens import cli
    from repens.experiments import RUNNERS

    def runner(job, out, checkpoint, **runtime):
        raise Interrupted(f"{signal.Signals(signum).name} at step 3; checkpoint written to {checkpoint}", signum)

    monkeypatch.setitem(RUNNERS, "synthetic", runner)
    spec = {
        "experiment": "synthetic",
        "dataset": "gaussian",
        "method": "svgd",
        "seed": 0,
        "rule": "svgd",
        "particles": 2,
        "steps": 5,
        "lr": 0.1,
        "init_std": 1.0,
    }  # the CLI reads the spec before the runner
    assert cli.main(["train", "--spec", json.dumps(spec), "--out", str(tmp_path / "x.npz")]) == code


def test_ctrl_c_outside_training_is_one_line_and_exit_130(monkeypatch, capsys):
    """SIGINT during, say, an HMC chain (checkpointed per chain): no traceback, status 130."""
    from repens import cli
    from repens.experiments import hmc

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(hmc, "run_hmc", interrupted)
    assert cli.main(["hmc", "--spec", "{}", "--out", "unused.npz"]) == 130
    err = capsys.readouterr().err
    assert "interrupted (SIGINT)" in err and "Traceback" not in err


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_direction_is_finite_finds_one_bad_entry(bad):
    from repens.training.train import direction_is_finite

    direction = torch.full((4, 1000), 3e38)  # finite, but the sum overflows: still finite
    assert direction_is_finite(direction)
    direction[2, 517] = bad
    assert not direction_is_finite(direction)
    small = torch.ones(3, 5)
    small[1, 1] = bad
    assert not direction_is_finite(small)


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_optimizer_ascends_phi(name):
    from repens.training.train import make_optimizer

    params = torch.zeros(2, 3, requires_grad=True)
    opt = make_optimizer(name, params, 0.1)
    params.grad = torch.ones(2, 3)
    opt.step()
    assert (params > 0).all()  # moved along +phi


# ------------------------------------------- the GPU's deferred finiteness check, on the CPU
def test_deferred_check_catches_a_bad_step_before_any_checkpoint_or_result(tmp_path):
    start, g = setup()
    settings = TrainSettings(steps=20, lr=0.05, nonfinite_check_every=8, checkpoint_seconds=0.0)
    svgd = rule_for("svgd", POSTERIOR, settings)
    ckpt = tmp_path / "run.ckpt"
    # a checkpoint is written every step here, and each is preceded by a check
    with pytest.raises(NonFiniteError, match="between steps 11 and 11/20"):
        fit(nan_at(svgd, 11), start, settings, g, checkpoint=ckpt)
    saved = torch.load(ckpt, weights_only=False)
    assert saved["step"] == 10 and torch.isfinite(saved["params"]).all()
    # without checkpoints the host looks every 8 steps
    start, g = setup()
    with pytest.raises(NonFiniteError, match=r"between steps 9 and 16/20"):
        fit(nan_at(svgd, 11), start, settings, g)


def test_deferred_check_changes_nothing_when_all_is_finite():
    runs = []
    for every in (1, 7):
        start, g = setup()
        settings = TrainSettings(steps=30, lr=0.05, nonfinite_check_every=every)
        runs.append(fit(rule_for("langevin", POSTERIOR, settings, temperature=1.0), start, settings, g).params)
    assert torch.equal(runs[0], runs[1])


def test_deferred_check_at_the_last_step():
    start, g = setup()
    settings = TrainSettings(steps=10, lr=0.05, nonfinite_check_every=100)
    with pytest.raises(NonFiniteError, match="between steps 1 and 10/10"):
        fit(nan_at(rule_for("ensemble", POSTERIOR, settings), 10), start, settings, g)


# ----------------------------------------------------- epochs, lr decay, repulsion diagnostic
def _network_problem(sets=3, n=4, rows=10, seed=0):
    from repens.models.networks import mlp
    from repens.models.particles import StackedModel
    from repens.models.posteriors import NetworkPosterior

    g = torch.Generator().manual_seed(seed)
    post = NetworkPosterior(StackedModel(mlp(2, [5], 1)), "gaussian", num_train=rows, noise_std=0.5)
    x = torch.randn(sets, rows, 2, generator=g, dtype=torch.float64)
    y = torch.randn(sets, rows, generator=g, dtype=torch.float64)
    start = post.sample_prior(sets * n, g).double().view(sets, n, -1)
    return post, x, y, start


def test_epoch_sampler_visits_every_row_once_an_epoch_per_split():
    from repens.methods.minibatches import EpochSampler

    x = torch.arange(2 * 10 * 1, dtype=torch.float64).view(2, 10, 1)
    y = torch.arange(20, dtype=torch.float64).view(2, 10)
    sampler = EpochSampler(x, y, batch_size=4)
    assert sampler.steps_per_epoch == 3
    g = torch.Generator().manual_seed(0)
    for _epoch in range(2):
        batches = [sampler(g) for _ in range(sampler.steps_per_epoch)]
        assert [b.y.shape for b in batches] == [(2, 4), (2, 4), (2, 2)]  # the last batch is the rest
        seen = torch.cat([b.y for b in batches], dim=-1)
        for k in range(2):  # each split its own rows, each exactly once
            assert sorted(seen[k].tolist()) == y[k].tolist()
        assert torch.equal(torch.cat([b.x for b in batches], dim=-2).squeeze(-1), seen)


def test_gather_rows_equals_advanced_indexing():
    from repens.methods.minibatches import gather_rows

    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(3, 7, 2, 4, generator=g), torch.randn(3, 7, generator=g)
    idx = torch.stack([torch.randperm(7, generator=g)[:5] for _ in range(3)])
    rows = torch.arange(3).unsqueeze(-1)
    batch = gather_rows(x, y, idx)
    assert torch.equal(batch.x, x[rows, idx]) and torch.equal(batch.y, y[rows, idx])
    assert batch.x.shape == (3, 5, 2, 4) and batch.y.shape == (3, 5)


def test_learning_rate_decays_per_epoch_staircase():
    from repens.training.train import learning_rate

    settings = TrainSettings(steps=30, lr=0.1, lr_decay=0.5, lr_decay_steps=4)
    assert [learning_rate(settings, s) for s in (0, 3, 4, 7, 8, 12)] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.0125]
    assert learning_rate(TrainSettings(steps=3, lr=0.1), 100) == 0.1
    with pytest.raises(ValueError, match="lr_decay_steps"):
        learning_rate(TrainSettings(steps=3, lr=0.1, lr_decay=0.9), 1)


def test_sgd_step_uses_the_decayed_rate():
    """With SGD the move of step t is exactly lr_t * phi: a constant direction shows the schedule."""
    start = torch.zeros(1, 1, dtype=torch.float64)
    settings = TrainSettings(steps=6, lr=1.0, optimizer="sgd", lr_decay=0.5, lr_decay_steps=2)
    out = fit(Constant(1.0, optimizer="sgd", lr=1.0), start, settings, torch.Generator()).params
    assert float(out) == 1 + 1 + 0.5 + 0.5 + 0.25 + 0.25


@pytest.mark.parametrize("rule,options", [("svgd", {}), ("langevin", {"temperature": 1.0, "mmd_weight": 5.0})])
def test_resume_with_epochs_and_decay_equals_uninterrupted_run(tmp_path, rule, options):
    """The epoch sampler's permutation and position and the decayed rate survive a kill
    mid-epoch: the resumed run equals the uninterrupted one bit for bit."""
    from repens.methods.minibatches import EpochSampler

    post, x, y, start = _network_problem()
    settings = TrainSettings(steps=23, lr=0.01, lr_decay=0.9, lr_decay_steps=3, checkpoint_seconds=0.0, log_every=5)
    update = rule_for(rule, post, settings, **options)

    def run(g, sampler, upd, ckpt=None):
        return fit(upd, start, settings, g, next_batch=sampler, checkpoint=ckpt)

    reference = run(torch.Generator().manual_seed(1), EpochSampler(x, y, 4), update)
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):  # mid-epoch (steps 12-14 are epoch 4)
        run(torch.Generator().manual_seed(1), EpochSampler(x, y, 4), crash_at(update, 14), ckpt)
    resumed = run(torch.Generator().manual_seed(99), EpochSampler(x, y, 4), update, ckpt)
    assert torch.equal(resumed.params, reference.params)
    assert resumed.repulsion == reference.repulsion
    assert [step for step, _ in reference.repulsion] == [5, 10, 15, 20, 23]
    assert all(len(ratios) == 3 and all(r > 0 for r in ratios) for _, ratios in reference.repulsion)


def test_logged_ratios_keep_six_significant_digits_not_six_decimals():
    from repens.training.train import significant

    assert significant(3.21987654e-9) == 3.21988e-9  # six decimals made this 0: "no repulsion at all"
    assert significant(0.123456789) == 0.123457 and significant(0.0) == 0.0 and significant(12.5) == 12.5


def test_repulsion_ratio_is_absent_without_repulsion_and_zero_for_one_particle():
    from repens.methods.rule import build
    from repens.methods.updates import repulsion_ratio
    from repens.models.posteriors import Batch

    post, x, y, start = _network_problem(sets=2, n=1)

    def ratio(rule, **options):
        built = build(rule, "weight", post, **options)
        return repulsion_ratio(built.direction(built.init(start, torch.Generator().manual_seed(0)), Batch(x, y)))

    assert ratio("ensemble") is None
    assert ratio("langevin", temperature=1.0) is None
    assert torch.equal(ratio("svgd"), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(ratio("wgd", estimator="kde"), torch.zeros(2, dtype=torch.float64))


def test_a_finished_run_leaves_its_last_step_checkpointed_so_a_rerun_trains_nothing(tmp_path, caplog):
    """A job killed after its last step (while it evaluates) loses no training: the
    checkpoint holds the final step, and a rerun resumes there and returns the same particles."""
    settings = TrainSettings(steps=30, lr=0.05, checkpoint_seconds=1e9)  # no periodic checkpoint
    update = rule_for("langevin", POSTERIOR, settings, temperature=1.0)
    start, g = setup()
    ckpt = tmp_path / "run.ckpt"
    first = fit(update, start, settings, g, checkpoint=ckpt).params
    assert torch.load(ckpt, weights_only=False)["step"] == settings.steps

    counted = Hooked(update)
    _, g2 = setup(seed=123)
    with caplog.at_level("INFO", logger="repens.train"):
        again = fit(counted, start, settings, g2, checkpoint=ckpt).params
    assert counted.calls == 0 and f"at step {settings.steps}/{settings.steps}" in caplog.text
    assert torch.equal(again, first)
    assert g2.get_state().equal(g.get_state())  # what follows the training draws the same numbers
