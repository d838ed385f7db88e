"""The released code's protocol as options of the rules (function-space rules on softmax
outputs, SVGD's repulsion times N), the image MLP on the MLP path, the repulsion's share
after Adam's scaling, the variants that use them, and the reference tree's method rename.

Comparisons between two code paths run in float64: both compute the same expressions in
another order, so they differ by rounding alone, a few ulps of each product of length
K <= 784 and of the kernel's exponentials; K * eps64 is 1.7e-13, and RTOL below leaves three
orders of magnitude for the kernels' and estimators' amplification of it.
"""

import copy
import importlib.util
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from repens.core.jobkey import job_key
from repens.core.variants import VariantError, expand_variants
from repens.methods.rule import build
from repens.methods.updates import (
    StepContext,
    adam_preconditioner,
    function_prior_score,
    preconditioned_repulsion_ratio,
    repulsion_ratio,
)
from repens.models.kernels import RBF
from repens.models.networks import build_model
from repens.models.particles import StackedModel
from repens.models.posteriors import Batch, NetworkPosterior
from repens.models.scores import SCORE_ESTIMATORS
from repens.pipeline.config import check_config, resolve_job

ROOT = Path(__file__).resolve().parents[1]
RTOL = 1e-10
SHAPE = (1, 4, 4)
N_TRAIN, BATCH, PARTICLES = 100, 5, 6

#: the image experiment's methods as their config entries give them
METHODS = {
    "de": ("ensemble", "weight", {}),
    "svgd": ("svgd", "weight", {}),
    "fsvgd": ("svgd", "function", {}),
    "kde-wgd": ("wgd", "weight", {"estimator": "kde"}),
    "sge-wgd": ("wgd", "weight", {"estimator": "sge", "eta": 0.01}),
    "ssge-wgd": ("wgd", "weight", {"estimator": "ssge", "eta": 0.01}),
    "kde-fwgd": ("wgd", "function", {"estimator": "kde"}),
    "sge-fwgd": ("wgd", "function", {"estimator": "sge", "eta": 0.01}),
    "ssge-fwgd": ("wgd", "function", {"estimator": "ssge", "eta": 0.01}),
    "anchored": ("anchored", "weight", {}),
    "dle": ("langevin", "weight", {"temperature": 1.0}),
    "drle": ("langevin", "weight", {"temperature": 1.0, "mmd_weight": 1.0}),
}


def _problem(fast=True, seed=0):
    torch.manual_seed(seed)
    net = build_model({"model": "mlp", "hidden": [8, 8]}, SHAPE, 10).double()
    model = StackedModel(net, input_shape=SHAPE) if fast else StackedModel(net)
    g = torch.Generator().manual_seed(seed + 1)
    params = model.sample_gaussian(PARTICLES, 1.0, g, dtype=torch.float64)
    x = torch.rand(BATCH, *SHAPE, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    return model, params, Batch(x, y)


def _ctx(model, batch, seed=7):
    post = NetworkPosterior(model, "categorical", num_train=N_TRAIN)
    return StepContext(post, RBF(), torch.Generator().manual_seed(seed), batch)


def _update(rule, space, params, model, batch, anchors=None, likelihood="categorical", **options):
    """One update of ``rule`` at ``params`` on ``batch`` (an anchored ensemble anchored at
    ``anchors``), the stream seeded as :func:`_ctx`'s."""
    built = build(rule, space, NetworkPosterior(model, likelihood, num_train=N_TRAIN), kernel=RBF(), **options)
    state = built.init(params if anchors is None else anchors, torch.Generator().manual_seed(7))
    with torch.no_grad():
        state.params.copy_(params)
    return built.direction(state, batch)


def _close(a, b, rtol=RTOL):
    return ((a - b).abs().max() / b.abs().max()).item() <= rtol


# ------------------------------------------------------------------ the image MLP's fast path
def test_the_image_network_takes_the_mlp_path_only_with_its_input_shape():
    net = build_model({"model": "mlp", "hidden": [8]}, SHAPE, 10)
    assert StackedModel(net, input_shape=SHAPE).is_mlp
    assert not StackedModel(net).is_mlp  # without the shape the inputs' axes are ambiguous: vmap
    resnet = build_model({"model": "resnet", "depth": 8, "width": 2}, (3, 8, 8), 10)
    assert not StackedModel(resnet, input_shape=(3, 8, 8)).is_mlp


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_rules_step_on_the_mlp_path_equals_the_vmap_path(method):
    """One update of each rule on the image network: the MLP path (as run_image builds it)
    against the network under vmap and autograd (as it ran before), in float64."""
    rule, space, options = METHODS[method]
    directions = []
    for fast in (True, False):
        model, params, batch = _problem(fast)
        anchors = params.flip(0) if rule == "anchored" else None
        if space == "function":
            options = {**options, "prior_samples": PARTICLES}
        directions.append(_update(rule, space, params, model, batch, anchors, **options).direction)
    assert _close(*directions), method


def test_a_seed_stack_on_the_mlp_path_equals_each_seed_alone():
    """(G, n, D) particles with one batch per seed: each seed's outputs as its own (n, D) run."""
    model, _, _ = _problem()
    g = torch.Generator().manual_seed(3)
    stack = torch.stack([model.sample_gaussian(PARTICLES, 1.0, g, dtype=torch.float64) for _ in range(3)])
    x = torch.rand(3, BATCH, *SHAPE, generator=g, dtype=torch.float64)
    out = model(stack, x)
    assert out.shape == (3, PARTICLES, BATCH, 10)
    for s in range(3):
        assert _close(out[s], model(stack[s], x[s]))


# ------------------------------------------------------------------ function space on softmax
def _released_code_direction(model, params, batch, rule, estimator=None):
    """The released code's f-WGD / f-SVGD step on softmax outputs (``pred_idx=0``), by autograd:
    ``methods/WGD.py::f_WGD.phi`` and ``methods/f_SVGD.py::f_s_SVGD.phi`` with the GP prior in
    place of the SSGE prior (deterministic), ``utils/distributions.py``'s likelihood."""
    w = params.clone().requires_grad_(True)
    probs = torch.softmax(model(w, batch.x), -1)
    onehot = F.one_hot(batch.y, 10).to(probs)
    loss = (-(onehot * torch.log(probs + 1e-15))).max(-1)[0].sum(-1) / BATCH
    score = torch.autograd.grad((-loss * N_TRAIN).sum(), probs, retain_graph=True)[0].reshape(PARTICLES, -1)
    flat = probs.reshape(PARTICLES, -1).detach()
    ctx = _ctx(model, batch)
    drive = score + function_prior_score(flat, ctx, function_prior="gp")
    if rule == "svgd":
        gram, h = RBF().self_gram(flat)
        x = flat.clone().requires_grad_(True)
        kernel = torch.exp(-(torch.cdist(x, flat) ** 2) / h)
        grad_k = -torch.autograd.grad(kernel.sum(), x)[0]
        f_phi = (gram @ drive + grad_k) / PARTICLES
    else:
        options = {"eta": 0.01} if estimator == "sge" else {}
        f_phi = drive - SCORE_ESTIMATORS[estimator](flat, RBF(), **options)
    return torch.autograd.grad(probs.reshape(PARTICLES, -1), w, grad_outputs=f_phi)[0]


@pytest.mark.parametrize("rule,estimator", [("svgd", None), ("wgd", "kde"), ("wgd", "sge")])
@pytest.mark.parametrize("fast", [True, False])
def test_function_space_on_softmax_outputs_is_the_released_codes_step(rule, estimator, fast):
    model, params, batch = _problem(fast)
    options = {"estimator": estimator} if estimator else {}
    ours = _update(rule, "function", params, model, batch, function_output="softmax", function_prior="gp", **options)
    ours = ours.direction
    assert _close(ours, _released_code_direction(model, params, batch, rule, estimator))


def test_softmax_outputs_change_the_step_and_logits_stay_the_default():
    model, params, batch = _problem()
    on = {
        o: _update("wgd", "function", params, model, batch, estimator="kde", function_output=o).direction
        for o in ("logits", "softmax")
    }
    default = _update("wgd", "function", params, model, batch, estimator="kde").direction
    assert torch.equal(default, on["logits"])
    assert not _close(on["softmax"], default, rtol=1e-3)


def test_on_softmax_outputs_a_particles_own_pull_vanishes_where_its_label_probability_is_below_the_guard():
    """One particle (so f-SVGD's direction is its own score, pulled back): on softmax
    outputs it is the logits' score ``N/B (onehot - p)`` times ``p_y / (p_y + 1e-15)``, the
    released code's guard, so an example whose label probability is below 1e-15 loses its
    pull (docs/image.md, f-SVGD on softmax outputs); the GP prior's score is made negligible."""
    model, params, batch = _problem()
    params = params[1:2]  # its label probabilities on the batch: 0.17, 7e-20, 7e-12, 7e-6, 4e-7
    posterior = NetworkPosterior(model, "categorical", num_train=N_TRAIN)
    logits, pull_back = posterior.outputs_with_pullback(params, batch.x)
    p_y = logits.softmax(-1).gather(-1, batch.y.view(1, -1, 1))
    assert (p_y < 1e-15).any() and (p_y > 1e-3).any(), p_y.flatten()
    lik = posterior.output_grad_log_likelihood(logits, batch)
    rule = build(
        "svgd", "function", posterior, kernel=RBF(1.0), function_output="softmax", function_prior="gp", gp_variance=1e40
    )
    state = rule.init(params, torch.Generator().manual_seed(7))
    got = rule.direction(state, batch).direction
    assert _close(got, pull_back(lik * (p_y / (p_y + 1e-15))))
    assert not _close(got, pull_back(lik), rtol=1e-2)  # the logits' own pull keeps those examples


def test_the_ssge_function_prior_sees_the_prior_networks_probabilities():
    """With ``output_map`` the prior draws' outputs are mapped as the particles' are: the
    score of a particle set equal to the draws' own probabilities is SSGE's on those."""
    from repens.models.scores import ssge_score

    model, params, batch = _problem()
    ctx = _ctx(model, batch, seed=11)
    draws = ctx.posterior.sample_prior(PARTICLES, torch.Generator().manual_seed(11)).double()  # as the rule draws
    probs = torch.softmax(model(draws, batch.x), -1).flatten(1)
    got = function_prior_score(probs, ctx, output_map=lambda z: torch.softmax(z, -1))
    assert _close(got, ssge_score(probs, RBF(), eta=0.01, query=probs))


def test_softmax_outputs_need_the_categorical_likelihood():
    model, params, batch = _problem()
    with pytest.raises(ValueError, match="categorical likelihood"):
        _update("svgd", "function", params, model, batch, likelihood="gaussian", function_output="softmax")
    with pytest.raises(ValueError, match="function_output 'probs'"):
        _update("svgd", "function", params, model, batch, function_output="probs")


# ------------------------------------------------------------------ SVGD's repulsion times N
@pytest.mark.parametrize("space", ["weight", "function"])
def test_repulsion_scale_num_train_multiplies_the_repulsion_by_n_and_nothing_else(space):
    model, params, batch = _problem()
    one = _update("svgd", space, params, model, batch)
    scaled = _update("svgd", space, params, model, batch, repulsion_scale="num_train")
    (drift_1, rep_1), (drift_n, rep_n) = one.forces(), scaled.forces()
    assert _close(drift_n, drift_1)
    assert _close(rep_n, N_TRAIN * rep_1)
    number = _update("svgd", space, params, model, batch, repulsion_scale=float(N_TRAIN))
    assert _close(number.direction, scaled.direction)
    with pytest.raises(ValueError, match="repulsion_scale 'n'"):
        _update("svgd", space, params, model, batch, repulsion_scale="n")


# ------------------------------------------------------------------ the repulsion after Adam
def test_the_preconditioned_ratio_is_the_plain_one_under_a_uniform_scale():
    model, params, batch = _problem()
    for rule, space, options in (("wgd", "weight", {"estimator": "kde"}), ("svgd", "weight", {})):
        update = _update(rule, space, params, model, batch, **options)
        uniform = preconditioned_repulsion_ratio(update, torch.full_like(params, 3.0))
        assert _close(uniform, repulsion_ratio(update))
    assert preconditioned_repulsion_ratio(_update("ensemble", "weight", params, model, batch), params) is None


def test_a_function_space_rules_preconditioned_ratio_is_taken_in_weight_space():
    model, params, batch = _problem()
    update = _update("wgd", "function", params, model, batch, estimator="kde")
    drift_f, rep_f = update.forces()
    scale = torch.rand(params.shape, generator=torch.Generator().manual_seed(5), dtype=params.dtype) + 0.1
    want = (scale * update.pull_back(rep_f)).norm() / (scale * update.pull_back(drift_f)).norm()
    assert _close(preconditioned_repulsion_ratio(update, scale), want)


def test_adams_scale_is_its_bias_corrected_preconditioner():
    params = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([params], lr=0.1, betas=(0.9, 0.99), eps=1e-8)
    assert adam_preconditioner(opt, params) is None  # no step yet
    grads = [torch.randn(3, 4, dtype=torch.float64) for _ in range(3)]
    for grad in grads:
        params.grad = grad
        opt.step()
    v = sum(0.99 ** (2 - i) * 0.01 * g**2 for i, g in enumerate(grads)) / (1 - 0.99**3)
    assert _close(adam_preconditioner(opt, params), 1.0 / (v.sqrt() + 1e-8))
    assert adam_preconditioner(torch.optim.SGD([params], lr=0.1), params) is None


# ------------------------------------------------------------------ the config's variants
def _config():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["scale"] = "paper"
    return config


def test_the_code_protocol_block_is_every_paper_method_with_softmax_only_for_function_space():
    config = _config()
    expand_variants(config)
    check_config(config)
    paper = ["de", "svgd", "fsvgd", "hyper-de", "kde-wgd", "sge-wgd", "ssge-wgd", "kde-fwgd", "sge-fwgd", "ssge-fwgd"]
    for method in paper:
        job = resolve_job(config, "image", "fashionmnist", f"{method}-code-protocol", 38)
        base = resolve_job(config, "image", "fashionmnist", method, 38)
        assert job["init"] == "torch" and job["lr"] == base["lr"] and job["prior_std"] == 1.0
        function_space = config["methods"][method].get("space") == "function"
        assert job.get("function_output") == ("softmax" if function_space else None), method
    control = resolve_job(config, "image", "fashionmnist", "de-code-wgd-lr", 38)
    assert (control["init"], control["lr"]) == ("torch", 0.001)
    scaled = resolve_job(config, "image", "fashionmnist", "fsvgd-code-num-train", 38)
    assert (scaled["repulsion_scale"], scaled["function_output"]) == ("num_train", "softmax")
    # the protocol's control: f-SVGD's code-protocol job with the logits, nothing else changed
    logits = resolve_job(config, "image", "fashionmnist", "fsvgd-code-logits", 38)
    row = resolve_job(config, "image", "fashionmnist", "fsvgd-code-protocol", 38)
    assert {k for k in logits.keys() | row.keys() if logits.get(k) != row.get(k)} == {"method", "function_output"}
    assert logits["function_output"] == "logits"
    # and hyper-DE's: its L2 search ranked by validation accuracy, nothing else changed
    ranked = resolve_job(config, "image", "fashionmnist", "hyper-de-code-search-accuracy", 38)
    row = resolve_job(config, "image", "fashionmnist", "hyper-de-code-protocol", 38)
    assert {k for k in ranked.keys() | row.keys() if ranked.get(k) != row.get(k)} == {"method", "search_rank"}
    assert ranked["search_rank"] == "accuracy" and row.get("search_rank", "nll") == "nll"


def test_every_control_of_the_protocol_on_the_results_page_is_one_setting_apart_from_its_row():
    from repens.report.answers import PROTOCOL_CONTROLS

    config = _config()
    expand_variants(config)
    for control, rows, _ in PROTOCOL_CONTROLS:
        job = resolve_job(config, "image", "fashionmnist", control, 38)
        for compared in rows:
            row = resolve_job(config, "image", "fashionmnist", compared, 38)
            changed = {k for k in job.keys() | row.keys() if job.get(k) != row.get(k)} - {"method"}
            assert len(changed) == 1, (control, compared, changed)


def test_a_variants_method_settings_must_name_its_methods():
    config = _config()
    variant = config["experiments"]["image"]["variants"]["code-num-train"]
    variant["method_settings"]["de"] = {"lr": 0.1}
    with pytest.raises(VariantError, match=r"variants\.code-num-train\.method_settings\.de: 'de' is not among"):
        expand_variants(config)


def test_an_option_a_variant_gives_a_rule_that_does_not_take_it_is_refused():
    from repens.pipeline.config import ConfigError

    config = _config()
    config["experiments"]["image"]["variants"]["code-wgd-lr"]["settings"]["function_output"] = "softmax"
    expand_variants(config)
    with pytest.raises(ConfigError, match="function_output: option not used by method 'de-code-wgd-lr'"):
        check_config(config)


# ------------------------------------------------------------------ renaming runs in reference/
def _rename_script():
    spec = importlib.util.spec_from_file_location("rename_method", ROOT / "workflow/scripts/rename_method.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tree, method, seed=38):
    job = {"experiment": "image", "dataset": "fashionmnist", "method": method, "seed": seed, "lr": 0.0025}
    log = f"logs/image/fashionmnist/{method}/seed{seed}.log"
    run = tree / "image/fashionmnist" / method / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(
        json.dumps({"job": job, "metrics": {"accuracy": 0.9}, "provenance": {"job_key": job_key(job), "log": log}})
    )
    (tree / log).parent.mkdir(parents=True, exist_ok=True)
    (tree / log).write_text("the log\n")
    return job


def test_renaming_a_method_moves_its_runs_and_rekeys_them(tmp_path):
    old_job = _run(tmp_path, "de-old")
    _rename_script().rename(tmp_path, "image", "fashionmnist", "de-old", "de-new")
    data = json.loads((tmp_path / "image/fashionmnist/de-new/seed38/metrics.json").read_text())
    assert data["job"] == {**old_job, "method": "de-new"}
    assert data["provenance"]["job_key"] == job_key(data["job"])
    assert data["provenance"]["renamed_from"]["job_key"] == job_key(old_job)
    assert data["provenance"]["log"] == "logs/image/fashionmnist/de-new/seed38.log"
    assert (tmp_path / data["provenance"]["log"]).read_text() == "the log\n"
    assert not (tmp_path / "image/fashionmnist/de-old").exists()


def test_a_run_that_is_not_the_job_it_claims_to_be_is_not_renamed(tmp_path):
    _run(tmp_path, "de-old")
    path = tmp_path / "image/fashionmnist/de-old/seed38/metrics.json"
    data = json.loads(path.read_text())
    forged = copy.deepcopy(data)
    forged["job"]["lr"] = 0.001  # the key no longer is the spec's
    path.write_text(json.dumps(forged))
    with pytest.raises(SystemExit, match="is not the job 'de-old' it claims to be"):
        _rename_script().rename(tmp_path, "image", "fashionmnist", "de-old", "de-new")
    assert path.exists() and not (tmp_path / "image/fashionmnist/de-new").exists()


# ------------------------------------------------------------------ TF32 as a measured option
@pytest.fixture
def tf32_flags():
    """torch's two TF32 flags, set to False for the test and restored after it."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_matmul_precision_is_a_setting_that_sets_tf32_for_matmuls_and_convolutions(tf32_flags):
    from repens.experiments.image import apply_matmul_precision, set_matmul_precision
    from repens.jobs.job import ImageJob, SpecError

    config = _config()
    config["experiments"]["image"]["datasets"]["fashionmnist"]["matmul_precision"] = "high"
    expand_variants(config)
    check_config(config)
    job = ImageJob.of(resolve_job(config, "image", "fashionmnist", "de", 38))
    assert job.matmul_precision == "high"
    unset = resolve_job(_config(), "image", "fashionmnist", "de", 38)
    assert "matmul_precision" not in unset  # unset: no key, so no committed run's key changes
    apply_matmul_precision(job)
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    apply_matmul_precision(job.replace(matmul_precision="highest"))
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    apply_matmul_precision(job.replace(matmul_precision=None))  # torch's defaults left alone
    assert not torch.backends.cuda.matmul.allow_tf32
    with pytest.raises(SpecError, match="matmul_precision"):
        ImageJob.of({**unset, "matmul_precision": "medium"})
    with pytest.raises(ValueError, match="matmul_precision"):
        set_matmul_precision("medium")  # the benchmarks' way in checks as the spec does
