"""The direct-call optimizers step exactly as torch.optim's fused ones (bit for bit),
keep their state and checkpoints, and fall back to torch.optim where they do not apply."""

import pytest
import torch

from repens.optimizers import DirectAdam, DirectSGD, make_optimizer


def _run(opt_cls, reference: bool, steps: int = 7):
    g = torch.Generator().manual_seed(3)
    params = torch.randn(5, 11, generator=g).requires_grad_(True)
    if reference:
        base = torch.optim.Adam if opt_cls is DirectAdam else torch.optim.SGD
        opt = base([params], lr=0.01, maximize=True, fused=True)
    else:
        opt = opt_cls([params], lr=0.01)
    for t in range(steps):
        params.grad = torch.randn(5, 11, generator=g) * 10 ** (t % 3)
        if t == 4:  # a learning-rate change between steps, as the decay schedule makes
            for group in opt.param_groups:
                group["lr"] = 0.003
        opt.step()
    return params.detach(), opt


@pytest.mark.parametrize("opt_cls", [DirectAdam, DirectSGD])
def test_direct_step_is_bit_identical_to_torch_optim(opt_cls):
    ours, opt = _run(opt_cls, reference=False)
    theirs, ref = _run(opt_cls, reference=True)
    assert torch.equal(ours, theirs)
    if opt_cls is DirectAdam:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[opt.param_groups[0]["params"][0]][key],
                               ref.state[ref.param_groups[0]["params"][0]][key])


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
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, closure=None: through_torch.append(1) or original(self, closure))
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
