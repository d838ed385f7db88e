"""Seeds of one image method trained as one stack (repens.experiments.image.run_image_stack).

The tolerance is zero. On the CPU with one thread (the tests' conftest, and the image rule's
``threads: 1``) a stacked seed does, float operation for float operation, what its one-seed
job does: the network runs under a vmap over seeds of the one-seed vmap over particles (a
batch of the one-seed GEMMs, each summed by the same single-threaded kernel), the kernels and
score estimators act on each seed's (n, D) block of a batched computation, elementwise work is
lane-independent, and the optimizer's fused kernel gets each seed's block as a tensor of its
own (BlockAdam: one (G, n, D) tensor would move a seed's last ``n D mod 16`` entries from
the kernel's scalar tail into its vector loop, which rounds differently). A batched matrix
product is invariant only where torch's CPU bmm hands each matrix to the BLAS GEMM that one
seed's mm calls: at 400 multiply-adds per matrix or more, no dimension 1. Below, bmm runs a
loop kernel of its own (a multiply, then an add), which on an Intel Xeon (AVX-512) rounds
otherwise than MKL's GEMM (fused multiply-adds; on an AMD EPYC the two agreed): SSGE's
(n, n) @ (n, n) products here (n = 3, the function prior of kde-fwgd and ssge-fwgd) came out
up to 6e-8 apart, and the particles an ulp apart after a few steps. So such products of a
stack run seed by seed (repens.models.kernels.set_matmul, and the kernels' matmul-adds). A stacked
seed's particles, metrics and predictions then equal its one-seed job's bit for bit, and the
tests assert equality. (With several threads neither is invariant: MKL partitions one GEMM's sums by
thread, so even a one-seed job differs between 1 and 2 threads, by the same few ulps per step
as a stack and a one-seed job do there.)
"""

import json
import logging
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import repens.experiments.image as image
from repens.cli import main
from repens.core.jobkey import job_key
from repens.experiments.image import run_image, run_image_stack, stack_checkpoint
from repens.jobs.job import SpecError
from repens.methods.optimizers import make_optimizer
from repens.pipeline.config import resolve_job
from repens.training.train import Interrupted

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
SEEDS = (38, 39, 40)
#: every kind of step: plain gradients (de, anchored), weight-space repulsion (svgd, kde-wgd),
#: function-space repulsion with the GP and the SSGE prior (its prior draws), Langevin noise
#: (dle) and DRLE's prior draws, the hyper-DE search; ssge-fwgd's eigh on (G, n, n)
METHODS = ["de", "svgd", "fsvgd", "kde-wgd", "kde-fwgd", "ssge-fwgd", "anchored", "dle", "drle", "hyper-de"]


from experiments.test_image import _write_set, tiny_sets  # noqa: E402,F401  (tiny data; the fixture)


def _job(method, seed, **extra):
    """A tiny job: 3 particles of a 64-8-10 MLP, 12 steps of 16 images (12 steps, so that a
    rounding difference early on would show in the particles by the end)."""
    job = dict(resolve_job(CONFIG, "image", "fashionmnist", method, seed))
    job.update(
        particles=3,
        steps=12,
        hidden=[8],
        batch_size=16,
        search_trials=3,
        search_steps=4,
        search_top=2,
        log_every=4,
        val_fraction=0.25,
    )
    job.update(extra)
    return job


@pytest.fixture()
def particles(monkeypatch):
    """The trained particles each run hands to its results, by metrics file."""
    seen = {}
    real = image._write_results

    def keep(job, out, model, params, *args, **kwargs):
        seen[Path(out)] = params.detach().clone()
        return real(job, out, model, params, *args, **kwargs)

    monkeypatch.setattr(image, "_write_results", keep)
    return seen


def _assert_same_results(single: Path, stacked: Path, particles: dict) -> None:
    a, b = json.loads(single.read_text()), json.loads(stacked.read_text())
    assert a["metrics"] == b["metrics"]
    assert a["job"] == b["job"]
    one, many = np.load(single.with_name("predictions.npz")), np.load(stacked.with_name("predictions.npz"))
    keys = sorted(set(one.files) - {"provenance"})  # the command line's stamp (test_cli_...)
    assert keys == sorted(set(many.files) - {"provenance"})
    for key in keys:
        np.testing.assert_array_equal(one[key], many[key], err_msg=key)
    assert torch.equal(particles[single], particles[stacked])


@pytest.mark.parametrize("method", METHODS)
def test_stacked_seeds_equal_their_single_seed_jobs(method, tiny_sets, tmp_path, particles):
    jobs = [_job(method, seed) for seed in SEEDS]
    singles = [tmp_path / "single" / str(seed) / "metrics.json" for seed in SEEDS]
    stacked = [tmp_path / "stack" / str(seed) / "metrics.json" for seed in SEEDS]
    for job, out in zip(jobs, singles):
        run_image(job, out, out.with_name("metrics.json.ckpt"), inputs=tiny_sets, device="cpu")
    run_image_stack(jobs, stacked, inputs=tiny_sets, device="cpu")
    for single, stack in zip(singles, stacked):
        _assert_same_results(single, stack, particles)
        record = json.loads(stack.read_text())
        assert record["seed_stack"]["seeds"] == list(SEEDS)
    assert not stack_checkpoint(stacked).exists()
    # the seeds are independent: each seed's particles differ from the others'
    assert not torch.equal(particles[stacked[0]], particles[stacked[1]])
    if jobs[0].get("l2_search"):
        for single, stack in zip(singles, stacked):
            a, b = (json.loads(p.with_name("l2_search.json").read_text()) for p in (single, stack))
            assert a == b


def test_a_seeds_result_does_not_depend_on_its_stack(tiny_sets, tmp_path, particles):
    """Repulsion within a seed only: seed 38 stacked with 39 or with 40 trains the same."""
    first = [tmp_path / "a" / str(s) / "metrics.json" for s in (38, 39)]
    second = [tmp_path / "b" / str(s) / "metrics.json" for s in (38, 40)]
    run_image_stack([_job("svgd", 38), _job("svgd", 39)], first, inputs=tiny_sets, device="cpu")
    run_image_stack([_job("svgd", 38), _job("svgd", 40)], second, inputs=tiny_sets, device="cpu")
    _assert_same_results(first[0], second[0], particles)


def test_interrupted_stack_resumes_to_the_same_results(tiny_sets, tmp_path, particles, monkeypatch, caplog):
    """SIGTERM in the middle: the stack checkpoints every seed's stream (batches, prior draws
    and Langevin noise: DRLE draws all three) and resumes to the one-seed jobs' results."""
    jobs = [_job("drle", seed, steps=20, checkpoint_seconds=0.0) for seed in (38, 39)]
    outs = [tmp_path / "stack" / str(job["seed"]) / "metrics.json" for job in jobs]
    checkpoint = stack_checkpoint(outs)
    real = image.SeedStreams.__call__
    calls = {"n": 0}

    def term_at_step_8(self, generator):
        calls["n"] += 1
        if calls["n"] == 8:
            os.kill(os.getpid(), signal.SIGTERM)  # caught by the loop: checkpoint, then stop
        return real(self, generator)

    monkeypatch.setattr(image.SeedStreams, "__call__", term_at_step_8)
    with pytest.raises(Interrupted, match="SIGTERM at step 8"):
        run_image_stack(jobs, outs, inputs=tiny_sets, device="cpu")
    assert checkpoint.exists() and not any(out.exists() for out in outs)
    assert torch.load(checkpoint, weights_only=False)["step"] == 8
    monkeypatch.setattr(image.SeedStreams, "__call__", real)
    with caplog.at_level(logging.INFO, logger="repens.train"):
        run_image_stack(jobs, outs, inputs=tiny_sets, device="cpu")
    assert f"resumed from {checkpoint} at step 8/20" in caplog.text
    assert not checkpoint.exists()
    for job, out in zip(jobs, outs):
        single = tmp_path / "single" / str(job["seed"]) / "metrics.json"
        run_image(job, single, None, inputs=tiny_sets, device="cpu")
        _assert_same_results(single, out, particles)


def test_a_stack_of_other_seeds_sets_the_checkpoint_aside(tiny_sets, tmp_path, monkeypatch):
    jobs = [_job("de", seed, checkpoint_seconds=0.0) for seed in (38, 39)]
    outs = [tmp_path / str(job["seed"]) / "metrics.json" for job in jobs]
    real = image.SeedStreams.__call__

    def term_at_step_2(self, generator, calls=[0]):  # noqa: B006
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, generator)

    monkeypatch.setattr(image.SeedStreams, "__call__", term_at_step_2)
    with pytest.raises(Interrupted):
        run_image_stack(jobs, outs, inputs=tiny_sets, device="cpu")
    monkeypatch.setattr(image.SeedStreams, "__call__", real)
    other = [_job("de", 38, checkpoint_seconds=0.0), _job("de", 41, checkpoint_seconds=0.0)]
    run_image_stack(other, [outs[0], tmp_path / "41" / "metrics.json"], inputs=tiny_sets, device="cpu")
    assert stack_checkpoint(outs).with_name(stack_checkpoint(outs).name + ".stale").exists()


def test_mismatched_jobs_are_refused(tiny_sets, tmp_path):
    outs = [tmp_path / "a" / "metrics.json", tmp_path / "b" / "metrics.json"]
    with pytest.raises(SpecError, match=r"differ in 'lr' \(0.0025 for seed 38, 0.001 for seed 39\)"):
        run_image_stack([_job("de", 38), _job("de", 39, lr=0.001)], outs, inputs=tiny_sets, device="cpu")
    with pytest.raises(SpecError, match="repeat a seed"):
        run_image_stack([_job("de", 38), _job("de", 38)], outs, inputs=tiny_sets, device="cpu")
    with pytest.raises(ValueError, match="one output per job"):
        run_image_stack([_job("de", 38), _job("de", 39)], outs[:1], inputs=tiny_sets, device="cpu")
    assert not any(out.exists() for out in outs)


def _cli_args(jobs, outs, sets):
    args = ["train-stack", "--input", f"train={sets['train']}", "--input", f"ood={sets['ood']}", "--device", "cpu"]
    for job in jobs:
        args += ["--spec", json.dumps(job)]
    for out in outs:
        args += ["--out", str(out)]
    return args


def test_cli_refuses_mismatched_jobs_in_one_line(tiny_sets, tmp_path, capsys):
    outs = [tmp_path / "a" / "metrics.json", tmp_path / "b" / "metrics.json"]
    with pytest.raises(SystemExit) as err:
        main(_cli_args([_job("de", 38), _job("svgd", 39)], outs, tiny_sets))
    assert str(err.value).startswith(
        "error: --spec: the stacked jobs differ in 'method' ('de' for seed 38, 'svgd' for seed 39)"
    )
    assert "\n" not in str(err.value)
    with pytest.raises(SystemExit, match="2 --spec but 1 --out"):
        main(_cli_args([_job("de", 38), _job("de", 39)], outs[:1], tiny_sets))
    assert not any(out.exists() for out in outs)


def test_cli_writes_each_seeds_stamped_results(tiny_sets, tmp_path, particles):
    jobs = [_job("kde-fwgd", seed) for seed in (38, 39)]
    outs = [tmp_path / "stack" / str(job["seed"]) / "metrics.json" for job in jobs]
    assert main(_cli_args(jobs, outs, tiny_sets)) == 0
    for job, out in zip(jobs, outs):
        single = tmp_path / "single" / str(job["seed"]) / "metrics.json"
        run_image(job, single, None, inputs=tiny_sets, device="cpu")
        _assert_same_results(single, out, particles)
        record = json.loads(out.read_text())
        assert record["provenance"]["job_key"] == job_key(job)  # the seed's own spec, as `train` stamps it
        assert "provenance" in np.load(out.with_name("predictions.npz")).files


@pytest.mark.parametrize("why", ["step_size: curvature", "model: resnet"])
def test_unstackable_jobs_run_the_seeds_one_by_one(why, tmp_path, particles, caplog):
    """The curvature step is each seed's own learning rate; a ResNet's convolutions would
    round otherwise under the vmap over seeds: each seed then runs as `train` runs it."""
    _write_set(tmp_path / "c.npz", 32, 12, shape=(3, 8, 8))
    _write_set(tmp_path / "s.npz", 4, 10, shape=(3, 8, 8), seed=3)
    sets = {"train": str(tmp_path / "c.npz"), "ood": str(tmp_path / "s.npz")}
    extra = (
        {"optimizer": "sgd", "step_size": "curvature"}
        if why == "step_size: curvature"
        else {"model": "resnet", "depth": 8, "width": 2, "steps": 2}
    )
    jobs = [_job("dle", seed, **extra) for seed in (38, 39)]
    outs = [tmp_path / "stack" / str(job["seed"]) / "metrics.json" for job in jobs]
    with caplog.at_level(logging.INFO, logger="repens.image"):
        run_image_stack(jobs, outs, inputs=sets, device="cpu")
    assert f"the seeds run one by one ({why})" in caplog.text
    for job, out in zip(jobs, outs):
        single = tmp_path / "single" / str(job["seed"]) / "metrics.json"
        run_image(job, single, None, inputs=sets, device="cpu")
        _assert_same_results(single, out, particles)
        assert "seed_stack" not in json.loads(out.read_text())


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_seed_stack_optimizers_step_each_seed_as_its_own(name):
    """n D = 5 x 51 = 255 entries a seed (255 mod 16 = 15: a scalar tail in every seed's
    block). Measured here (AVX-512): DirectAdam over the whole (4, 5, 51) stack first differs
    from the one-seed steps at step 8, BlockAdam never; fused SGD agreed either way."""
    g = torch.Generator().manual_seed(0)
    start = torch.randn(4, 5, 51, generator=g)
    stack = start.clone().requires_grad_(True)
    stacked = make_optimizer(name, stack, 0.01, blocks=True)
    singles = [start[k].clone().requires_grad_(True) for k in range(4)]
    ones = [make_optimizer(name, p, 0.01) for p in singles]
    for _ in range(30):
        grad = torch.randn(4, 5, 51, generator=g) * torch.rand(4, 5, 51, generator=g).pow(4) * 100
        stack.grad = grad.clone()
        stacked.step()
        for k, (p, opt) in enumerate(zip(singles, ones)):
            p.grad = grad[k].clone()
            opt.step()
        for k, p in enumerate(singles):
            assert torch.equal(stack.detach()[k], p.detach())
    if name == "adam":  # the state torch.optim's Adam keeps, so checkpoints look alike
        state = stacked.state_dict()["state"][0]
        assert float(state["step"]) == 30 and state["exp_avg"].shape == (4, 5, 51)
        assert torch.equal(state["exp_avg_sq"][2], ones[2].state_dict()["state"][0]["exp_avg_sq"])


@pytest.mark.parametrize("blocks", [False, True], ids=["whole", "in-blocks"])
@pytest.mark.parametrize("estimator", ["kde", "sge", "ssge", "ssge-query", "set_matmul"])
@pytest.mark.parametrize("n, d", [(3, 16), (3, 160), (1, 641), (10, 2560)])
def test_stacked_score_estimators_give_each_set_its_own(estimator, n, d, blocks, monkeypatch):
    """The function-space estimators on a stack of 3 sets (G, n, d) give each set, bit for bit,
    what they give the set alone (n, d). n = 3 is the image tests' (SSGE's (3, 3) @ (3, 3)
    products: bmm's loop kernel, which rounded otherwise than MKL's GEMM on an Intel Xeon);
    d = 16 puts kernel_grad_sum's (3, 3) @ (3, 16) under bmm's GEMM threshold too; n = 1 makes
    its product a rank-1 update; n = 10 is a stack bmm multiplies by GEMMs. ``in-blocks``: every
    product with a wide right side in blocks of 4 columns, as the weights' repulsion runs on the
    CPU (:data:`repens.models.kernels.WIDE_BLOCK`), 5 columns left over in the last block at
    d = 641."""
    from repens.models import kernels
    from repens.models.kernels import RBF, set_matmul

    if blocks:
        monkeypatch.setattr(kernels, "WIDE_BLOCK", 4)
    from repens.models.scores import kde_score, sge_score, ssge_score

    kernel = RBF()
    score = {
        "kde": lambda x, q: kde_score(x, kernel),
        "sge": lambda x, q: sge_score(x, kernel),
        "ssge": lambda x, q: ssge_score(x, kernel, eta=0.01),
        "ssge-query": lambda x, q: ssge_score(x, kernel, eta=0.01, query=q),
        "set_matmul": lambda x, q: set_matmul(x, q.mT),
    }[estimator]
    g = torch.Generator().manual_seed(1)
    x, q = torch.randn(3, n, d, generator=g), torch.randn(3, n, d, generator=g)
    stacked = score(x, q)
    for k in range(3):
        assert torch.equal(stacked[k], score(x[k], q[k]))
