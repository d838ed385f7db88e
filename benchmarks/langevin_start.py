"""Where and how DLE can sample a UCI posterior within Pearce et al.'s budget (a script, not a test).

For one UCI dataset and split, 5 members (the config's network, prior and noise), it runs the
same number of steps (Pearce et al.'s epochs x ceil(N / batch)) four ways and prints the
ensemble-mean train RMSE (standardized units) at a few points and the test RMSE / NLL
(Pearce's predictive, original units) at the end:

* ``de``: the deep ensemble (Adam at the data set's lr, decayed every 20 steps);
* ``ula``: DLE as ULA from the prior at ``eta = 0.1 / L`` (``L`` at the prior draws);
* ``burnin-ula``: the first half as ``de``, the second half ULA at ``eta = 0.1 / L`` with ``L``
  measured at the burned-in members (``config.yaml``'s ``dle-burnin``);
* ``burnin-pula``: the same, preconditioned by a fixed diagonal ``M = 1 / (GGN_ii + T / s_i^2)``
  (the Gauss-Newton diagonal of the likelihood by 64 random-sign output projections on the
  whole training set, plus the prior precision), at ``eta = 0.1 / L_M``, ``L_M`` the top
  eigenvalue of ``M^1/2 H M^1/2``. With ``M`` fixed this is ULA for the same target (no
  correction term is needed); the script reports the step at which it diverges, if it does.

    python benchmarks/langevin_start.py --uci-data /path/to/uci --dataset yacht --split 0
    python benchmarks/langevin_start.py --uci-data /path/to/uci --dataset boston --modes de,burnin-pula
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import yaml

from repens.data.uci import UCI_FOLDERS, dataset_info, load_split
from repens.experiments.uci import ensemble_gaussian_metrics, uci_posterior
from repens.methods.minibatches import EpochSampler
from repens.methods.optimizers import make_optimizer
from repens.methods.step_size import hessian_vector_product, top_curvature
from repens.models.posteriors import Batch

ROOT = Path(__file__).resolve().parents[1]
MODES = ("de", "ula", "burnin-ula", "burnin-pula")


def settings_of(dataset: str) -> dict:
    uci = yaml.safe_load((ROOT / "config.yaml").read_text())["experiments"]["uci"]
    return {**uci["settings"], **uci["datasets"][dataset]}


def ggn_preconditioner(
    post, params: torch.Tensor, x: torch.Tensor, noise_std: float, temperature: float, samples: int = 64, seed: int = 7
) -> torch.Tensor:
    """``1 / (diag GGN + T / prior_var)`` per weight and member: ``E[g_i^2]`` for
    ``g = grad_w sum_n r_n f_n(w)`` with random signs ``r`` is ``sum_n (d f_n / d w_i)^2``."""
    g = torch.Generator().manual_seed(seed)
    acc = torch.zeros_like(params)
    for _ in range(samples):
        w = params.detach().clone().requires_grad_(True)
        out = post.predict(w, x)
        signs = torch.randint(0, 2, out.shape, generator=g).to(out) * 2 - 1
        (grad,) = torch.autograd.grad((out * signs).sum(), w)
        acc += grad**2
    prior_var = torch.as_tensor(post.prior_std) ** 2
    return 1.0 / (acc / samples / noise_std**2 + temperature / prior_var)


def top_preconditioned_curvature(post, params, batches, sqrt_m, temperature: float = 1.0) -> float:
    prepared = [Batch(b.x.detach().requires_grad_(True), b.y) for b in batches]

    def hvp(v):
        total = 0
        for b in prepared:
            total = total + hessian_vector_product(
                lambda q, b=b: post.log_likelihood(q, b) + temperature * post.log_prior(q), params, sqrt_m * v
            )
        return sqrt_m * total / len(prepared)

    return float(top_curvature(hvp, params, torch.Generator().manual_seed(3)).max())


def run(mode: str, dataset: str, split_k: int, root: str, points: int = 4) -> None:
    s = settings_of(dataset)
    folder = UCI_FOLDERS[dataset]
    info = dataset_info(root, folder)
    split = load_split(root, folder, split_k)
    post = uci_posterior(s, split, info["n_hidden"])
    temperature = 1.0
    params = post.sample_prior(s["particles"], torch.Generator().manual_seed(42 + split_k))
    g = torch.Generator().manual_seed(42)
    sampler = EpochSampler(split.x_train, split.y_train, s["batch_size"])
    steps = s["epochs"] * sampler.steps_per_epoch
    n_de = steps if mode == "de" else steps // 2 if mode.startswith("burnin") else 0

    def grad(p, batch):
        return post.grad_log_likelihood(p, batch) + temperature * post.grad_log_prior(p)

    def train_rmse(p):
        with torch.no_grad():
            m = post.predict(p, split.x_train).squeeze(-1).mean(0)
        return float((m - split.y_train).pow(2).mean().sqrt())

    t0 = time.perf_counter()
    p = params.clone().requires_grad_(True)
    opt = make_optimizer("adam", p, s["lr"])
    for t in range(n_de):
        if t % s["lr_decay_steps"] == 0:
            opt.param_groups[0]["lr"] = s["lr"] * s["lr_decay"] ** (t // s["lr_decay_steps"])
        p.grad = grad(p.detach(), sampler(g))
        opt.step()
    p = p.detach()
    line = f"{dataset} split {split_k} {mode:12s}"
    if n_de:
        print(f"{line} deep ensemble {n_de} steps: train rmse {train_rmse(p):.4g}", flush=True)
    if n_de < steps:
        batches = [sampler(torch.Generator().manual_seed(1)) for _ in range(8)]
        m = (
            ggn_preconditioner(post, p, split.x_train, s["noise_std"], temperature)
            if mode == "burnin-pula"
            else torch.ones_like(p)
        )
        curvature = top_preconditioned_curvature(post, p, batches, m.sqrt(), temperature)
        eta = 0.1 / curvature
        print(
            f"{line} L{'_M' if mode == 'burnin-pula' else ''} {curvature:.4g}, eta {eta:.3g}; "
            f"M from {float(m.min()):.3g} to {float(m.max()):.3g}",
            flush=True,
        )
        noise = (2 * eta * temperature * m).sqrt()
        rest = steps - n_de
        for t in range(rest):
            p = p + eta * m * grad(p, sampler(g)) + noise * torch.randn(p.shape, generator=g)
            if not bool(torch.isfinite(p).all()):
                print(f"{line} DIVERGED at ULA step {t + 1} of {rest}", flush=True)
                return
            if (t + 1) % max(1, rest // points) == 0:
                print(f"{line} ULA step {t + 1}/{rest}: train rmse {train_rmse(p):.4g}", flush=True)
    with torch.no_grad():
        f = post.predict(p, split.x_test).squeeze(-1).double().numpy()
    metrics = ensemble_gaussian_metrics(f * split.y_std + split.y_mean, s["noise_std"] * split.y_std, split.y_test_raw)
    print(
        f"{line} END train rmse {train_rmse(p):.4g}  test rmse {metrics['rmse']:.4g}  nll {metrics['nll']:.4g}  "
        f"({time.perf_counter() - t0:.0f} s, {steps} steps)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uci-data", default="data/uci")
    parser.add_argument("--dataset", default="yacht")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for mode in args.modes.split(","):
        if mode not in MODES:
            raise SystemExit(f"error: --modes: unknown mode {mode!r}; known: {', '.join(MODES)}")
        run(mode, args.dataset, args.split, args.uci_data)


if __name__ == "__main__":
    main()
