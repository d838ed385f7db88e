import torch

from repens.models import mlp
from repens.particles import StackedModel


def test_stacked_forward_equals_each_member_run_alone():
    torch.manual_seed(0)
    net = mlp(3, [8, 8], 2)
    model = StackedModel(net)
    g = torch.Generator().manual_seed(1)
    params = model.sample_gaussian(5, 0.5, g)
    x = torch.randn(7, 3)
    out = model(params, x)
    assert out.shape == (5, 7, 2)
    for i in range(5):
        member = mlp(3, [8, 8], 2)
        torch.nn.utils.vector_to_parameters(params[i], member.parameters())
        torch.testing.assert_close(out[i], member(x))


def test_flatten_unflatten_roundtrip_and_views():
    net = mlp(2, [4], 3)
    model = StackedModel(net)
    row = model.flatten()
    assert row.shape == (model.dim,) and model.dim == sum(p.numel() for p in net.parameters())
    named = model.unflatten(row)
    for name, p in net.named_parameters():
        torch.testing.assert_close(named[name], p.detach())
        assert named[name].data_ptr() >= row.data_ptr()  # views, not copies


def test_he_init_has_fan_in_variance_and_zero_bias():
    model = StackedModel(mlp(200, [300], 1))
    rows = model.sample_he(4, torch.Generator().manual_seed(0))
    named = model.unflatten(rows[0])
    weight, bias = named["0.weight"], named["0.bias"]
    assert abs(float(weight.var()) - 2.0 / 200) < 0.1 * 2.0 / 200
    assert float(bias.abs().max()) == 0.0


def test_gradients_flow_per_particle():
    model = StackedModel(mlp(1, [5], 1))
    params = model.sample_gaussian(3, 1.0, torch.Generator().manual_seed(0)).requires_grad_(True)
    x = torch.linspace(-1, 1, 4).unsqueeze(-1)
    out = model(params, x)
    out[1].sum().backward()
    assert params.grad[0].abs().sum() == 0 and params.grad[2].abs().sum() == 0
    assert params.grad[1].abs().sum() > 0
