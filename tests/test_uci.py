"""UCI regression (Table 2): split loading, the mixture metrics, the prior, the runner."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from repens.data.uci import (
    UCI_FOLDERS,
    DataFileError,
    UCIDataError,
    check_dataset,
    dataset_info,
    download_dataset,
    load_split,
)
from repens.experiments.uci import ensemble_gaussian_metrics, layer_prior_stds, mixture_metrics, run_uci, uci_posterior
from repens.models.networks import mlp
from repens.models.particles import StackedModel
from repens.models.posteriors import NetworkPosterior
from repens.pipeline.config import resolve_job

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
# ../shared beside the checkout (CI and the dev machines), or $REPENS_SHARED_DATA
SHARED = Path(os.environ.get("REPENS_SHARED_DATA", ROOT.parent / "shared" / "data")) / "uci"


def write_dataset(root: Path, name: str = "tiny", rows: int = 40, n_splits: int = 3, seed: int = 0) -> Path:
    """A dataset folder in the standard layout: 3 features, target last, 25% test rows."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3)) * [1.0, 5.0, 0.1] + [0.0, 10.0, -3.0]
    y = x @ [1.0, -0.2, 4.0] + 0.1 * rng.normal(size=rows) + 7.0
    folder = root / name / "data"
    folder.mkdir(parents=True)
    np.savetxt(folder / "data.txt", np.column_stack([x, y]))
    (folder / "index_features.txt").write_text("0\n1\n2\n")
    (folder / "index_target.txt").write_text("3\n")
    for f, v in (("n_splits.txt", n_splits), ("n_hidden.txt", 8), ("n_epochs.txt", 2)):
        (folder / f).write_text(f"{v}\n")
    for k in range(n_splits):
        perm = rng.permutation(rows)
        np.savetxt(folder / f"index_train_{k}.txt", perm[rows // 4 :], fmt="%d")
        np.savetxt(folder / f"index_test_{k}.txt", perm[: rows // 4], fmt="%d")
    return folder


# ------------------------------------------------------------------ split loading
def test_split_standardized_on_training_rows_only(tmp_path):
    folder = write_dataset(tmp_path)
    split = load_split(tmp_path, "tiny", 1)
    raw = np.loadtxt(folder / "data.txt")
    train = np.loadtxt(folder / "index_train_1.txt", dtype=int)
    test = np.loadtxt(folder / "index_test_1.txt", dtype=int)
    assert np.array_equal(split.train_index, train) and np.array_equal(split.test_index, test)
    assert np.allclose(split.x_train.mean(0), 0, atol=1e-5) and np.allclose(
        split.x_train.std(0, unbiased=False), 1, atol=1e-5
    )
    assert abs(float(split.y_train.mean())) < 1e-5 and abs(float(split.y_train.std(unbiased=False)) - 1) < 1e-5
    # the statistics are the training rows' own, applied unchanged to the test rows
    assert np.allclose(split.x_mean, raw[train, :3].mean(0)) and np.allclose(split.x_std, raw[train, :3].std(0))
    assert math.isclose(split.y_mean, raw[train, 3].mean()) and math.isclose(split.y_std, raw[train, 3].std())
    assert np.allclose(split.x_test.numpy() * split.x_std + split.x_mean, raw[test, :3], atol=1e-4)
    assert np.allclose(split.y_test_raw, raw[test, 3])


def test_test_rows_do_not_change_the_statistics(tmp_path):
    folder = write_dataset(tmp_path)
    before = load_split(tmp_path, "tiny", 0)
    raw = np.loadtxt(folder / "data.txt")
    raw[before.test_index] *= 1000.0  # only test rows change
    np.savetxt(folder / "data.txt", raw)  # a changed file is read again (cache keyed by mtime and size)
    after = load_split(tmp_path, "tiny", 0)
    assert np.allclose(after.x_mean, before.x_mean) and after.y_std == pytest.approx(before.y_std)
    assert torch.equal(after.x_train, before.x_train)


def test_overlapping_or_out_of_range_indices_are_errors(tmp_path):
    folder = write_dataset(tmp_path)
    train = np.loadtxt(folder / "index_train_0.txt", dtype=int)
    np.savetxt(folder / "index_test_0.txt", train[:3], fmt="%d")
    with pytest.raises(DataFileError, match="both train and test"):
        load_split(tmp_path, "tiny", 0)
    np.savetxt(folder / "index_test_1.txt", [0, 40], fmt="%d")
    with pytest.raises(DataFileError, match=r"index_test_1\.txt: has indices outside \[0, 40\)"):
        load_split(tmp_path, "tiny", 1)
    with pytest.raises(UCIDataError, match="split 3 out of range"):
        load_split(tmp_path, "tiny", 3)


def test_missing_files_are_named(tmp_path):
    folder = write_dataset(tmp_path)
    (folder / "index_train_2.txt").unlink()
    (folder / "index_test_0.txt").unlink()
    with pytest.raises(UCIDataError, match=r"index_test_0\.txt, index_train_2\.txt"):
        check_dataset(tmp_path, "tiny")
    (folder / "n_splits.txt").unlink()
    with pytest.raises(UCIDataError, match=r"missing in .*: n_splits\.txt"):
        check_dataset(tmp_path, "tiny")
    with pytest.raises(UCIDataError, match="does not exist"):
        check_dataset(tmp_path, "nothing")


@pytest.mark.skipif(not SHARED.is_dir(), reason="no local copy of the UCI splits")
@pytest.mark.parametrize("key", sorted(UCI_FOLDERS))
def test_standard_splits_in_range_and_disjoint(key):
    info = dataset_info(SHARED, UCI_FOLDERS[key])
    assert info["n_splits"] == (5 if key == "protein" else 20)
    assert info["n_hidden"] == (100 if key == "protein" else 50)
    for k in (0, info["n_splits"] - 1):
        split = load_split(SHARED, UCI_FOLDERS[key], k)
        idx = np.concatenate([split.train_index, split.test_index])
        assert idx.min() >= 0 and idx.max() < info["rows"]
        assert np.intersect1d(split.train_index, split.test_index).size == 0
        assert len(np.unique(idx)) == len(idx)
        assert 0.85 < len(split.train_index) / len(idx) < 0.95  # the 90/10 protocol


def test_download_from_a_mirror_url(tmp_path):
    write_dataset(tmp_path / "mirror")
    folder = download_dataset(tmp_path / "copy", "tiny", base_url=(tmp_path / "mirror").as_uri())
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (tmp_path / "mirror/tiny/data").iterdir())
    assert torch.equal(
        load_split(tmp_path / "copy", "tiny", 2).x_test, load_split(tmp_path / "mirror", "tiny", 2).x_test
    )
    with pytest.raises(UCIDataError, match="could not fetch.*n_splits.txt"):
        download_dataset(tmp_path / "copy", "absent", base_url=(tmp_path / "mirror").as_uri())


# ------------------------------------------------------------------ metrics
def test_mixture_nll_hand_computed():
    # two members at 0 and 2, sd 1; targets 1 (halfway) and 0
    means = np.array([[0.0, 0.0], [2.0, 2.0]])
    out = mixture_metrics(means, 1.0, np.array([1.0, 0.0]))
    phi = lambda z: math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)  # noqa: E731
    nll_1 = -math.log(phi(1.0))  # = 0.5 log(2 pi) + 0.5 = 1.41894
    nll_0 = -math.log(0.5 * (phi(0.0) + phi(2.0)))  # = -log(0.5 (0.398942 + 0.053991)) = 1.48516
    assert nll_1 == pytest.approx(1.4189385, abs=1e-6) and nll_0 == pytest.approx(1.4851577, abs=1e-6)
    assert out["nll"] == pytest.approx((nll_1 + nll_0) / 2, rel=1e-12)
    assert out["rmse"] == pytest.approx(math.sqrt((0.0 + 1.0) / 2))  # mixture mean 1


def test_mixture_nll_scale_and_far_tails():
    # one member: the Gaussian NLL; a change of units by c adds log c
    y = np.array([0.3, -1.2, 2.0])
    one = mixture_metrics(np.zeros((1, 3)), 0.5, y)["nll"]
    assert one == pytest.approx(np.mean(0.5 * (y / 0.5) ** 2 + math.log(0.5) + 0.5 * math.log(2 * math.pi)))
    assert mixture_metrics(np.zeros((1, 3)), 5.0, 10 * y)["nll"] == pytest.approx(one + math.log(10))
    far = mixture_metrics(np.array([[0.0], [1e3]]), 1e-3, np.array([0.0]))["nll"]  # no underflow to inf
    assert far == pytest.approx(math.log(2) + math.log(1e-3) + 0.5 * math.log(2 * math.pi))
    with pytest.raises(ValueError, match=r"\(S, T\)"):
        mixture_metrics(np.zeros((2, 4)), 1.0, y)


def test_pearce_predictive_by_hand():
    """Members 0 and 2 at one point, 1 and 1 at another, noise sd 1: means 1 and 1, unbiased
    member variances 2 and 0, so the predictive is N(1, 3) and N(1, 1)."""
    means = np.array([[0.0, 1.0], [2.0, 1.0]])
    y = np.array([2.0, 3.0])
    out = ensemble_gaussian_metrics(means, 1.0, y)
    nll_a = 0.5 * math.log(2 * math.pi * 3.0) + 0.5 * 1.0 / 3.0  # (2 - 1)^2 / 3
    nll_b = 0.5 * math.log(2 * math.pi * 1.0) + 0.5 * 4.0  # (3 - 1)^2 / 1
    assert out["nll"] == pytest.approx((nll_a + nll_b) / 2, rel=1e-12)
    assert out["rmse"] == pytest.approx(math.sqrt((1.0 + 4.0) / 2))
    with pytest.raises(ValueError, match="S >= 2"):
        ensemble_gaussian_metrics(np.zeros((1, 2)), 1.0, y)


def test_pearce_predictive_stays_of_order_one_where_the_mixture_explodes():
    """Pearce's sigma^2 = 1e-7 (energy, naval, yacht): members 0.1 apart leave a test point
    between them far in every component's tail (mixture NLL ~ 1e4) while the predictive
    with the members' spread as its variance scores it like any Gaussian."""
    means = np.array([[0.0], [0.1], [0.2], [0.3], [0.4]])
    y = np.array([0.25])
    sigma = math.sqrt(1e-7)
    mixture = mixture_metrics(means, sigma, y)["nll"]
    pearce = ensemble_gaussian_metrics(means, sigma, y)["nll"]
    assert mixture > 1e3
    var = 0.025 + 1e-7  # unbiased variance of 0, .1, .2, .3, .4
    assert pearce == pytest.approx(0.5 * math.log(2 * math.pi * var) + 0.5 * 0.05**2 / var, rel=1e-12)
    assert abs(pearce) < 2


# ------------------------------------------------------------------ prior
def test_layer_prior_follows_pearce():
    model = StackedModel(mlp(4, [10], 1))
    stds = layer_prior_stds(model, 8.0)
    var = {s.name: stds[s.start : s.stop].pow(2) for s in model.slots}
    assert torch.allclose(var["0.weight"], torch.full((40,), 2.0))  # b1 / D
    assert torch.allclose(var["0.bias"], torch.full((10,), 8.0))  # b1
    assert torch.allclose(var["2.weight"], torch.full((10,), 0.1))  # 1 / H
    assert torch.allclose(var["2.bias"], torch.full((1,), 0.1))
    # Pearce et al.'s network, no final bias: the same variances for the weights there are
    no_bias = StackedModel(mlp(4, [10], 1, output_bias=False))
    var = {s.name: layer_prior_stds(no_bias, 8.0)[s.start : s.stop].pow(2) for s in no_bias.slots}
    assert set(var) == {"0.weight", "0.bias", "2.weight"}
    assert torch.allclose(var["0.weight"], torch.full((40,), 2.0)) and torch.allclose(
        var["2.weight"], torch.full((10,), 0.1)
    )


def test_isotropic_uci_prior_equals_network_prior(tmp_path):
    write_dataset(tmp_path)
    split = load_split(tmp_path, "tiny", 0)
    ours = uci_posterior({"noise_std": 0.3, "prior_std": 0.7}, split, hidden=8)
    ref = NetworkPosterior(ours.model, "gaussian", num_train=30, prior_std=0.7, noise_std=0.3)
    w = torch.randn(4, ours.model.dim)
    assert torch.allclose(ours.log_prior(w), ref.log_prior(w))
    layered = uci_posterior({"noise_std": 0.3, "prior_bias_var": 8.0}, split, hidden=8)
    stds = layered.prior_std
    expect = (torch.distributions.Normal(0.0, stds).log_prob(w)).sum(-1)
    assert torch.allclose(layered.log_prior(w), expect, atol=1e-4)
    draws = layered.sample_prior(4000, torch.Generator().manual_seed(0))
    assert torch.allclose(draws.std(0), stds, rtol=0.1)


# ------------------------------------------------------------------ runner
def tiny_job(method: str, tmp_path: Path, **extra) -> dict:
    cfg = json.loads(json.dumps(CONFIG))
    cfg["scale"] = "quick"
    cfg["experiments"]["uci"]["datasets"]["boston"].update(batch_size=16)
    job = resolve_job(cfg, "uci", "boston", method, 42)
    job.update(steps=4, splits=2, uci_data=str(tmp_path), **extra)
    return job


@pytest.fixture
def boston_like(tmp_path, monkeypatch):
    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")  # a stand-in under a standard name: not the registry's
    write_dataset(tmp_path, name=UCI_FOLDERS["boston"])
    return tmp_path


@pytest.mark.parametrize("method", CONFIG["experiments"]["uci"]["methods"])
def test_every_configured_method_runs(boston_like, method):
    out = boston_like / "res" / method / "metrics.json"
    run_uci(tiny_job(method, boston_like), out, out.with_name("metrics.json.ckpt"))
    summary = json.loads(out.read_text())
    assert len(summary["rmse"]) == 2 and all(math.isfinite(v) for v in summary["rmse"] + summary["nll"])
    assert summary["rmse_mean"] == pytest.approx(np.mean(summary["rmse"]))
    assert summary["nll_se"] == pytest.approx(np.std(summary["nll"], ddof=1) / math.sqrt(2))
    assert not list(out.parent.glob("*.ckpt"))


def test_same_seed_same_result_and_splits_are_reused(boston_like):
    a, b = boston_like / "a" / "metrics.json", boston_like / "b" / "metrics.json"
    job = tiny_job("drle", boston_like)
    run_uci(job, a)
    run_uci(job, b)
    assert json.loads(a.read_text())["nll"] == json.loads(b.read_text())["nll"]
    # a finished split is reused by the same spec (a sentinel value survives) ...
    split0 = a.with_name("split0.json")
    saved = json.loads(split0.read_text())
    saved["metrics"]["nll"] = 123.0
    split0.write_text(json.dumps(saved))
    run_uci(job, a)
    assert json.loads(a.read_text())["nll"][0] == 123.0
    # ... and retrained when the spec changes
    run_uci({**job, "lr": 0.02}, a)
    assert json.loads(a.read_text())["nll"][0] != 123.0


def test_bad_job_fails_before_training(boston_like):
    with pytest.raises(ValueError, match="setting 'noise_std' is missing"):
        run_uci({**tiny_job("de", boston_like), "noise_std": None}, boston_like / "x.json")
    with pytest.raises(UCIDataError, match="does not exist"):
        run_uci({**tiny_job("de", boston_like), "uci_data": str(boston_like / "none")}, boston_like / "x.json")
    with pytest.raises(ValueError, match="unknown UCI dataset 'mnist'"):
        run_uci({**tiny_job("de", boston_like), "dataset": "mnist"}, boston_like / "x.json")


def test_registry_covers_every_standard_file():
    from repens.data.uci import UCI_DATASETS, required_files
    from repens.data.uci_checksums import UCI_SHA256

    assert set(UCI_SHA256) == set(UCI_DATASETS)
    for name, files in UCI_SHA256.items():
        n = 5 if name == "protein-tertiary-structure" else 20
        assert list(files) == required_files(n), name
        assert all(len(h) == 64 and int(h, 16) >= 0 for h in files.values())


def test_known_dataset_is_verified_unknown_is_not(tmp_path, monkeypatch):
    import hashlib

    from repens.data import uci as uci_mod
    from repens.data.uci_checksums import UCI_SHA256

    folder = write_dataset(tmp_path, "tiny", n_splits=2)
    assert check_dataset(tmp_path, "tiny") == 2  # not in the registry: not verified
    # a registry entry for it: its true hashes pass, a changed file is named
    hashes = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in folder.iterdir()}
    monkeypatch.setitem(UCI_SHA256, "tiny", hashes)
    assert check_dataset(tmp_path, "tiny") == 2
    target = folder / "index_test_1.txt"
    target.write_text(target.read_text() + "\n")  # still a valid index file, but not the registry's
    with pytest.raises(uci_mod.DataFileError, match=r"index_test_1\.txt: SHA-256 .* differs from the standard split"):
        load_split(tmp_path, "tiny", 0)
    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")  # the documented opt-out
    assert load_split(tmp_path, "tiny", 0).x_train.shape[1] == 3


@pytest.mark.skipif(not SHARED.is_dir(), reason="no local copy of the UCI splits")
def test_shared_copy_matches_the_registry(tmp_path):
    from repens.data.uci import UCI_DATASETS

    for name in UCI_DATASETS:
        check_dataset(SHARED, name)  # hashes every file
    # a copy with one file changed is refused, the message naming the file
    import shutil

    shutil.copytree(SHARED / "yacht", tmp_path / "yacht")
    data = tmp_path / "yacht" / "data" / "data.txt"
    data.write_bytes(data.read_bytes().replace(b"\n", b" \n", 1))
    with pytest.raises(DataFileError) as err:
        load_split(tmp_path, "yacht", 0)
    assert str(err.value).startswith(f"{data}: SHA-256") and "\n" not in str(err.value)


@pytest.mark.skipif(not SHARED.is_dir(), reason="no local copy of the UCI splits")
def test_the_registry_sizes_are_those_of_the_files():
    """The rows, features, splits and hidden units the registry declares (the memory
    estimates read them) are those of the standard distribution's files."""
    from repens.core import registry
    from repens.data.uci import dataset_info

    for name, folder in registry.uci_folders().items():
        declared = registry.dataset(name)
        info = dataset_info(SHARED, folder)
        split = load_split(SHARED, folder, 0)
        found = (info["rows"], split.x_train.shape[1], info["n_splits"], info["n_hidden"])
        assert found == (declared.rows, declared.features, declared.splits, declared.hidden), name
