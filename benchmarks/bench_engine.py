"""Step throughput of the particle engine against an earlier engine (a script, not a test).

For each configuration it times ``repens.training.train.train`` (the real loop: update rule,
finiteness check, optimizer, Langevin noise) for every method, in this checkout and in
the engine of ``--baseline`` (default: the commit before the engine work), each in its
own subprocess with that revision's ``src`` first on ``sys.path``; the two alternate for
``--rounds`` rounds and the median is kept, so load that drifts hits both alike.

* ``uci``: 5 members, MLP d-50-1 (boston: 13 inputs, 455 training rows), batch 64. The
  baseline trains one split at a time; this engine stacks ``--splits`` splits (20, the
  standard number) into one problem. Each draws its batches as its UCI training does:
  the baseline a fresh random batch every step, this engine in epochs (one permutation
  per split and epoch, ``repens.methods.minibatches.EpochSampler``, Pearce et al.'s protocol).
  Throughput is splits x steps / s. Also a hand-written step of the same arithmetic
  (explicit batched matmuls, backward by hand, Adam in place; DE; batches in epochs as the
  engine's), timed in the current process, as the limit for a small network.
* ``protein``: the largest UCI stack, as Table 2 trains it: 5 members, MLP 9-100-1, 41,157
  training rows, batch 8192, the 5 standard splits stacked (``--splits`` does not apply).
  Its activations (82 MB a layer for the stack) are far above the cache and glibc's mmap
  threshold, unlike the small networks.
* ``toy``: the G.2 regression, 50 particles, MLP 1-50-50-1, 90 rows, batch 64.
* ``fashionmnist``: 50 particles, MLP 784-100-100-100-10, batch 256 (random inputs:
  the arithmetic is what is timed). Also the machine's single-thread SGEMM rate,
  measured in the same process, and each step's FLOPs as a share of it.
* ``resnet32`` (opt-in, about a minute a step on a CPU): 20 particles, batch 128.

    python benchmarks/bench_engine.py                           # uci, toy, fashionmnist
    python benchmarks/bench_engine.py --configs uci --rounds 5
    python benchmarks/bench_engine.py --baseline HEAD~10 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "3d57ff4"  # the commit before the engine work

METHODS = {
    "de": {"rule": "ensemble"},
    "anchored": {"rule": "anchored"},
    "dle": {"rule": "langevin", "temperature": 1.0},
    "drle": {"rule": "langevin", "temperature": 1.0, "mmd_weight": 1.0},
    "svgd": {"rule": "svgd"},
    "fsvgd": {"rule": "svgd", "space": "function"},
    "kde-wgd": {"rule": "wgd", "estimator": "kde"},
    "sge-wgd": {"rule": "wgd", "estimator": "sge", "eta": 0.01},
    "ssge-wgd": {"rule": "wgd", "estimator": "ssge", "eta": 0.01},
    "kde-fwgd": {"rule": "wgd", "space": "function", "estimator": "kde"},
    "sge-fwgd": {"rule": "wgd", "space": "function", "estimator": "sge", "eta": 0.01},
    "ssge-fwgd": {"rule": "wgd", "space": "function", "estimator": "ssge", "eta": 0.01},
}

CONFIGS = {
    "uci": {
        "inputs": 13,
        "hidden": [50],
        "outputs": 1,
        "rows": 455,
        "particles": 5,
        "batch": 64,
        "steps": 300,
        "epochs": True,
    },
    "protein": {
        "inputs": 9,
        "hidden": [100],
        "outputs": 1,
        "rows": 41157,
        "particles": 5,
        "batch": 8192,
        "steps": 20,
        "epochs": True,
        "splits": 5,
    },
    "toy": {"inputs": 1, "hidden": [50, 50], "outputs": 1, "rows": 90, "particles": 50, "batch": 64, "steps": 100},
    "fashionmnist": {
        "inputs": 784,
        "hidden": [100, 100, 100],
        "outputs": 10,
        "rows": 60000,
        "particles": 50,
        "batch": 256,
        "steps": 3,
    },
    "resnet32": {"resnet": True, "particles": 20, "batch": 128, "steps": 1, "rows": 50000, "outputs": 10},
}


# ------------------------------------------------------------------ worker (one engine)
@dataclass
class Problem:
    """A method on a configuration's problem, as an engine trains it: the posterior, the
    initial particles, the batch sampler and the run's generator, all on one device; the
    rule by its config name, ``space`` and options (built by :meth:`rule`)."""

    post: Any
    init: Any
    next_batch: Callable
    generator: Any
    method: dict

    def rule(self, settings, ascent: Callable | None = None):
        """The method's rule stepped by ``settings``' optimizer at its rate (``ascent``:
        ``params -> direction`` in its place, a fixed step)."""
        from repens.methods.rule import build
        from repens.models.kernels import RBF

        spec = dict(self.method)
        rule, space = spec.pop("rule"), spec.pop("space", "weight")
        built = build(rule, space, self.post, kernel=RBF(), optimizer=settings.optimizer, lr=settings.lr, **spec)
        if ascent is None:
            return built
        return _Fixed(self.post, kernel=RBF(), optimizer=settings.optimizer, lr=settings.lr, fixed=ascent)

    def train(self, settings, ascent: Callable | None = None):
        """``repens.training.train.train`` of the method (or of ``ascent``) from the initial
        particles: an engine of rule objects, or one of update functions (the baseline's)."""
        from repens.training import train as loop

        if not _has_rule_objects():
            return self._train_functions(settings, ascent)
        rule = self.rule(settings, ascent)
        return loop.train(rule, rule.init(self.init, self.generator), settings, self.next_batch)

    def _train_functions(self, settings, ascent: Callable | None):
        """An engine whose rules are functions of (params, context) (before the rule objects)."""
        from repens.methods.updates import StepContext, Update, make_update
        from repens.models.kernels import RBF
        from repens.training.train import TrainState, train

        spec = dict(self.method)
        rule, space = spec.pop("rule"), spec.pop("space", "weight")
        update = make_update(rule, space, **spec) if ascent is None else (lambda p, c: Update(ascent(p)))
        anchors = self.init.clone() if rule == "anchored" else None
        context = lambda b, a: StepContext(self.post, RBF(), self.generator, b, a)  # noqa: E731
        return train(TrainState(self.init, anchors), update, context, settings, self.generator, self.next_batch)

    def direction(self, settings):
        """The method's direction at the initial particles on the next batch."""
        rule = self.rule(settings)
        return rule.direction(rule.init(self.init, self.generator), self.next_batch(self.generator)).direction

    def graph_safe(self, settings) -> bool:
        return bool(_has_rule_objects() and self.rule(settings).graph_safe)


def _has_rule_objects() -> bool:
    import importlib.util

    return importlib.util.find_spec("repens.methods.rule") is not None


def _fixed_rule_class():
    from dataclasses import dataclass as frozen

    from repens.methods.rule import Rule
    from repens.methods.updates import Update

    @frozen(frozen=True, kw_only=True)
    class Fixed(Rule):
        """A rule whose direction is ``fixed(params)`` (the loop around a fixed step)."""

        fixed: Callable

        def ascent(self, params, ctx, state):  # noqa: ARG002
            return Update(self.fixed(params))

    return Fixed


def _Fixed(*args, **kwargs):  # noqa: N802 (a class, made on first use: the engine's Rule)
    return _fixed_rule_class()(*args, **kwargs)


def _setup(config: dict, method: str, sets: int, device: str = "cpu") -> Problem:
    """The problem of ``method`` on ``config`` with ``sets`` stacked splits, all on
    ``device`` (the run's generator too, as a GPU run has it)."""
    import torch

    from repens.models.networks import mlp
    from repens.models.particles import StackedModel
    from repens.models.posteriors import NetworkPosterior

    g = torch.Generator(device=device).manual_seed(0)
    if config.get("resnet"):
        from repens.models.networks import resnet

        model = StackedModel(resnet(depth=32, width=16, norm="group").to(device))
        x = torch.randn(config["batch"] * 4, 3, 32, 32, generator=g, device=device)
    else:
        model = StackedModel(mlp(config["inputs"], config["hidden"], config["outputs"]))
        shape = (sets, config["rows"], config["inputs"]) if sets > 1 else (config["rows"], config["inputs"])
        x = torch.randn(*shape, generator=g, device=device)
    likelihood = "gaussian" if config["outputs"] == 1 else "categorical"
    rows = x.shape[-2] if not config.get("resnet") else x.shape[0]
    y_shape = x.shape[:-1] if not config.get("resnet") else (rows,)
    y = (
        torch.randn(*y_shape, generator=g, device=device)
        if likelihood == "gaussian"
        else torch.randint(0, config["outputs"], y_shape, generator=g, device=device)
    )
    post = NetworkPosterior(model, likelihood, num_train=config["rows"], prior_std=1.0, noise_std=0.3)
    spec = dict(METHODS[method])
    if spec.get("space") == "function":
        spec["prior_samples"] = config["particles"]
    n = config["particles"]
    init = post.sample_prior(n * sets, g)
    if sets > 1:
        init = init.view(sets, n, -1)
    batch = min(config["batch"], rows)
    # UCI training's sampler (repens.methods.minibatches.EpochSampler) where the engine has it, else
    # a fresh random batch each step, as the baseline's training drew them
    next_batch = (_epoch_sampler(x, y, batch) if config.get("epochs") else None) or _per_step_sampler(
        x, y, rows, batch, sets
    )
    return Problem(post, init, next_batch, g, spec)


def _per_step_sampler(x, y, rows: int, batch: int, sets: int):
    """A fresh random batch each step (per split for a stack): the samplers of
    ``repens.methods.minibatches`` written out, since the baseline engine has no such module."""
    import torch

    from repens.models.posteriors import Batch

    if sets > 1:
        set_rows = torch.arange(sets).unsqueeze(-1)

        def next_batch(gen):
            idx = torch.stack([torch.randperm(rows, generator=gen, device=gen.device)[:batch] for _ in range(sets)])
            return Batch(x[set_rows.to(idx.device), idx], y[set_rows.to(idx.device), idx])
    else:

        def next_batch(gen):
            idx = torch.randperm(rows, generator=gen, device=gen.device)[:batch]
            return Batch(x[idx], y[idx])

    return next_batch


def _epoch_sampler(x, y, batch: int):
    """The engine's epoch sampler (one permutation per split and epoch, as UCI training
    draws its batches since Pearce et al.'s protocol), or None in an engine without it
    (the baseline, whose UCI training drew a fresh random batch every step)."""
    try:
        from repens.methods.minibatches import EpochSampler
    except ImportError:
        return None
    return EpochSampler(x, y, batch)


def _time_method(config: dict, method: str, sets: int, steps: int) -> float:
    """Seconds per step of the real training loop (after one warm-up call)."""
    from repens.training.train import TrainSettings

    problem = _setup(config, method, sets)
    problem.train(TrainSettings(steps=max(1, steps // 10), lr=1e-4, log_every=10**9))  # warm-up (first-call costs)
    settings = TrainSettings(steps=steps, lr=1e-4, log_every=10**9)
    t0 = time.perf_counter()
    problem.train(settings)
    return (time.perf_counter() - t0) / steps


#: the package's modules in its layer subpackages -> where an engine of the flat layout
#: (before the subpackages) kept them; only the modules this benchmark imports
FLAT_LAYOUT = {
    "methods.updates": "updates",
    "methods.minibatches": "minibatches",
    "models.kernels": "kernels",
    "models.networks": "models",
    "models.particles": "particles",
    "models.posteriors": "posteriors",
    "training.train": "train",
    "training.host_memory": "host_memory",
}


def alias_flat_layout(src: str) -> None:
    """Let ``import repens.<subpackage>.<module>`` load ``repens.<module>`` of an engine of
    the flat layout (``src`` has no ``repens/core``), so one worker times either engine."""
    import importlib
    import importlib.abc
    import importlib.util
    import types

    if (Path(src) / "repens" / "core").is_dir():
        return

    class FlatFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name.startswith("repens.") and name[len("repens.") :] in FLAT_LAYOUT:
                return importlib.util.spec_from_loader(name, self)
            return None

        def create_module(self, spec):
            return importlib.import_module("repens." + FLAT_LAYOUT[spec.name[len("repens.") :]])

        def exec_module(self, module) -> None:
            pass

    for new in FLAT_LAYOUT:
        package = "repens." + new.rpartition(".")[0]
        try:  # the flat engine's module of that name (repens.models) becomes a package too
            module = importlib.import_module(package)
        except ImportError:
            module = sys.modules[package] = types.ModuleType(package)
        if not hasattr(module, "__path__"):
            module.__path__ = []
    sys.meta_path.insert(0, FlatFinder())


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, args.src)
    alias_flat_layout(args.src)
    out = {}
    for name in args.configs:
        config = CONFIGS[name]
        sets = _stacked_splits(config, args) if args.stack else 1
        out[name] = {m: _time_method(config, m, sets, args.steps or config["steps"]) for m in args.methods}
    print(json.dumps(out))


def _stacked_splits(config: dict, args: argparse.Namespace) -> int:
    """Splits this engine stacks for a UCI configuration (trained in epochs); 1 otherwise."""
    return config.get("splits", args.splits) if config.get("epochs") else 1


# ------------------------------------------------------------------ limits, in this process
def gemm_rate(threads: int, device=None) -> float:
    """The fp32 GEMM rate in GFLOP/s, best of 5, the limit a step's FLOPs are compared with:
    2048^3 on ``threads`` CPU threads (default device), 8192^3 on a GPU with TF32 off (the
    MLP step's matmuls run in fp32, torch's default)."""
    import torch

    torch.set_num_threads(threads)
    cuda = device is not None and torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    size = 8192 if cuda else 2048
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a @ b
        sync()
        best = math.inf
        for _ in range(5):
            t0 = time.perf_counter()
            a @ b
            sync()
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return 2 * size**3 / best / 1e9


def mlp_de_flops(config: dict) -> float:
    """FLOPs of a DE step: forward, weight gradients, and input gradients below layer 1."""
    widths = [config["inputs"], *config["hidden"], config["outputs"]]
    macs = sum(a * b for a, b in zip(widths, widths[1:]))
    first = widths[0] * widths[1]
    rows = config["particles"] * config["batch"]
    return 2 * rows * (3 * macs - first)


def mlp_dim(config: dict) -> int:
    widths = [config["inputs"], *config["hidden"], config["outputs"]]
    return sum(a * b + b for a, b in zip(widths, widths[1:]))


#: extra particle-matrix GEMMs of each rule beyond a DE step, in units of 2 n^2 D FLOPs
#: (an (n, D) x (D, n) or (n, n) x (n, D) product): squared distances 1, the kernel-gradient
#: sum 1, SVGD's direction 1 (it folds the kernel gradient in), SGE / SSGE's solve 1; DRLE's
#: distances and kernel gradients are over particles and n prior draws together (4 + 2)
_EXTRA_GEMMS = {"de": 0, "anchored": 0, "dle": 0, "drle": 6, "svgd": 2, "kde-wgd": 2, "sge-wgd": 3, "ssge-wgd": 3}


def flop_bound_vs_de(config: dict, method: str) -> tuple[float, str]:
    """The least a method's step can cost relative to a DE step from its extra FLOPs alone,
    and what they are. Function-space rules run m = n prior networks forward each step (a
    third of a DE step's FLOPs; their kernels act on (n, B*C) outputs, negligible here)."""
    n, dim, de = config["particles"], mlp_dim(config), mlp_de_flops(config)
    if method in _EXTRA_GEMMS:
        extra = _EXTRA_GEMMS[method] * 2 * n * n * dim
        what = f"{_EXTRA_GEMMS[method]} x 2n^2D" if extra else "none"
    else:  # function space
        widths = [config["inputs"], *config["hidden"], config["outputs"]]
        extra = 2 * n * config["batch"] * sum(a * b for a, b in zip(widths, widths[1:]))
        what = "prior forward"
    rng = {"drle": n * dim, "dle": n * dim}.get(method, n * dim if method not in _EXTRA_GEMMS else 0)
    if rng:
        what += f" + {rng / 1e3:,.0f}k normals"
    return (de + extra) / de, what


def hand_written_de_step(config: dict, sets: int, steps: int, threads: int) -> float:
    """Seconds per step of DE written by hand for a one-hidden-layer MLP stack: explicit
    batched matmuls forward and backward, closed-form prior gradient, Adam in place."""
    import torch

    from repens.training.host_memory import keep_freed_memory

    keep_freed_memory()  # as the engine's loop does: the limit is not page faults
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    n, d, h, b, rows = (
        config["particles"] * sets,
        config["inputs"],
        config["hidden"][0],
        config["batch"],
        config["rows"],
    )
    x = torch.randn(sets, rows, d, generator=g)
    y = torch.randn(sets, rows, generator=g)
    w1, b1 = torch.randn(n, d, h, generator=g), torch.zeros(n, 1, h)
    w2, b2 = torch.randn(n, h, 1, generator=g), torch.zeros(n, 1, 1)
    params = [w1, b1, w2, b2]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    set_rows = torch.arange(sets).unsqueeze(-1)
    scale = rows / b / 0.09

    epoch = {"order": None, "position": rows}

    def step(t: int) -> None:
        if epoch["position"] >= rows:  # batches in epochs, as the engine's UCI training draws them
            epoch["order"] = torch.stack([torch.randperm(rows, generator=g) for _ in range(sets)])
            epoch["position"] = 0
        idx = epoch["order"][:, epoch["position"] : epoch["position"] + b]
        epoch["position"] += b
        xb = x[set_rows, idx].repeat_interleave(config["particles"], 0)  # (n, b, d)
        yb = y[set_rows, idx].repeat_interleave(config["particles"], 0).unsqueeze(-1)
        pre = torch.baddbmm(b1, xb, w1)
        hid = pre.clamp_min(0)
        out = torch.baddbmm(b2, hid, w2)
        err = (yb - out).mul_(scale)  # d loglik / d out
        g_w2 = torch.bmm(hid.mT, err)
        g_b2 = err.sum(1, keepdim=True)
        g_hid = torch.bmm(err, w2.mT).mul_(pre > 0)
        g_w1 = torch.bmm(xb.mT, g_hid)
        g_b1 = g_hid.sum(1, keepdim=True)
        for p, grad, mi, vi in zip(params, (g_w1, g_b1, g_w2, g_b2), m, v):
            grad.sub_(p)  # prior N(0, 1)
            mi.mul_(0.9).add_(grad, alpha=0.1)
            vi.mul_(0.999).addcmul_(grad, grad, value=0.001)
            p.addcdiv_(mi, vi.sqrt().add_(1e-8), value=1e-4 / (1 - 0.9**t))

    for t in range(1, 11):
        step(t)
    t0 = time.perf_counter()
    for t in range(11, 11 + steps):
        step(t)
    return (time.perf_counter() - t0) / steps


# ------------------------------------------------------------------ driver
def _baseline_src(rev: str, tmp: str) -> str:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
    return str(Path(tmp) / "src")


#: glibc settings equal to repens.training.host_memory.keep_freed_memory, for a baseline run with them
_TUNED_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_max=0"


def _run_worker(
    src: str, configs: list[str], methods: list[str], stack: bool, args, tuned_malloc: bool = False
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--src",
        src,
        "--threads",
        str(args.threads),
        *(["--steps", str(args.steps)] if args.steps else []),
        "--splits",
        str(args.splits),
        "--configs",
        *configs,
        "--methods",
        *methods,
    ]
    if stack:
        cmd.append("--stack")
    env = {**os.environ, "PYTHONPATH": src}
    if tuned_malloc:
        env["GLIBC_TUNABLES"] = _TUNED_MALLOC
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed ({src}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", nargs="+", default=["uci", "toy", "fashionmnist"], choices=sorted(CONFIGS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--baseline", default=BASELINE, help="git revision of the engine to compare with")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--splits", type=int, default=20, help="UCI splits stacked by this engine")
    p.add_argument("--steps", type=int, help="timed steps per method (default: each configuration's own)")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument(
        "--baseline-malloc",
        action="store_true",
        help="also time the baseline with glibc keeping freed memory (GLIBC_TUNABLES), "
        "as this engine does itself: how much of the speed-up the allocator is",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--stack", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--src", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        old_src, new_src = _baseline_src(args.baseline, tmp), str(ROOT / "src")
        runs: dict[str, list[dict]] = {"baseline": [], "current": []}
        if args.baseline_malloc:
            runs["baseline_malloc"] = []
        for r in range(args.rounds):
            runs["baseline"].append(_run_worker(old_src, args.configs, args.methods, False, args))
            if args.baseline_malloc:
                runs["baseline_malloc"].append(_run_worker(old_src, args.configs, args.methods, False, args, True))
            runs["current"].append(_run_worker(new_src, args.configs, args.methods, True, args))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    med = {
        which: {c: {m: statistics.median(run[c][m] for run in rs) for m in args.methods} for c in args.configs}
        for which, rs in runs.items()
    }
    rate = gemm_rate(args.threads)
    print(
        f"device: CPU ({args.threads} thread(s)), torch {torch.__version__}; "
        f"SGEMM 2048^3: {rate:.1f} GFLOP/s (the limit a step is compared with)"
    )
    print(f"baseline engine: {args.baseline}; medians of {args.rounds} alternating rounds\n")
    report: dict = {"gemm_gflops": rate, "baseline": args.baseline, "configs": {}}
    for c in args.configs:
        config = CONFIGS[c]
        uci = bool(config.get("epochs"))
        sets = _stacked_splits(config, args)
        unit = "splits x steps/s" if uci else "steps/s"
        print(f"== {c}" + (f" ({sets} splits stacked here, one split at a time in the baseline)" if uci else ""))
        tuned = "baseline_malloc" in med
        print(
            f"{'method':>10} {'baseline ' + unit:>24} {'current ' + unit:>24} {'speed-up':>9}"
            + (f" {'vs tuned-malloc baseline':>25}" if tuned else "")
            + f" {'x DE':>6}  FLOP bound (extra work)"
        )
        rows = {}
        for m in args.methods:
            old, new = 1 / med["baseline"][c][m], sets / med["current"][c][m]
            rows[m] = {
                "baseline": old,
                "current": new,
                "speedup": new / old,
                "vs_de": med["current"][c][m] / med["current"][c]["de"] if "de" in args.methods else None,
            }
            vs = f"{rows[m]['vs_de']:.2f}" if rows[m]["vs_de"] is not None else "-"
            line = f"{m:>10} {old:>24.1f} {new:>24.1f} {new / old:>8.1f}x"
            if tuned:
                rows[m]["speedup_vs_tuned_malloc"] = new * med["baseline_malloc"][c][m]
                line += f" {rows[m]['speedup_vs_tuned_malloc']:>24.1f}x"
            bound = ""
            if not config.get("resnet"):
                rows[m]["flop_bound_vs_de"], what = flop_bound_vs_de(config, m)
                bound = f"  {rows[m]['flop_bound_vs_de']:.2f} ({what})"
            print(f"{line} {vs:>6}{bound}")
        if not config.get("resnet") and "de" in args.methods:
            flops = mlp_de_flops(config) * sets
            share = flops / med["current"][c]["de"] / 1e9 / rate
            print(
                f"DE step: {flops / 1e6:.1f} MFLOP, {share:.1%} of the SGEMM rate "
                f"(baseline {flops / sets / med['baseline'][c]['de'] / 1e9 / rate:.1%})"
            )
            rows["de_gemm_share"] = share
        if uci and "de" in args.methods:
            one = _run_worker(new_src, [c], ["de"], False, args)[c]["de"]
            hand = hand_written_de_step(config, 1, config["steps"], args.threads)
            print(
                f"one split, DE: engine {one * 1e3:.3f} ms/step, hand-written batched matmuls "
                f"{hand * 1e3:.3f} ms/step: {one / hand:.2f}x the hand-written step"
            )
            rows["single_split_vs_hand_written"] = one / hand
        report["configs"][c] = rows
        print()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
