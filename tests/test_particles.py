import pytest
import torch
from torch import Tensor

from repens.models.networks import mlp
from repens.models.particles import StackedModel


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


def _vmap_forward(model, params, x):
    """The generic path (functional_call under vmap) that every module can take."""
    from torch.func import functional_call, vmap

    return vmap(lambda row: functional_call(model.module, model.unflatten(row), (x,)))(params)


def test_mlp_fast_path_equals_vmap_path_values_and_gradients():
    model = StackedModel(mlp(3, [8, 6], 2))
    assert model._mlp == ((True, True), (True, True), (False, True))
    g = torch.Generator().manual_seed(2)
    params = model.sample_gaussian(5, 0.7, g, dtype=torch.float64).requires_grad_(True)
    x = torch.randn(9, 3, generator=g, dtype=torch.float64)
    fast, slow = model(params, x), _vmap_forward(model, params, x)
    torch.testing.assert_close(fast, slow, rtol=1e-13, atol=1e-13)  # float64: rounding only
    weights = torch.randn(fast.shape, generator=g, dtype=torch.float64)
    (g_fast,) = torch.autograd.grad((fast * weights).sum(), params)
    (g_slow,) = torch.autograd.grad((slow * weights).sum(), params)
    torch.testing.assert_close(g_fast, g_slow, rtol=1e-13, atol=1e-13)


def test_mlp_stacks_of_stacks_with_shared_or_own_inputs():
    model = StackedModel(mlp(4, [7], 1))
    g = torch.Generator().manual_seed(3)
    params = model.sample_gaussian(3 * 5, 1.0, g, dtype=torch.float64).view(3, 5, -1)
    shared = torch.randn(6, 4, generator=g, dtype=torch.float64)
    own = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    out_shared, out_own = model(params, shared), model(params, own)
    assert out_shared.shape == out_own.shape == (3, 5, 6, 1)
    for k in range(3):
        torch.testing.assert_close(out_shared[k], model(params[k], shared), rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(out_own[k], model(params[k], own[k]), rtol=1e-13, atol=1e-13)


def test_non_mlp_modules_take_the_vmap_path():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    model = StackedModel(net)
    assert model._mlp is None
    params = model.sample_gaussian(4, 1.0, torch.Generator().manual_seed(4))
    x = torch.randn(5, 2)
    torch.testing.assert_close(model(params, x), _vmap_forward(model, params, x))
    assert StackedModel(mlp(2, [3], 1)[:-1])._mlp is None  # ends in a ReLU: not the plain MLP


def test_mlp_without_output_bias_takes_the_fast_path_and_equals_vmap():
    """Pearce et al.'s networks have no final bias: the MLP fast path handles a Linear
    without bias (its slots: weight, bias, weight) with the values and gradients of the
    generic path, and the rows are one entry per parameter shorter."""
    model = StackedModel(mlp(3, [8], 1, output_bias=False))
    assert model._mlp == ((True, True), (False, False)) and [s.name for s in model.slots] == [
        "0.weight",
        "0.bias",
        "2.weight",
    ]
    assert model.dim == StackedModel(mlp(3, [8], 1)).dim - 1
    g = torch.Generator().manual_seed(6)
    params = model.sample_gaussian(2 * 4, 0.7, g, dtype=torch.float64).view(2, 4, -1).requires_grad_(True)
    for x in (
        torch.randn(9, 3, generator=g, dtype=torch.float64),
        torch.randn(2, 9, 3, generator=g, dtype=torch.float64),
    ):
        fast = model(params, x)
        slow = torch.stack([_vmap_forward(model, params[k], x if x.dim() == 2 else x[k]) for k in range(2)])
        torch.testing.assert_close(fast, slow, rtol=1e-13, atol=1e-13)
        weights = torch.randn(fast.shape, generator=g, dtype=torch.float64)
        (g_fast,) = torch.autograd.grad((fast * weights).sum(), params)
        (g_slow,) = torch.autograd.grad((slow * weights).sum(), params)
        torch.testing.assert_close(g_fast, g_slow, rtol=1e-13, atol=1e-13)
    # a single input feature into a layer without bias (the broadcast-product branch)
    one = StackedModel(mlp(1, [], 1, output_bias=False))
    assert one._mlp == ((False, False),)
    rows = one.sample_gaussian(3, 1.0, g, dtype=torch.float64)
    x1 = torch.randn(7, 1, generator=g, dtype=torch.float64)
    torch.testing.assert_close(one(rows, x1), _vmap_forward(one, rows, x1), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    "widths",
    [(4, [7, 3], 2), (1, [5, 5], 1), (20, [3], 1), (3, [6], 1)],
    ids=["wide-input", "one-input", "above-narrow-threshold", "one-output"],
)
def test_mlp_stack_backward_by_hand_equals_autograd_for_stacks_of_sets(widths):
    """The written-out backward of the MLP stack (one autograd node) against autograd
    through the same forward, for a stack of sets with inputs of their own; the shapes
    cover each branch of the backward (one input feature: fused multiply-add forward;
    at most 16 inputs: the transposed weight-gradient product; one output: the outer
    product by broadcasting)."""
    from repens.models.particles import _mlp_forward

    inputs, hidden, outputs = widths
    model = StackedModel(mlp(inputs, hidden, outputs))
    g = torch.Generator().manual_seed(5)
    params = model.sample_gaussian(3 * 5, 1.0, g, dtype=torch.float64).view(3, 5, -1).requires_grad_(True)
    x = torch.randn(3, 6, inputs, generator=g, dtype=torch.float64)
    weights = torch.randn(3, 5, 6, outputs, generator=g, dtype=torch.float64)
    (by_hand,) = torch.autograd.grad((model(params, x) * weights).sum(), params)
    (auto,) = torch.autograd.grad((_mlp_forward(params, x.unsqueeze(-3), model, None) * weights).sum(), params)
    torch.testing.assert_close(by_hand, auto, rtol=1e-13, atol=1e-13)


def test_row_blocks_cover_the_rows_within_the_budget(monkeypatch):
    from repens.models import particles
    from repens.models.particles import _row_blocks

    model = StackedModel(mlp(3, [8, 6], 2))
    params = torch.zeros(2, 5, model.dim)  # float32: a row of the widest activation is 2 * 5 * 8 * 4 = 320 bytes
    assert _row_blocks(params, torch.zeros(9, 3), model) is None  # 2.9 kB, within 4 MiB
    monkeypatch.setattr(particles, "BLOCK_BYTES", 1000)
    # 9 rows x 8 activations against 140 weights: blocks would cost more than they save
    assert _row_blocks(params, torch.zeros(9, 3), model) is None
    monkeypatch.setattr(particles, "BLOCK_MIN_RATIO", 72 / model.dim)
    blocks = _row_blocks(params, torch.zeros(2, 1, 9, 3), model)
    assert [(b.start, b.stop) for b in blocks] == [(0, 3), (3, 6), (6, 9)]  # 9 rows, 3 to a block (960 bytes)
    blocks = _row_blocks(params, torch.zeros(10, 3), model)
    assert [(b.start, b.stop) for b in blocks] == [(0, 3), (3, 6), (6, 9), (9, 10)]


@pytest.mark.parametrize("shared", [True, False], ids=["shared-inputs", "own-inputs"])
def test_mlp_rows_in_blocks_give_the_values_and_gradients_of_one_block(monkeypatch, shared):
    """A stack too large for one block runs its rows in blocks (``BLOCK_BYTES``): outputs,
    the autograd node's gradient and the written-out pullback equal those of the whole
    stack at once, up to float64 rounding (the blocks' weight gradients are summed)."""
    from repens.models import particles

    model = StackedModel(mlp(4, [7, 5], 2, output_bias=False))
    g = torch.Generator().manual_seed(8)
    params = model.sample_gaussian(3 * 4, 1.0, g, dtype=torch.float64).view(3, 4, -1)
    x = torch.randn(*(() if shared else (3,)), 11, 4, generator=g, dtype=torch.float64)
    weights = torch.randn(3, 4, 11, 2, generator=g, dtype=torch.float64)

    def run() -> tuple[Tensor, Tensor, Tensor]:
        p = params.clone().requires_grad_(True)
        out = model(p, x)
        (grad,) = torch.autograd.grad((out * weights).sum(), p)
        outputs, inputs = model.forward_saving_inputs(params, x)
        return out.detach(), grad, model.backward(params, inputs, weights)

    whole = run()
    monkeypatch.setattr(particles, "BLOCK_BYTES", 3 * 4 * 7 * 8 * 3)  # 3 rows of the widest (7) activation
    monkeypatch.setattr(particles, "BLOCK_MIN_RATIO", 0)
    assert len(particles._row_blocks(params, x if shared else x.unsqueeze(-3), model)) == 4  # 3 + 3 + 3 + 2 rows
    blocked = run()
    for a, b in zip(whole, blocked):
        torch.testing.assert_close(b, a, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(blocked[1], blocked[2], rtol=1e-13, atol=1e-13)


def test_torch_default_init_matches_nn_linear_in_distribution():
    """Every weight and bias slot is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as nn.Linear's
    reset_parameters draws it: a two-sample KS test against nn.Linear's own draws."""
    from scipy.stats import ks_2samp

    net = mlp(200, [300], 7)
    model = StackedModel(net)
    rows = model.sample_torch_default(3, torch.Generator().manual_seed(0))
    named = model.unflatten(rows[0])
    torch.manual_seed(1)
    fresh = mlp(200, [300], 7)  # nn.Linear's own initialisation
    for name, ref in fresh.named_parameters():
        ours = named[name].flatten()
        fan_in = 200 if name.startswith("0.") else 300
        assert float(ours.abs().max()) <= fan_in**-0.5
        if ours.numel() >= 300:  # enough draws for the test to have power
            assert ks_2samp(ours.numpy(), ref.detach().flatten().numpy()).pvalue > 1e-3, name
    # the rows differ (independent draws), and a wrong scale would fail the KS test
    assert not torch.equal(rows[0], rows[1])
    assert (
        ks_2samp(
            2 * named["0.weight"].flatten().numpy(), fresh.get_parameter("0.weight").detach().flatten().numpy()
        ).pvalue
        < 1e-6
    )


def _per_member_draws(std, device="cpu"):
    model = StackedModel(mlp(20, [50, 50], 10))  # 4,110 weights a row
    g = torch.Generator(device=device).manual_seed(3)
    return model.sample_gaussian(std.shape[0], std, g)


def test_a_per_member_prior_sd_scales_each_row_by_its_own_sd():
    # hyper-deep ensembles draw member i from N(0, s_i^2 I); with D = 4,110 weights a row's
    # sample sd has relative s.e. 1/sqrt(2D) = 1.1 %, so 6 % is over 5 s.e. away
    std = torch.tensor([[0.1], [1.0], [3.0], [10.0]], dtype=torch.float64)  # another dtype than the draws
    rows = _per_member_draws(std)
    assert rows.dtype == torch.float32
    ratio = rows.double().std(dim=1) / std.view(-1)
    assert torch.allclose(ratio, torch.ones(4, dtype=torch.float64), rtol=0.06), ratio


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the sds live on the CPU, the draws on it")
def test_a_per_member_prior_sd_on_the_cpu_scales_draws_made_on_the_gpu():
    rows = _per_member_draws(torch.tensor([[0.5], [2.0]]), device="cuda")
    assert rows.device.type == "cuda"
    assert torch.allclose(rows.std(dim=1).cpu(), torch.tensor([0.5, 2.0]), rtol=0.06)
