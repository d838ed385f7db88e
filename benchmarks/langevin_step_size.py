"""What the curvature step-size rule gives DLE / DRLE on the real BNN problems (a script, not a test).

For the G.2 toy regression (``experiments.toy``, ``paper`` scale) and UCI datasets
(``experiments.uci``, split 0 by default) it prints:

* ``L``: the largest eigenvalue of the Hessian of ``V = -log p(D|w) - log p(w)`` at the initial
  particles (prior draws), by power iteration (:func:`repens.training.fitting.curvature_step`, as a job
  with ``step_size: curvature`` computes it), and the step ``eta = c / L``;
* a ULA run (DLE, SGD at ``eta``) for the problem's step budget (toy: the config's ``steps``;
  UCI: Pearce et al.'s epochs x ceil(N / batch)): the ensemble-mean train RMSE, the mean
  member's train RMSE and how far the particles moved (``|w - w0| / |w0|``, and the same for the
  output layer), at a few points, then ``L`` again at the end;
* the same for a deep ensemble (Adam at the config's ``lr``) as the fit one could have;
* DRLE's forces: per particle ``|2 MMD force| / |grad V|`` at ``lambda = 1`` (median and range
  over particles, full data, fresh prior draws), along the ULA run (last column), at the initial,
  the ULA-final and the DE-final particles, and the ``lambda`` that makes the median ratio 0.3;
  config.yaml's lambda is 0.3 over the median of the ULA run's column;
* with ``--drle``: DRLE at config.yaml's lambda (fit and the actual force ratio along the run).

    python benchmarks/langevin_step_size.py                          # toy, boston, energy
    python benchmarks/langevin_step_size.py --problems toy --steps 2000
    python benchmarks/langevin_step_size.py \
        --problems toy-classification,concrete,kin8nm,naval,power,protein,wine,yacht \
        --no-de --steps 3000 --points 3
    python benchmarks/langevin_step_size.py --uci-data /work/shared/data/uci --problems boston
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from repens.data.toy import make_toy  # noqa: E402
from repens.data.uci import UCI_FOLDERS, dataset_info, load_split  # noqa: E402
from repens.experiments.toy import toy_posterior  # noqa: E402
from repens.experiments.uci import uci_posterior  # noqa: E402
from repens.jobs.job import Job  # noqa: E402
from repens.methods.minibatches import batch_sampler, stacked_batch_sampler  # noqa: E402
from repens.methods.rule import build  # noqa: E402
from repens.methods.rules.langevin import mmd_force  # noqa: E402
from repens.methods.step_size import DEFAULT_FRACTION, langevin_step_size, relaxation_steps  # noqa: E402
from repens.methods.updates import StepContext, grad_log_likelihood, grad_log_prior  # noqa: E402
from repens.models.posteriors import Batch  # noqa: E402
from repens.pipeline.config import resolve_job  # noqa: E402
from repens.training.fitting import curvature_step, job_rule, kernel_from_job  # noqa: E402
from repens.training.train import TrainSettings, train  # noqa: E402

#: Pearce et al. (2020), Table 4: epochs of the UCI protocol (batch sizes as in config.yaml)
PEARCE_EPOCHS = {
    "boston": 3000,
    "concrete": 2000,
    "energy": 2000,
    "kin8nm": 2000,
    "naval": 1000,
    "power": 1000,
    "protein": 3000,
    "wine": 500,
    "yacht": 3000,
}

TARGET_RATIO = 0.3


def experiment_of(name: str) -> tuple[str, str]:
    return {"toy": ("toy", "regression"), "toy-classification": ("toy", "classification")}.get(name, ("uci", name))


def problem(name: str, config: dict, uci_data: Path, splits: int):
    """Posterior, initial particles, batch sampler, full training batch, steps and the job."""
    if name in ("toy", "toy-classification"):
        dataset = "regression" if name == "toy" else "classification"
        job = resolve_job(config, "toy", dataset, "dle", 42)
        data = make_toy(dataset, 42)
        posterior = toy_posterior(job, data)
        init = posterior.sample_prior(int(job["particles"]), torch.Generator().manual_seed(42))
        return (
            job,
            posterior,
            init,
            batch_sampler(data, int(job["batch_size"])),
            Batch(data.x_train, data.y_train),
            int(job["steps"]),
            1.0,
        )
    job = resolve_job(config, "uci", name, "dle", 42)
    folder = UCI_FOLDERS[name]
    info = dataset_info(uci_data, folder)
    ks = list(range(splits))
    data = [load_split(uci_data, folder, k) for k in ks]
    posterior = uci_posterior(job, data[0], info["n_hidden"])
    n = int(job["particles"])
    init = torch.stack([posterior.sample_prior(n, torch.Generator().manual_seed(42 + k)) for k in ks])
    x = torch.stack([s.x_train for s in data])
    y = torch.stack([s.y_train for s in data])
    batch = int(job["batch_size"])
    steps = PEARCE_EPOCHS.get(name, 40) * math.ceil(x.shape[1] / batch)
    return job, posterior, init, stacked_batch_sampler(x, y, batch), Batch(x, y), steps, 1.0


def fit_report(posterior, params, init, full: Batch, job=None) -> dict[str, float]:
    ratio = float(force_ratios(posterior, params, full, job).median()) if job is not None else float("nan")
    if posterior.likelihood == "categorical":  # "RMSE" columns: error rates of the ensemble and a member
        with torch.no_grad():
            logits = posterior.predict(params, full.x)  # (n, N, C)
            member = (logits.argmax(-1) != full.y).double().mean()
            ensemble = (torch.softmax(logits, -1).mean(0).argmax(-1) != full.y).double().mean()
    with torch.no_grad():
        if posterior.likelihood == "gaussian":
            f = posterior.predict(params, full.x).squeeze(-1)  # (..., n, N)
            member = (f - full.y.unsqueeze(-2)).pow(2).mean(-1).sqrt().mean()
            ensemble = (f.mean(-2) - full.y).pow(2).mean(-1).sqrt().mean()
        moved = ((params - init).norm(dim=-1) / init.norm(dim=-1)).mean()
        last = posterior.model.slots[-2]  # the output layer's weight
        out_moved = (
            (params - init)[..., last.start : last.stop].norm(dim=-1) / init[..., last.start : last.stop].norm(dim=-1)
        ).mean()
    return {
        "rmse_ens": float(ensemble),
        "rmse_member": float(member),
        "moved": float(moved),
        "out_moved": float(out_moved),
        "ratio": ratio,
    }


def force_ratios(posterior, params, full: Batch, job, seed: int = 0) -> torch.Tensor:
    """Per particle ``|2 * 1 * mmd_force| / |grad V|`` (lambda = 1), full data."""
    ctx = StepContext(posterior, kernel_from_job(job), torch.Generator().manual_seed(seed), full)
    grad_v = grad_log_likelihood(params, ctx) + grad_log_prior(params, ctx)
    force = 2.0 * mmd_force(params, ctx)
    return (force.norm(dim=-1) / grad_v.norm(dim=-1)).flatten()


def job_curvature_step(spec: dict, posterior, init, next_batch):
    """The curvature step of the job ``spec`` (:func:`repens.training.fitting.curvature_step`)."""
    job = Job.from_spec(spec)
    return curvature_step(job, job_rule(job, posterior, TrainSettings(steps=1, lr=1.0)), init, next_batch)


def run(posterior, init, job, rule, optimizer: str, lr: float, steps: int, next_batch, full: Batch, points: int):
    """Train the rule ``(name, options)`` and report the fit at ``points`` evenly spaced steps."""
    g = torch.Generator().manual_seed(42)
    name, options = rule
    update = build(name, "weight", posterior, kernel=kernel_from_job(job), optimizer=optimizer, lr=lr, **options)
    rows = []
    log_every = max(1, steps // points)

    def on_log(step: int, params: torch.Tensor) -> dict:
        rows.append((step, fit_report(posterior, params, init, full, job)))
        return {}

    t0 = time.perf_counter()
    out = train(
        update,
        update.init(init, g),
        TrainSettings(steps=steps, lr=lr, optimizer=optimizer, log_every=log_every, checkpoint_seconds=1e9),
        next_batch=next_batch,
        on_log=on_log,
    )
    return out.params, rows, time.perf_counter() - t0


def show(rows, label: str, mmd_weight: float = 1.0) -> None:
    print(f"  {label}")
    print(
        f"    {'step':>7} {'ens RMSE':>9} {'member RMSE':>11} {'|w-w0|/|w0|':>12} {'output layer':>12} "
        f"{f'MMD/drift at lambda={mmd_weight:.3g}':>28}"
    )
    for step, r in rows:
        print(
            f"    {step:>7} {r['rmse_ens']:>9.4f} {r['rmse_member']:>11.4f} {r['moved']:>12.3g} "
            f"{r['out_moved']:>12.3g} {mmd_weight * r['ratio']:>28.3g}"
        )


def describe(ratios: torch.Tensor, where: str) -> float:
    med = float(ratios.median())
    print(
        f"    {where:<22} median {med:.3g}  range [{float(ratios.min()):.3g}, {float(ratios.max()):.3g}]"
        f"  -> lambda for median {TARGET_RATIO}: {TARGET_RATIO / med:.3g}"
    )
    return med


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--problems", default="toy,boston,energy")
    p.add_argument("--uci-data", type=Path, default=Path("/work/shared/data/uci"))
    p.add_argument("--splits", type=int, default=1)
    p.add_argument("--steps", type=int, default=None, help="override every problem's step budget")
    p.add_argument("--points", type=int, default=5, help="fit reports per run")
    p.add_argument("--fraction", type=float, default=DEFAULT_FRACTION)
    p.add_argument("--no-de", action="store_true", help="skip the deep-ensemble reference run")
    p.add_argument("--drle", action="store_true", help="also run DRLE at config.yaml's lambda for the dataset")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["scale"] = "paper"

    for name in args.problems.split(","):
        job, posterior, init, next_batch, full, steps, temperature = problem(name, config, args.uci_data, args.splits)
        steps = args.steps or steps
        job = dict(job, curvature_fraction=args.fraction)
        t0 = time.perf_counter()
        step = job_curvature_step(job, posterior, init, next_batch)
        took = time.perf_counter() - t0
        full_step = langevin_step_size(
            posterior, init, [full], fraction=args.fraction, generator=torch.Generator().manual_seed(0)
        )
        eta = step.lr
        prior_curv = 1.0 / float(torch.as_tensor(posterior.prior_std).max()) ** 2
        print(
            f"\n== {name}: {tuple(init.shape)} particles, N = {full.y.shape[-1]}, noise sd {posterior.noise_std:g}, "
            f"{steps} steps"
        )
        print(
            f"  L (8 minibatches) = {step.curvature:.4g}; full batch: {full_step.curvature:.4g}; per particle "
            f"{float(step.per_particle.min()):.3g} .. {float(step.per_particle.max()):.3g} ({took:.1f} s)"
        )
        print(
            f"  eta = {args.fraction} / L = {eta:.3g}; noise sd per step sqrt(2 eta) = {math.sqrt(2 * eta):.3g}; "
            f"relaxation time at the prior's curvature {prior_curv:.3g}: {relaxation_steps(eta, prior_curv):.3g} steps "
            f"(budget {steps})"
        )
        print(
            f"  noise random walk over the budget: sqrt(2 eta steps) = {math.sqrt(2 * eta * steps):.3g} per weight; "
            f"prior sd {float(torch.as_tensor(posterior.prior_std).min()):.3g} .. "
            f"{float(torch.as_tensor(posterior.prior_std).max()):.3g}"
        )
        start = fit_report(posterior, init, init, full)
        print(
            f"  at the prior draws: ensemble train RMSE {start['rmse_ens']:.4g}, member {start['rmse_member']:.4g} "
            "(classification: error rates)"
        )

        ula, rows, secs = run(
            posterior,
            init,
            job,
            ("langevin", {"temperature": temperature}),
            "sgd",
            eta,
            steps,
            next_batch,
            full,
            args.points,
        )
        show(rows, f"DLE, ULA (SGD) at eta = {eta:.3g}, {secs:.0f} s")
        end = langevin_step_size(
            posterior, ula, [full], fraction=args.fraction, generator=torch.Generator().manual_seed(0)
        )
        print(f"    L at the end (full batch): {end.curvature:.4g} (eta * L = {eta * end.curvature:.3g})")

        print("  DRLE force ratio |2 lambda MMD force| / |grad V| at lambda = 1 (per particle):")
        describe(force_ratios(posterior, init, full, job), "initial (prior draws)")
        describe(force_ratios(posterior, ula, full, job), "after ULA")
        if args.drle:
            drle_job = resolve_job(config, *experiment_of(name), "drle", 42)
            lam = float(drle_job["mmd_weight"])
            drle_spec = dict(drle_job, curvature_fraction=args.fraction)
            drle_step = job_curvature_step(drle_spec, posterior, init, next_batch)
            drle, rows, secs = run(
                posterior,
                init,
                drle_job,
                ("langevin", {"temperature": temperature, "mmd_weight": lam}),
                "sgd",
                drle_step.lr,
                steps,
                next_batch,
                full,
                args.points,
            )
            show(
                rows,
                f"DRLE (config lambda {lam:.3g}; MMD curvature bound {drle_step.mmd_curvature:.3g}), ULA at "
                f"eta = {drle_step.lr:.3g}, {secs:.0f} s",
                lam,
            )
        if not args.no_de:
            de, rows, secs = run(
                posterior,
                init,
                job,
                ("ensemble", {}),
                "adam",
                float(job["lr"]),
                steps,
                next_batch,
                full,
                args.points,
            )
            show(rows, f"deep ensemble, Adam lr {job['lr']}, {secs:.0f} s")
            describe(force_ratios(posterior, de, full, job), "after DE (fitted)")
            fitted = langevin_step_size(
                posterior, de, [full], fraction=args.fraction, generator=torch.Generator().manual_seed(0)
            )
            print(
                f"    L at the DE's fitted particles (full batch): {fitted.curvature:.4g} "
                f"-> eta {args.fraction / fitted.curvature:.3g}"
            )


if __name__ == "__main__":
    main()
