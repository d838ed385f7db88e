"""Defining properties of every update rule."""

import math

import pytest
import torch

from repens.methods.rule import build, builder
from repens.methods.rules.anchored import anchored
from repens.methods.rules.ensemble import ensemble
from repens.methods.rules.langevin import langevin
from repens.methods.rules.svgd import fsvgd, svgd
from repens.methods.rules.wgd import fwgd, wgd
from repens.methods.updates import StepContext, function_prior_score
from repens.models.kernels import RBF
from repens.models.networks import mlp
from repens.models.particles import StackedModel
from repens.models.posteriors import AutogradPosterior, Batch, NetworkPosterior, TargetPosterior, autograd_gradient
from repens.models.scores import ssge_score
from repens.models.targets import Gaussian
from repens.training.train import TrainSettings
from rule_hooks import fit, rule_for

TARGET = Gaussian()


def gaussian_ctx(seed=0, bandwidth=None):
    return StepContext(TargetPosterior(TARGET), RBF(bandwidth), torch.Generator().manual_seed(seed))


def analytic_target_score(x):
    mean, cov = TARGET.moments()
    return -(x - mean) @ torch.linalg.inv(cov)


def network_setup(n=4, seed=0):
    torch.manual_seed(seed)
    model = StackedModel(mlp(1, [10], 1))
    x = torch.linspace(-1, 1, 16).unsqueeze(-1)
    batch = Batch(x, torch.sin(3 * x).squeeze(-1))
    posterior = NetworkPosterior(model, "gaussian", num_train=16, prior_std=1.0, noise_std=0.5)
    g = torch.Generator().manual_seed(seed)
    params = posterior.sample_prior(n, g)
    ctx = StepContext(posterior, RBF(), torch.Generator().manual_seed(seed + 1), batch)
    return params, ctx


# ------------------------------------------------------- one particle = gradient ascent
@pytest.mark.parametrize(
    "rule",
    [svgd, lambda p, c: wgd(p, c, "kde"), lambda p, c: wgd(p, c, "sge"), lambda p, c: wgd(p, c, "ssge")],
    ids=["svgd", "kde-wgd", "sge-wgd", "ssge-wgd"],
)
@pytest.mark.parametrize("bandwidth", [None, 0.5])
def test_single_particle_reduces_to_gradient_ascent_on_log_p(rule, bandwidth):
    x = torch.tensor([[0.3, -1.2]], dtype=torch.float64)
    direction = rule(x, gaussian_ctx(bandwidth=bandwidth)).direction
    torch.testing.assert_close(direction, analytic_target_score(x))


@pytest.mark.parametrize(
    "rule",
    [svgd, lambda p, c: wgd(p, c, "kde"), lambda p, c: wgd(p, c, "sge"), lambda p, c: wgd(p, c, "ssge")],
    ids=["svgd", "kde-wgd", "sge-wgd", "ssge-wgd"],
)
def test_single_float32_network_particle_has_exactly_no_repulsion(rule):
    # one particle far from the origin in float32 (network weights): the kernel term is
    # exactly zero, so the update is the deep-ensemble update bit for bit, on any machine
    params, ctx = network_setup(n=1)
    params = params.float() * 30 + 5
    assert params.dtype == torch.float32
    torch.testing.assert_close(rule(params, ctx).direction, ensemble(params, ctx).direction, rtol=0, atol=0)


def test_single_network_particle_fwgd_is_pulled_back_posterior_score():
    params, ctx = network_setup(n=1)
    options = dict(function_prior="gp", gp_lengthscale=0.5)
    direction = fwgd(params, ctx, estimator="kde", **options).direction
    # explicit Jacobian of the outputs on the batch with respect to the weights
    model = ctx.posterior.model
    jac = torch.autograd.functional.jacobian(lambda w: model(w.unsqueeze(0), ctx.batch.x).reshape(-1), params[0])
    f = model(params, ctx.batch.x).reshape(1, -1)
    lik = (ctx.batch.y - f) / 0.5**2  # N / B = 1 here
    prior = function_prior_score(f, ctx, **options)
    torch.testing.assert_close(direction[0], jac.T @ (lik + prior)[0], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------- Langevin family
def test_drle_with_zero_mmd_weight_is_dle():
    params, ctx = network_setup()
    dle = langevin(params, ctx, temperature=1.0)
    drle = langevin(params, ctx, temperature=1.0, mmd_weight=0.0)
    torch.testing.assert_close(dle.direction, drle.direction)
    assert dle.forces is None and drle.forces is None  # no repulsion


def test_drle_repulsion_differs_and_pushes_towards_prior_when_collapsed():
    params, ctx = network_setup()
    collapsed = params[:1].repeat(4, 1) * 0.01  # all members at nearly one point
    dle = langevin(collapsed, ctx, temperature=1.0).direction
    drle = langevin(collapsed, ctx, temperature=1.0, mmd_weight=1.0).direction
    assert not torch.allclose(dle, drle)


def test_dle_drift_is_the_deep_ensemble_map_update():
    params, ctx = network_setup()
    torch.testing.assert_close(langevin(params, ctx, temperature=1.0).direction, ensemble(params, ctx).direction)


class FlatPosterior(AutogradPosterior):
    """log p = 0 everywhere: only the injected noise moves the particles."""

    def log_likelihood(self, params, batch=None):
        return (params * 0).sum(-1)

    def log_prior(self, params):
        return (params * 0).sum(-1)


@pytest.mark.parametrize("lr,temperature", [(0.01, 1.0), (0.1, 0.5)])
def test_dle_noise_has_variance_two_lr_temperature(lr, temperature):
    g = torch.Generator().manual_seed(0)
    start = torch.zeros(400, 50, dtype=torch.float64)
    settings = TrainSettings(steps=1, lr=lr, optimizer="sgd")
    out = fit(rule_for("langevin", FlatPosterior(), settings, temperature=temperature), start, settings, g)
    moved = out.params.flatten()
    expected = 2 * lr * temperature
    # 20,000 draws: the sample variance has relative sd sqrt(2 / 20000) = 1%
    assert abs(float(moved.var()) / expected - 1) < 0.05
    assert abs(float(moved.mean())) < 4 * math.sqrt(expected / moved.numel())


def test_dle_with_sgd_samples_a_gaussian():
    """Unadjusted Langevin on the G.1 Gaussian: 4000 independent chains, 1500 steps."""
    g = torch.Generator().manual_seed(3)
    start = 1.7 * torch.randn(4000, 2, generator=g, dtype=torch.float64)
    settings = TrainSettings(steps=1500, lr=0.01, optimizer="sgd")
    out = fit(rule_for("langevin", TargetPosterior(TARGET), settings, temperature=1.0), start, settings, g).params
    mean, cov = TARGET.moments()
    assert float((out.mean(0) - mean).norm()) < 0.1
    emp = torch.cov(out.T)
    assert torch.all(((emp - cov).abs() / cov.abs()) < 0.1)


# ------------------------------------------------------------- anchored
def test_anchored_member_rests_at_its_anchor_without_data_gradient():
    params, ctx = network_setup()
    anchors = ctx.posterior.sample_prior(4, torch.Generator().manual_seed(7))
    flat_ctx = StepContext(FlatPosterior(), ctx.kernel, ctx.generator, ctx.batch)
    flat_ctx.posterior.log_prior = ctx.posterior.log_prior  # the real prior, no likelihood
    torch.testing.assert_close(anchored(anchors, flat_ctx, anchors).direction, torch.zeros_like(anchors))
    # and with data: likelihood gradient plus pull towards the member's own anchor
    lik = ensemble(params, ctx).direction + params / ctx.posterior.prior_std**2
    torch.testing.assert_close(anchored(params, ctx, anchors).direction, lik - (params - anchors), rtol=1e-5, atol=1e-5)


def test_the_anchored_rule_anchors_each_member_at_the_particles_it_starts_from():
    params, ctx = network_setup()
    rule = build("anchored", "weight", ctx.posterior)
    state = rule.init(params, ctx.generator)
    assert torch.equal(state.anchors, params) and state.anchors is not params
    with torch.no_grad():
        state.params.add_(1.0)  # the particles move, the anchors stay
    torch.testing.assert_close(
        rule.direction(state, ctx.batch).direction, anchored(params + 1.0, ctx, params).direction, rtol=0, atol=0
    )


def test_anchored_with_pearce_code_divisor_pulls_n_over_b_times_harder():
    """``anchor_divisor="batch"`` (Pearce et al.'s code divides the anchoring term by the batch
    size B, their Eq. 11 by N): the anchor's pull is N / B times Eq. 11's, the data term
    unchanged; with the whole training set as the batch the two are the same."""
    params, ctx = network_setup()
    anchors = ctx.posterior.sample_prior(4, torch.Generator().manual_seed(7))
    half = Batch(ctx.batch.x[:4], ctx.batch.y[:4])  # B = 4 of N = 16
    ctx_half = StepContext(ctx.posterior, ctx.kernel, ctx.generator, half)
    lik = anchored(params, ctx_half, anchors).direction + (params - anchors)  # Eq. 11, its pull removed
    torch.testing.assert_close(
        anchored(params, ctx_half, anchors, anchor_divisor="batch").direction,
        lik - 4.0 * (params - anchors),
        rtol=1e-5,
        atol=1e-5,
    )
    torch.testing.assert_close(
        anchored(params, ctx, anchors, anchor_divisor="batch").direction, anchored(params, ctx, anchors).direction
    )
    with pytest.raises(ValueError, match="anchor_divisor"):
        anchored(params, ctx, anchors, anchor_divisor="epoch")


def test_anchored_without_anchors_is_an_error():
    params, ctx = network_setup()
    with pytest.raises(ValueError, match="anchors"):
        anchored(params, ctx, None)


# ------------------------------------------------------------- collapse
def run_on_gaussian(rule, steps=600, **options):
    g = torch.Generator().manual_seed(42)
    start = 1.7 * torch.randn(100, 2, generator=g, dtype=torch.float64)
    settings = TrainSettings(steps=steps, lr=0.1)
    return fit(rule_for(rule, TargetPosterior(TARGET), settings, **options), start, settings, g).params


def test_deep_ensemble_collapses_on_a_unimodal_target():
    out = run_on_gaussian("ensemble")
    mean, _ = TARGET.moments()
    assert float((out - mean).norm(dim=-1).max()) < 1e-2


@pytest.mark.parametrize("estimator", ["kde", "sge", "ssge"])
def test_wgd_particles_do_not_collapse(estimator):
    out = run_on_gaussian("wgd", estimator=estimator)
    spread = out.std(0)
    assert torch.all(spread > 0.5), spread


def test_svgd_particles_do_not_collapse():
    assert torch.all(run_on_gaussian("svgd").std(0) > 0.5)


# ------------------------------------------------------------- function space
def test_fsvgd_and_fwgd_give_finite_per_particle_updates():
    params, ctx = network_setup(n=6)
    for rule in (
        lambda: fsvgd(params, ctx),
        lambda: fwgd(params, ctx, "kde"),
        lambda: fwgd(params, ctx, "sge", eta=0.01),
        lambda: fwgd(params, ctx, "ssge"),
    ):
        direction = rule().direction
        assert direction.shape == params.shape and torch.isfinite(direction).all()


def test_function_space_rules_need_data():
    params, ctx = network_setup()
    ctx.batch = None
    with pytest.raises(ValueError, match="batch"):
        fwgd(params, ctx)


def test_gp_function_prior_score_is_minus_inverse_covariance_times_f():
    _, ctx = network_setup(n=3)
    ctx.batch = Batch(ctx.batch.x.double(), ctx.batch.y.double())
    f = torch.randn(3, 16, dtype=torch.float64)
    x = ctx.batch.x
    cov = 2.0 * torch.exp(-(torch.cdist(x, x) ** 2) / (2 * 0.3**2)) + 2e-6 * torch.eye(16, dtype=torch.float64)
    expected = -torch.linalg.solve(cov, f.T).T
    got = function_prior_score(f, ctx, function_prior="gp", gp_lengthscale=0.3, gp_variance=2.0)
    torch.testing.assert_close(got, expected)
    # and it is the gradient of the GP log-density
    fr = f.clone().requires_grad_(True)
    logp = torch.distributions.MultivariateNormal(torch.zeros(16, dtype=torch.float64), cov).log_prob(fr).sum()
    torch.testing.assert_close(got, torch.autograd.grad(logp, fr)[0])


def test_ssge_function_prior_is_ssge_on_fresh_prior_function_draws():
    params, ctx = network_setup(n=5)
    with torch.no_grad():
        f = ctx.posterior.predict(params, ctx.batch.x).reshape(5, -1)
    seed_state = ctx.generator.get_state()
    got = function_prior_score(f, ctx, prior_samples=64, prior_eta=0.05)
    ctx.generator.set_state(seed_state)
    draws = ctx.posterior.sample_prior(64, ctx.generator)
    prior_f = ctx.posterior.predict(draws, ctx.batch.x).reshape(64, -1).detach()
    torch.testing.assert_close(got, ssge_score(prior_f, RBF(), eta=0.05, query=f))


def test_ssge_function_prior_pulls_inflated_functions_back():
    params, ctx = network_setup(n=50)
    with torch.no_grad():
        f = ctx.posterior.predict(params, ctx.batch.x).reshape(50, -1)
    inflated = 1.5 * f  # functions with 1.5x the prior's amplitude
    score = function_prior_score(inflated, ctx, prior_samples=500, prior_eta=0.1)
    inward = (score * (f - inflated)).sum(-1) > 0
    assert float(inward.float().mean()) > 0.7


# ------------------------------------------------------------- registry
def test_the_registry_names_find_their_builders():
    from repens.methods.rules.svgd import SVGD, FunctionSVGD
    from repens.methods.rules.wgd import WGD, FunctionWGD

    assert builder("svgd") is SVGD and builder("svgd", "function") is FunctionSVGD
    assert builder("wgd") is WGD and builder("wgd", "function") is FunctionWGD
    assert type(build("langevin", "weight", None, temperature=0.5)).__name__ == "Langevin"
    with pytest.raises(ValueError, match="function-space"):
        builder("anchored", "function")
    with pytest.raises(ValueError, match="unknown update rule"):
        builder("hmc")
    with pytest.raises(ValueError, match="unknown space"):
        builder("svgd", "output")


@pytest.mark.parametrize("std", ["scalar", "per-particle", "per-weight"])
def test_closed_form_prior_gradient_equals_autograd(std):
    params, ctx = network_setup(n=3)
    params = params.double()
    scale = {
        "scalar": 0.7,
        "per-particle": torch.tensor([[0.5], [1.0], [2.0]], dtype=torch.float64),
        "per-weight": torch.linspace(0.1, 2.0, params.shape[1], dtype=torch.float64),
    }[std]
    post = NetworkPosterior(ctx.posterior.model, "gaussian", num_train=16, prior_std=scale, noise_std=0.5)
    p = params.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(post.log_prior(p).sum(), p)
    torch.testing.assert_close(post.grad_log_prior(params), auto, rtol=1e-14, atol=0)


@pytest.mark.parametrize("likelihood", ["gaussian", "categorical"])
@pytest.mark.parametrize("sets", [None, 3], ids=["one-set", "stack-of-sets"])
def test_written_out_likelihood_gradient_equals_autograd(likelihood, sets):
    """The MLP posterior's likelihood gradient without autograd (closed-form output
    gradient, written-out backward) against autograd through the log-likelihood."""
    outputs = 1 if likelihood == "gaussian" else 4
    model = StackedModel(mlp(3, [6, 5], outputs))
    post = NetworkPosterior(model, likelihood, num_train=40, prior_std=1.0, noise_std=0.3)
    g = torch.Generator().manual_seed(11)
    lead = (sets,) if sets else ()
    params = post.sample_prior(5 * (sets or 1), g).double().view(*lead, 5, -1)
    x = torch.randn(*lead, 8, 3, generator=g, dtype=torch.float64)
    y = (
        torch.randn(*lead, 8, generator=g, dtype=torch.float64)
        if likelihood == "gaussian"
        else torch.randint(0, outputs, (*lead, 8), generator=g)
    )
    batch = Batch(x, y)
    written = post.grad_log_likelihood(params, batch)
    auto = autograd_gradient(lambda p: post.log_likelihood(p, batch), params)
    assert written.shape == params.shape
    torch.testing.assert_close(written, auto, rtol=1e-12, atol=1e-12)


def test_networks_other_than_mlps_pull_the_output_gradient_back_by_autograd():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)).double()
    post = NetworkPosterior(StackedModel(net), "gaussian", num_train=10, noise_std=0.4)
    params = post.sample_prior(2, torch.Generator().manual_seed(0)).double()
    batch = Batch(torch.randn(4, 2, dtype=torch.float64), torch.randn(4, dtype=torch.float64))
    auto = autograd_gradient(lambda p: post.log_likelihood(p, batch), params)
    torch.testing.assert_close(post.grad_log_likelihood(params, batch), auto, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------ stacks of independent sets
STACKABLE = {
    "de": lambda p, c, a: ensemble(p, c),
    "svgd": lambda p, c, a: svgd(p, c),
    "kde-wgd": lambda p, c, a: wgd(p, c, "kde"),
    "sge-wgd": lambda p, c, a: wgd(p, c, "sge"),
    "ssge-wgd": lambda p, c, a: wgd(p, c, "ssge", num_eigs=3),
    "anchored": lambda p, c, a: anchored(p, c, a),
    "dle": lambda p, c, a: langevin(p, c, temperature=1.0),
    "drle": lambda p, c, a: langevin(p, c, temperature=1.0, mmd_weight=1.0, prior_samples=4),
    "fsvgd-gp": lambda p, c, a: fsvgd(p, c, function_prior="gp", gp_lengthscale=0.5),
    "kde-fwgd-gp": lambda p, c, a: fwgd(p, c, estimator="kde", function_prior="gp", gp_lengthscale=0.5),
    "ssge-fwgd": lambda p, c, a: fwgd(p, c, estimator="ssge", function_prior="ssge", prior_samples=5),
}


@pytest.mark.parametrize("name", sorted(STACKABLE))
def test_a_stack_of_sets_updates_each_set_as_if_alone(name, monkeypatch):
    """Sets stacked on a leading axis (e.g. UCI splits, each with its own data) never
    interact: the stacked update equals each set's own update, for every rule."""
    rule = STACKABLE[name]
    sets, n = 3, 4
    params, ctx = network_setup(n=sets * n)
    params = params.double().view(sets, n, -1)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(sets, 16, 1, generator=g, dtype=torch.float64)
    y = torch.sin(3 * x).squeeze(-1) + 0.1 * torch.randn(sets, 16, generator=g, dtype=torch.float64)
    anchors = torch.randn(params.shape, generator=g, dtype=torch.float64)
    # prior draws (DRLE, the SSGE function prior): the same numbers whether drawn for the
    # stack at once or set by set, so that only the stacking is compared
    pool = torch.randn(1000, params.shape[-1], generator=g, dtype=torch.float64)
    drawn = {"next": 0}

    def sample_prior(self, m, generator):
        start = drawn["next"]
        drawn["next"] += m
        return pool[start : start + m]

    monkeypatch.setattr(NetworkPosterior, "sample_prior", sample_prior)
    post = ctx.posterior
    stacked = rule(params, StepContext(post, RBF(), g, Batch(x, y)), anchors).direction
    drawn["next"] = 0
    for k in range(sets):
        alone = rule(params[k], StepContext(post, RBF(), g, Batch(x[k], y[k])), anchors[k]).direction
        torch.testing.assert_close(stacked[k], alone, rtol=1e-10, atol=1e-10)


def test_declared_rule_options_are_the_rules_fields():
    """repens.jobs.rule_options (what config.yaml may set, checked without torch) must say what
    the rule objects, the score estimators and the function prior take."""
    import inspect
    from dataclasses import fields

    from repens.core import registry
    from repens.core.registry import FUNCTION_SPACE_OPTIONS
    from repens.jobs.rule_options import ESTIMATOR_OPTIONS, FUNCTION_PRIOR_OPTIONS, FUNCTION_SPACE, RULE_OPTIONS
    from repens.methods.rule import FunctionSpaceRule, Rule
    from repens.models.scores import SCORE_ESTIMATORS

    def keywords(fn, skip):
        params = inspect.signature(fn).parameters.values()
        return {p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in skip}

    def own(cls, base=Rule):
        return {f.name for f in fields(cls)} - {f.name for f in fields(base)}

    every_estimators = set().union(*ESTIMATOR_OPTIONS.values())
    for rule in RULE_OPTIONS:
        # a rule that takes an estimator takes each estimator's options besides
        expected = RULE_OPTIONS[rule] | (every_estimators if registry.rule(rule).estimator else set())
        assert own(builder(rule)) == expected, rule
        if rule in FUNCTION_SPACE:
            assert own(builder(rule, "function"), FunctionSpaceRule) == expected, rule
    for name, estimator in SCORE_ESTIMATORS.items():
        assert keywords(estimator, {"x", "kernel", "query"}) == ESTIMATOR_OPTIONS[name], name
    assert keywords(function_prior_score, {"outputs", "ctx"}) == FUNCTION_PRIOR_OPTIONS
    assert own(FunctionSpaceRule) == FUNCTION_PRIOR_OPTIONS | FUNCTION_SPACE_OPTIONS


def test_svgd_direction_is_eq_6_term_by_term():
    """The one-GEMM SVGD direction against Eq. 6 written as a double loop, with the kernel
    gradient by autograd: 1/n sum_j [k(w_j, w_i) score_j + grad_{w_j} k(w_j, w_i)]."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 2, generator=g, dtype=torch.float64)
    ctx = StepContext(TargetPosterior(TARGET), RBF(), g)
    direction = svgd(x, ctx).direction
    score = analytic_target_score(x).to(x.dtype)
    h = RBF().bandwidth_for(x).squeeze()
    expected = torch.zeros_like(x)
    for i in range(5):
        for j in range(5):
            wj = x[j].clone().requires_grad_(True)
            k = torch.exp(-((wj - x[i]) ** 2).sum() / h)
            (grad_k,) = torch.autograd.grad(k, wj)
            expected[i] += k.detach() * score[j] + grad_k
    torch.testing.assert_close(direction, expected / 5, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("classes", [2, 5, 10, 15, 16, 40])
def test_softmax_of_few_classes_equals_torchs_to_float_rounding(classes):
    """The transposed route (fewer than 16 classes) gives softmax and log-softmax over the
    last dimension to a few float32 ulps, rows summing to 1, and keeps autograd."""
    from repens.models.posteriors import log_softmax_classes, softmax_classes

    g = torch.Generator().manual_seed(classes)
    logits = (4 * torch.randn(3, 17, classes, generator=g)).requires_grad_()
    eps = torch.finfo(torch.float32).eps
    p = softmax_classes(logits)
    assert p.shape == logits.shape
    # probabilities in [0, 1]: each op rounds by eps / 2 relative; 8 eps bounds exp, sum and divide
    torch.testing.assert_close(p, torch.softmax(logits, -1), rtol=0, atol=8 * eps)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 17), rtol=0, atol=classes * eps)
    logp = log_softmax_classes(logits)
    scale = logits.detach().abs().amax() + math.log(classes)  # the size of the terms summed
    torch.testing.assert_close(logp, torch.log_softmax(logits, -1), rtol=0, atol=8 * eps * float(scale))
    (grad,) = torch.autograd.grad(logp[..., 0].sum(), logits)
    (ref,) = torch.autograd.grad(torch.log_softmax(logits, -1)[..., 0].sum(), logits)
    torch.testing.assert_close(grad, ref, rtol=0, atol=8 * eps)


@pytest.mark.parametrize("prior_std", [0.37, "per-particle", "per-weight"])
def test_prior_gradient_added_in_place_rounds_as_the_separate_sum(prior_std):
    """add_grad_log_prior (one addcdiv pass) gives bit for bit likelihood + grad_log_prior
    at scale 1, and the same to float rounding at another scale (Langevin's temperature)."""
    from repens.methods.updates import add_grad_log_prior, grad_log_prior

    g = torch.Generator().manual_seed(5)
    model = StackedModel(mlp(2, [7], 1))
    n = 4
    std = {
        "per-particle": torch.rand(n, 1, generator=g) + 0.1,
        "per-weight": torch.rand(model.dim, generator=g) + 0.1,
    }.get(prior_std, prior_std)
    post = NetworkPosterior(model, "gaussian", num_train=10, prior_std=std)
    ctx = StepContext(post, RBF(), g)
    params = torch.randn(n, model.dim, generator=g) * 3
    lik = torch.randn(n, model.dim, generator=g) * 100
    expected = lik + grad_log_prior(params, ctx)
    assert torch.equal(add_grad_log_prior(lik.clone(), params, ctx), expected)
    tempered = add_grad_log_prior(lik.clone(), params, ctx, 0.3)
    prior = 0.3 * grad_log_prior(params, ctx)
    # each side rounds the prior term twice and the sum once: within 2 ulps of the terms
    bound = 2 * torch.finfo(torch.float32).eps * (lik.abs() + prior.abs())
    assert ((tempered - (lik + prior)).abs() <= bound).all()
    assert not torch.equal(tempered, expected)
