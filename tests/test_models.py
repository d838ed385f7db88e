import pytest
import torch
from torch.func import functional_call

from repens.models.networks import build_model, resnet
from repens.models.particles import StackedModel


def test_resnet32_size_and_depth():
    net = resnet(32, 16)
    # He et al. (2016), Table 6: ResNet32 has 0.46M parameters
    assert sum(p.numel() for p in net.parameters()) == pytest.approx(0.46e6, rel=0.01)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) + len(linears) == 32
    with pytest.raises(ValueError, match="6n\\+2"):
        resnet(30)


def test_stacked_resnet_matches_members_and_ignores_batch():
    net = resnet(8, 4)  # 6*1+2, narrow: fast
    model = StackedModel(net)
    w = model.sample_he(3, torch.Generator().manual_seed(0))
    x = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    out = model(w, x)
    for i in range(3):
        torch.testing.assert_close(out[i], functional_call(net, model.unflatten(w[i]), (x,)), atol=1e-5, rtol=1e-5)
    # GroupNorm: an example's output does not depend on the rest of the batch
    torch.testing.assert_close(model(w, x[:1])[:, 0], out[:, 0], atol=1e-5, rtol=1e-5)


def test_he_init_norm_scales_start_at_one():
    model = StackedModel(resnet(8, 4))
    w = model.sample_he(2, torch.Generator().manual_seed(0))
    for slot in model.slots:
        block = w[:, slot.start : slot.stop]
        if "norm" in slot.name and slot.name.endswith("weight"):
            assert torch.all(block == 1)
        elif slot.name.endswith("bias"):
            assert torch.all(block == 0)
    conv = next(s for s in model.slots if s.name == "conv.weight")  # fan-in 27
    assert float(w[:, conv.start : conv.stop].std()) == pytest.approx((2 / 27) ** 0.5, rel=0.2)


def test_build_model_mlp_flattens_images():
    net = build_model({"model": "mlp", "hidden": [7, 7, 7]}, (1, 28, 28), 10)
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    with pytest.raises(ValueError, match="unknown model"):
        build_model({"model": "vgg"}, (1, 28, 28), 10)


def test_a_resnets_pull_back_is_the_steps_own_after_the_particles_and_batch_change_in_place():
    """The function-space rules' pull-back of a network off the MLP path goes through autograd.
    A step updates the particles in place after it, and a captured step's replay refills its
    batch buffer in place; the pull-back, called again after that for the log's diagnostic,
    must neither raise (autograd's in-place check, as it did on a GPU) nor change."""
    from repens.models.posteriors import NetworkPosterior

    model = StackedModel(resnet(8, 2))
    g = torch.Generator().manual_seed(0)
    params = model.sample_he(3, g)
    x = torch.randn(4, 3, 32, 32, generator=g)
    outputs, pull_back = NetworkPosterior(model, "categorical", num_train=100).outputs_with_pullback(params, x)
    v = torch.randn(outputs.shape, generator=g)
    before = pull_back(v).clone()
    p0, x0 = params.clone(), x.clone()
    with torch.no_grad():
        params.add_(1.0)
        x.mul_(2.0)
    assert torch.equal(pull_back(v), before)
    # and it is the vector-Jacobian product at the particles it was given
    p = p0.requires_grad_(True)
    assert torch.equal(before, torch.autograd.grad(model(p, x0), p, grad_outputs=v)[0])
