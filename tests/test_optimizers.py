"""The direct-call optimizers step exactly as torch.optim's fused ones (bit for bit),
keep their state and checkpoints, and fall back to torch.optim where they do not apply."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from repens.methods.optimizers import DirectAdam, DirectSGD, make_optimizer

ROOT = Path(__file__).resolve().parents[1]


def _run(opt_cls, reference: bool, steps: int = 7, shape=(5, 11), dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    params = torch.randn(shape, generator=g, dtype=dtype).requires_grad_(True)
    if reference:
        base = torch.optim.Adam if opt_cls is DirectAdam else torch.optim.SGD
        opt = base([params], lr=0.01, maximize=True, fused=True)
    else:
        opt = opt_cls([params], lr=0.01)
    for t in range(steps):
        params.grad = torch.randn(shape, generator=g, dtype=dtype) * 10 ** (t % 3)
        if t == 4:  # a learning-rate change between steps, as the decay schedule makes
            for group in opt.param_groups:
                group["lr"] = 0.003
        opt.step()
    return params.detach(), opt


@pytest.mark.parametrize("opt_cls", [DirectAdam, DirectSGD])
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((5, 11), torch.float32), ((3, 37), torch.float64), ((10, 2701), torch.float32), ((1,), torch.float32)],
)
def test_direct_step_is_bit_identical_to_torch_optim(opt_cls, shape, dtype):
    """The private fused kernels (torch._fused_adam_, torch._fused_sgd_) called directly
    update parameters and state as torch.optim's fused optimizers, bit for bit, the first
    step (which creates the state) included; shapes whose size is not a multiple of the
    vector width exercise the kernels' scalar tails."""
    ours, opt = _run(opt_cls, reference=False, shape=shape, dtype=dtype)
    theirs, ref = _run(opt_cls, reference=True, shape=shape, dtype=dtype)
    assert ours.dtype == dtype and torch.equal(ours, theirs)
    mine, reference = opt.state_dict(), ref.state_dict()
    assert mine["param_groups"] == reference["param_groups"]
    assert mine["state"].keys() == reference["state"].keys()
    for index, state in reference["state"].items():
        assert state.keys() == mine["state"][index].keys()
        for key, value in state.items():
            assert value.dtype == mine["state"][index][key].dtype, key
            assert torch.equal(mine["state"][index][key], value), key


def test_direct_adam_resumes_from_its_state_dict_bit_identically():
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(4, 6, generator=g) for _ in range(6)]
    start = torch.randn(4, 6, generator=g)

    def steps(params, opt, gs):
        for grad in gs:
            params.grad = grad.clone()
            opt.step()

    whole = start.clone().requires_grad_(True)
    steps(whole, DirectAdam([whole], lr=0.1), grads)
    first = start.clone().requires_grad_(True)
    opt = DirectAdam([first], lr=0.1)
    steps(first, opt, grads[:3])
    saved = opt.state_dict()
    resumed = first.detach().clone().requires_grad_(True)
    opt2 = DirectAdam([resumed], lr=0.1)
    opt2.load_state_dict(saved)
    steps(resumed, opt2, grads[3:])
    assert torch.equal(resumed.detach(), whole.detach())


def test_direct_adam_falls_back_to_torch_optim_where_it_does_not_apply(monkeypatch):
    through_torch = []
    original = torch.optim.Adam.step
    monkeypatch.setattr(
        torch.optim.Adam, "step", lambda self, closure=None: through_torch.append(1) or original(self, closure)
    )
    params = torch.zeros(2, 3, requires_grad=True)
    opt = DirectAdam([params], lr=0.1)
    params.grad = torch.ones(2, 3)
    opt.step()  # the first step creates the state: torch.optim's own step
    assert len(through_torch) == 1
    opt.step()  # then the direct call
    assert len(through_torch) == 1
    opt.step(lambda: None)  # a closure is not covered by the direct call
    assert len(through_torch) == 2
    assert (params > 0).all()


def test_make_optimizer_names():
    assert isinstance(make_optimizer("adam", torch.zeros(1, requires_grad=True), 0.1), torch.optim.Adam)
    assert isinstance(make_optimizer("sgd", torch.zeros(1, requires_grad=True), 0.1), torch.optim.SGD)
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        make_optimizer("rmsprop", torch.zeros(1, requires_grad=True), 0.1)


_NO_DYNAMO = """
import sys
import torch
from repens.methods.optimizers import make_optimizer

for name in ("adam", "sgd"):
    params = torch.zeros(4, 6, requires_grad=True)
    opt = make_optimizer(name, params, 0.1)
    for _ in range(3):
        params.grad = torch.ones(4, 6)
        opt.step()
    saved = opt.state_dict()
    again = make_optimizer(name, params, 0.1)
    again.load_state_dict(saved)
    again.zero_grad()
    assert (params > 0).all()
print("torch._dynamo" in sys.modules)
"""


def test_optimizers_do_not_import_torch_dynamo():
    """Building, stepping, checkpointing and restoring an optimizer leaves torch._dynamo
    unimported (importing it costs about a second of CPU at each job's start)."""
    out = subprocess.run(
        [sys.executable, "-c", _NO_DYNAMO],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.split() == ["False"], out.stdout + out.stderr


_JOB = """
import atexit, runpy, sys
atexit.register(lambda: print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo", file=sys.stderr))
sys.argv = ["repens", *sys.argv[1:]]
runpy.run_module("repens", run_name="__main__")
"""


def test_a_training_job_does_not_import_torch_dynamo(tmp_path):
    from repens.pipeline.config import resolve_job

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    spec = dict(resolve_job(config, "synthetic", "gaussian", "svgd", 42), steps=3, particles=10)
    assert spec["optimizer"] == "adam"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _JOB,
            "--threads",
            "1",
            "train",
            "--spec",
            json.dumps(spec),
            "--out",
            str(tmp_path / "particles.npz"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "particles.npz").is_file()
    assert out.stderr.strip().splitlines()[-1] == "no dynamo", out.stderr[-3000:]


def test_torch_is_pinned_below_the_next_minor_version():
    """optimizers.py calls torch's private fused kernels (torch._fused_adam_, torch._fused_sgd_),
    whose signatures may change in any release: pyproject.toml and every environment under
    envs/ bound torch above by the next minor version, the same bound, which the installed
    torch satisfies. Raise it once this file's tests pass on the new version."""
    import re
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if re.match(r"torch\b", d)]
    upper = re.search(r"<(\d+)\.(\d+)\b", pin)
    assert upper, f"{pin!r} has no upper bound"
    installed = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    assert installed < (int(upper[1]), int(upper[2])), (torch.__version__, pin)
    for env in sorted((ROOT / "envs").glob("*.yaml")):
        specs = [
            s
            for dep in yaml.safe_load(env.read_text())["dependencies"]
            if isinstance(dep, dict)
            for s in dep.get("pip", [])
        ]
        assert [s for s in specs if re.match(r"torch\b", s)] == [pin], env.name
