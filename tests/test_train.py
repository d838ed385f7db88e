"""Training loop: resume after an interruption equals an uninterrupted run; NaN guard."""

import json
import os
import signal

import pytest
import torch

from repens.methods.updates import StepContext, make_update
from repens.models.kernels import RBF
from repens.models.posteriors import TargetPosterior
from repens.models.targets import Gaussian
from repens.training.train import Interrupted, NonFiniteError, TrainSettings, TrainState, train


def setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    start = torch.randn(30, 2, generator=g, dtype=torch.float64)
    ctx = StepContext(TargetPosterior(Gaussian()), RBF(), g)
    return start, g, ctx


# Langevin draws noise from the generator, so resuming must also restore its state.
@pytest.mark.parametrize("rule,options", [("wgd", {"estimator": "sge"}), ("langevin", {"temperature": 1.0})])
def test_resume_after_crash_equals_uninterrupted_run(tmp_path, rule, options):
    settings = TrainSettings(steps=40, lr=0.05, checkpoint_seconds=0.0)
    start, g, ctx = setup()
    update = make_update(rule, **options)
    reference = train(TrainState(start), update, lambda b, a: ctx, settings, g).params

    start, g, ctx = setup()
    calls = {"n": 0}

    def crashing(params, context):
        calls["n"] += 1
        if calls["n"] == 25:
            raise KeyboardInterrupt  # a kill between two checkpoints
        return update(params, context)

    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):
        train(TrainState(start), crashing, lambda b, a: ctx, settings, g, checkpoint=ckpt)
    assert torch.load(ckpt, weights_only=False)["step"] == 24

    _, g2, ctx2 = setup(seed=123)  # a fresh process: generator state comes from the checkpoint
    resumed = train(TrainState(start), update, lambda b, a: ctx2, settings, g2, checkpoint=ckpt).params
    assert torch.equal(resumed, reference)


def test_sigterm_checkpoints_and_stops(tmp_path):
    settings = TrainSettings(steps=50, lr=0.05)
    start, g, ctx = setup()
    update = make_update("svgd")
    calls = {"n": 0}

    def terminated(params, context):
        calls["n"] += 1
        if calls["n"] == 10:
            os.kill(os.getpid(), signal.SIGTERM)
        return update(params, context)

    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(Interrupted):
        train(TrainState(start), terminated, lambda b, a: ctx, settings, g, checkpoint=ckpt)
    assert torch.load(ckpt, weights_only=False)["step"] == 10
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))

    start, g, ctx = setup()
    reference = train(TrainState(start), update, lambda b, a: ctx, settings, g).params
    _, g2, ctx2 = setup()
    resumed = train(TrainState(start), update, lambda b, a: ctx2, settings, g2, checkpoint=ckpt).params
    assert torch.equal(resumed, reference)


def test_non_finite_update_stops_with_a_clear_error():
    start, g, ctx = setup()

    def exploding(params, context):
        out = make_update("ensemble")(params, context)
        return type(out)(out.direction * float("nan"))

    with pytest.raises(NonFiniteError, match="step 1/5"):
        train(TrainState(start), exploding, lambda b, a: ctx, TrainSettings(steps=5, lr=0.1), g)


def test_unknown_optimizer_is_rejected_before_training():
    start, g, ctx = setup()
    with pytest.raises(ValueError, match="optimizer 'rmsprop'"):
        train(
            TrainState(start),
            make_update("ensemble"),
            lambda b, a: ctx,
            TrainSettings(steps=5, lr=0.1, optimizer="rmsprop"),
            g,
        )


def test_same_seed_same_result():
    outs = []
    for _ in range(2):
        start, g, ctx = setup(seed=5)
        outs.append(
            train(
                TrainState(start),
                make_update("wgd", estimator="ssge"),
                lambda b, a: ctx,  # noqa: B023 (train calls it at once)
                TrainSettings(steps=20, lr=0.1),
                g,
            ).params
        )
    assert torch.equal(outs[0], outs[1])


def test_langevin_noise_is_preconditioned_like_adam():
    from repens.methods.updates import langevin_noise_std

    params = torch.zeros(3, requires_grad=True)
    adam = torch.optim.Adam([params], lr=0.01)
    params.grad = torch.tensor([1.0, 4.0, 100.0])
    adam.step()  # after one step the bias-corrected second moment is grad^2
    std = langevin_noise_std(adam, params, 0.5)
    expected = torch.sqrt(2 * 0.01 * 0.5 / (torch.tensor([1.0, 4.0, 100.0]) + 1e-8))
    torch.testing.assert_close(std, expected)
    sgd = torch.optim.SGD([params], lr=0.01)
    assert langevin_noise_std(sgd, params, 0.5) == pytest.approx((2 * 0.01 * 0.5) ** 0.5)


def _crash_at(update, n):
    calls = {"n": 0}

    def crashing(params, context):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt  # a kill between two checkpoints
        return update(params, context)

    return crashing


@pytest.mark.parametrize("change", ["lr", "key"])
def test_checkpoint_of_other_settings_is_set_aside(tmp_path, caplog, change):
    """Kill under one setting, rerun under another: the result is a clean run's."""
    old = TrainSettings(steps=40, lr=0.1, checkpoint_seconds=0.0)
    new = TrainSettings(steps=40, lr=0.05 if change == "lr" else 0.1, checkpoint_seconds=0.0)
    new_key = "job-b" if change == "key" else "job-a"
    update = make_update("langevin", temperature=1.0)
    ckpt = tmp_path / "run.ckpt"
    start, g, ctx = setup()
    with pytest.raises(KeyboardInterrupt):
        train(
            TrainState(start), _crash_at(update, 25), lambda b, a: ctx, old, g, checkpoint=ckpt, checkpoint_key="job-a"
        )
    assert ckpt.exists()

    start, g, ctx = setup()
    clean = train(TrainState(start), update, lambda b, a: ctx, new, g).params
    start, g, ctx = setup()
    with caplog.at_level("INFO", logger="repens.train"):
        rerun = train(
            TrainState(start), update, lambda b, a: ctx, new, g, checkpoint=ckpt, checkpoint_key=new_key
        ).params
    assert torch.equal(rerun, clean)
    lines = [r.getMessage() for r in caplog.records if "other settings" in r.getMessage()]
    assert len(lines) == 1 and str(ckpt) in lines[0] and "starting from step 0" in lines[0], caplog.text
    assert "resumed" not in caplog.text
    assert (tmp_path / "run.ckpt.stale").exists()


def test_checkpoint_of_same_settings_resumes(tmp_path, caplog):
    settings = TrainSettings(steps=40, lr=0.05, checkpoint_seconds=0.0)
    update = make_update("langevin", temperature=1.0)
    start, g, ctx = setup()
    reference = train(TrainState(start), update, lambda b, a: ctx, settings, g).params
    ckpt = tmp_path / "run.ckpt"
    start, g, ctx = setup()
    with pytest.raises(KeyboardInterrupt):
        train(
            TrainState(start),
            _crash_at(update, 25),
            lambda b, a: ctx,
            settings,
            g,
            checkpoint=ckpt,
            checkpoint_key="job-a",
        )
    _, g2, ctx2 = setup(seed=123)
    with caplog.at_level("INFO", logger="repens.train"):
        resumed = train(
            TrainState(start), update, lambda b, a: ctx2, settings, g2, checkpoint=ckpt, checkpoint_key="job-a"
        ).params
    assert torch.equal(resumed, reference)
    assert "resumed from" in caplog.text and "other settings" not in caplog.text


def test_checkpoint_without_key_is_set_aside(tmp_path, caplog):
    """A checkpoint from before keys (or a foreign file) is not resumed."""
    settings = TrainSettings(steps=10, lr=0.05)
    start, g, ctx = setup()
    ckpt = tmp_path / "run.ckpt"
    torch.save({"step": 5, "params": start + 100.0}, ckpt)
    update = make_update("svgd")
    clean = train(TrainState(start), update, lambda b, a: ctx, settings, setup()[1]).params
    with caplog.at_level("INFO", logger="repens.train"):
        out = train(
            TrainState(start), update, lambda b, a: ctx, settings, g, checkpoint=ckpt, checkpoint_key="k"
        ).params
    assert torch.equal(out, clean)
    assert "key none != " in caplog.text


def test_sigint_checkpoints_and_stops_like_sigterm(tmp_path):
    settings = TrainSettings(steps=50, lr=0.05)
    start, g, ctx = setup()
    update = make_update("svgd")
    calls = {"n": 0}

    def interrupted(params, context):
        calls["n"] += 1
        if calls["n"] == 10:
            os.kill(os.getpid(), signal.SIGINT)
        return update(params, context)

    before = signal.getsignal(signal.SIGINT)
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(Interrupted) as err:
        train(TrainState(start), interrupted, lambda b, a: ctx, settings, g, checkpoint=ckpt)
    assert err.value.signum == signal.SIGINT and "SIGINT at step 10" in str(err.value)
    assert torch.load(ckpt, weights_only=False)["step"] == 10
    assert signal.getsignal(signal.SIGINT) is before

    start, g, ctx = setup()
    reference = train(TrainState(start), update, lambda b, a: ctx, settings, g).params
    _, g2, ctx2 = setup()
    resumed = train(TrainState(start), update, lambda b, a: ctx2, settings, g2, checkpoint=ckpt).params
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
def _nan_at(update, step):
    calls = {"n": 0}

    def poisoned(params, context):
        calls["n"] += 1
        out = update(params, context)
        return type(out)(out.direction * float("nan")) if calls["n"] == step else out

    return poisoned


def test_deferred_check_catches_a_bad_step_before_any_checkpoint_or_result(tmp_path):
    start, g, ctx = setup()
    settings = TrainSettings(steps=20, lr=0.05, nonfinite_check_every=8, checkpoint_seconds=0.0)
    ckpt = tmp_path / "run.ckpt"
    # a checkpoint is written every step here, and each is preceded by a check
    with pytest.raises(NonFiniteError, match="between steps 11 and 11/20"):
        train(TrainState(start), _nan_at(make_update("svgd"), 11), lambda b, a: ctx, settings, g, checkpoint=ckpt)
    saved = torch.load(ckpt, weights_only=False)
    assert saved["step"] == 10 and torch.isfinite(saved["params"]).all()
    # without checkpoints the host looks every 8 steps, or when a later step fails on the
    # NaN particles (here the target density refuses them at step 12)
    start, g, ctx = setup()
    with pytest.raises(NonFiniteError, match=r"between steps 9 and (1[1-6])/20"):
        train(TrainState(start), _nan_at(make_update("svgd"), 11), lambda b, a: ctx, settings, g)


def test_deferred_check_changes_nothing_when_all_is_finite():
    runs = []
    for every in (1, 7):
        start, g, ctx = setup()
        settings = TrainSettings(steps=30, lr=0.05, nonfinite_check_every=every)
        runs.append(
            train(
                TrainState(start),
                make_update("langevin", temperature=1.0),
                lambda b, a: ctx,  # noqa: B023 (train calls it at once)
                settings,
                g,
            ).params
        )
    assert torch.equal(runs[0], runs[1])


def test_deferred_check_at_the_last_step():
    start, g, ctx = setup()
    settings = TrainSettings(steps=10, lr=0.05, nonfinite_check_every=100)
    with pytest.raises(NonFiniteError, match="between steps 1 and 10/10"):
        train(TrainState(start), _nan_at(make_update("ensemble"), 10), lambda b, a: ctx, settings, g)


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
    ones = lambda p, c: __import__("repens.methods.updates", fromlist=["Update"]).Update(torch.ones_like(p))  # noqa: E731
    settings = TrainSettings(steps=6, lr=1.0, optimizer="sgd", lr_decay=0.5, lr_decay_steps=2)
    out = train(TrainState(start), ones, lambda b, a: None, settings, torch.Generator()).params
    assert float(out) == 1 + 1 + 0.5 + 0.5 + 0.25 + 0.25


@pytest.mark.parametrize("rule,options", [("svgd", {}), ("langevin", {"temperature": 1.0, "mmd_weight": 5.0})])
def test_resume_with_epochs_and_decay_equals_uninterrupted_run(tmp_path, rule, options):
    """The epoch sampler's permutation and position and the decayed rate survive a kill
    mid-epoch: the resumed run equals the uninterrupted one bit for bit."""
    from repens.methods.minibatches import EpochSampler
    from repens.models.kernels import RBF

    post, x, y, start = _network_problem()
    settings = TrainSettings(steps=23, lr=0.01, lr_decay=0.9, lr_decay_steps=3, checkpoint_seconds=0.0, log_every=5)
    update = make_update(rule, **options)

    def run(g, sampler, upd, ckpt=None):
        return train(
            TrainState(start),
            upd,
            lambda b, a: StepContext(post, RBF(), g, b, a),
            settings,
            g,
            next_batch=sampler,
            checkpoint=ckpt,
        )

    reference = run(torch.Generator().manual_seed(1), EpochSampler(x, y, 4), update)
    calls = {"n": 0}

    def crashing(params, context):
        calls["n"] += 1
        if calls["n"] == 14:  # mid-epoch (steps 12-14 are epoch 4)
            raise KeyboardInterrupt
        return update(params, context)

    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):
        run(torch.Generator().manual_seed(1), EpochSampler(x, y, 4), crashing, ckpt)
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
    from repens.methods.updates import repulsion_ratio
    from repens.models.kernels import RBF
    from repens.models.posteriors import Batch

    post, x, y, start = _network_problem(sets=2, n=1)
    ctx = StepContext(post, RBF(), torch.Generator().manual_seed(0), Batch(x, y))
    assert repulsion_ratio(make_update("ensemble")(start, ctx)) is None
    assert repulsion_ratio(make_update("langevin", temperature=1.0)(start, ctx)) is None
    assert torch.equal(repulsion_ratio(make_update("svgd")(start, ctx)), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(
        repulsion_ratio(make_update("wgd", estimator="kde")(start, ctx)), torch.zeros(2, dtype=torch.float64)
    )


def test_a_finished_run_leaves_its_last_step_checkpointed_so_a_rerun_trains_nothing(tmp_path, caplog):
    """A job killed after its last step (while it evaluates) loses no training: the
    checkpoint holds the final step, and a rerun resumes there and returns the same particles."""
    settings = TrainSettings(steps=30, lr=0.05, checkpoint_seconds=1e9)  # no periodic checkpoint
    update = make_update("langevin", temperature=1.0)
    start, g, ctx = setup()
    ckpt = tmp_path / "run.ckpt"
    first = train(TrainState(start), update, lambda b, a: ctx, settings, g, checkpoint=ckpt).params
    assert torch.load(ckpt, weights_only=False)["step"] == settings.steps

    calls = {"n": 0}

    def counted(params, context):
        calls["n"] += 1
        return update(params, context)

    _, g2, ctx2 = setup(seed=123)
    with caplog.at_level("INFO", logger="repens.train"):
        again = train(TrainState(start), counted, lambda b, a: ctx2, settings, g2, checkpoint=ckpt).params
    assert calls["n"] == 0 and f"at step {settings.steps}/{settings.steps}" in caplog.text
    assert torch.equal(again, first)
    assert g2.get_state().equal(g.get_state())  # what follows the training draws the same numbers
