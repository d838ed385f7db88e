"""Checkpoints and result files are verified when read, and a finished job survives a
shutdown of the workflow around it.

* A checkpoint carries the SHA-256 of its bytes; one that fails it, holds a non-finite
  tensor or an object other than tensors and plain containers is set aside with one log
  line and never resumed (nothing in it runs).
* A corrupt result file read by a table or figure command is one line naming the file.
* A finished ``train`` job leaves a final record; when Snakemake deletes its outputs
  (it took the job as incomplete) the rerun restores them byte for byte without training,
  and a rerun under other settings trains.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from repens import cli
from repens.core.atomic import CHECKSUM_TAG, save_npz_atomic, torch_save_atomic, write_json_atomic
from repens.core.jobkey import final_key, final_record_path, load_keyed_json
from repens.experiments import RUNNERS
from repens.models.posteriors import TargetPosterior
from repens.models.targets import Gaussian
from repens.pipeline.config import resolve_job
from repens.training.hmc import HMCSettings, sample_hmc
from repens.training.train import TrainSettings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from rule_hooks import crash_at, fit, rule_for  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


# ----------------------------------------------------------------------------- helpers
def setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    start = torch.randn(30, 2, generator=g, dtype=torch.float64)
    return start, g


SETTINGS = TrainSettings(steps=40, lr=0.05, checkpoint_seconds=0.0)
LANGEVIN = rule_for("langevin", TargetPosterior(Gaussian()), SETTINGS, temperature=1.0)


def killed_run(ckpt: Path, monkeypatch=None):
    """A run killed at step 25 leaves a checkpoint at step 24; returns the uninterrupted
    run's particles. With ``monkeypatch``, the checkpoint is written by a plain
    ``torch.save``, as before checkpoints carried a checksum."""
    start, g = setup()
    clean = fit(LANGEVIN, start, SETTINGS, g).params
    if monkeypatch is not None:
        import repens.training.train as train_mod

        monkeypatch.setattr(train_mod, "torch_save_atomic", lambda obj, path: torch.save(obj, path))
    start, g = setup()
    with pytest.raises(KeyboardInterrupt):  # a kill between two checkpoints
        fit(crash_at(LANGEVIN, 25), start, SETTINGS, g, checkpoint=ckpt, checkpoint_key="job")
    if monkeypatch is not None:
        monkeypatch.undo()
    assert torch.load(ckpt, weights_only=True)["step"] == 24
    return clean


def rerun(ckpt: Path, caplog):
    start, g = setup()  # as the clean run (a resumed run takes the generator's state from the checkpoint)
    caplog.clear()
    with caplog.at_level("INFO", logger="repens.train"):
        return fit(LANGEVIN, start, SETTINGS, g, checkpoint=ckpt, checkpoint_key="job").params


def warnings_about(caplog, path: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and str(path) in r.getMessage()]


def flip_exponent_bit(path: Path, values: torch.Tensor) -> float:
    """Flip the top exponent bit of the first entry of ``values`` (float64, 0 < |x| < 1)
    where the file stores it; returns the value it then holds (about 1e307, finite)."""
    data = bytearray(path.read_bytes())
    raw = values.detach().contiguous().numpy().tobytes()
    at = bytes(data).find(raw)
    assert at >= 0, "tensor bytes not found in the file"
    i = int(np.flatnonzero((values.abs() < 1).flatten().numpy() & (values.flatten() != 0).numpy())[0])
    data[at + 8 * i + 7] ^= 0x40  # little-endian float64: byte 7 holds the sign and the top exponent bits
    path.write_bytes(bytes(data))
    flipped = np.frombuffer(bytes(data[at + 8 * i : at + 8 * i + 8]), dtype=np.float64)[0]
    assert np.isfinite(flipped) and abs(flipped) > 1e300
    return float(flipped)


# ----------------------------------------------------------------------------- checkpoints
def test_checkpoint_carries_its_sha256_and_stays_a_torch_archive(tmp_path):
    path = tmp_path / "c.ckpt"
    torch_save_atomic({"key": "k", "x": torch.arange(4.0)}, path)
    assert path.read_bytes()[-(len(CHECKSUM_TAG) + 64) :].startswith(CHECKSUM_TAG)
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.arange(4.0))


def test_bit_flip_in_a_checkpoint_is_set_aside_not_resumed(tmp_path, caplog):
    """One exponent bit flipped in the particles: a finite 1e307 that only the checksum sees."""
    ckpt = tmp_path / "run.ckpt"
    clean = killed_run(ckpt)
    flip_exponent_bit(ckpt, torch.load(ckpt, weights_only=True)["params"])
    out = rerun(ckpt, caplog)
    assert "resumed" not in caplog.text
    (line,) = warnings_about(caplog, ckpt)
    assert "fails its checksum" in line and "set aside as run.ckpt.stale, starting from step 0" in line
    assert (tmp_path / "run.ckpt.stale").exists() and torch.equal(out, clean)


def test_bit_flip_in_a_checkpoint_without_checksum_is_found_by_its_crc(tmp_path, caplog, monkeypatch):
    """A checkpoint written before checkpoints carried a checksum still resumes when intact,
    and its zip CRC-32s find a flipped bit."""
    ckpt = tmp_path / "run.ckpt"
    clean = killed_run(ckpt, monkeypatch)
    assert CHECKSUM_TAG not in ckpt.read_bytes()[-200:]
    intact = ckpt.read_bytes()
    assert torch.equal(rerun(ckpt, caplog), clean) and "resumed from" in caplog.text

    ckpt.write_bytes(intact)
    flip_exponent_bit(ckpt, torch.load(ckpt, weights_only=True)["params"])
    out = rerun(ckpt, caplog)
    (line,) = warnings_about(caplog, ckpt)
    assert "resumed" not in caplog.text and "fails its checksum" in line and "CRC-32" in line
    assert torch.equal(out, clean)


def test_non_finite_tensor_in_a_checkpoint_is_set_aside(tmp_path, caplog):
    ckpt = tmp_path / "run.ckpt"
    clean = killed_run(ckpt)
    saved = torch.load(ckpt, weights_only=True)
    saved["params"][3, 1] = float("inf")
    torch_save_atomic(saved, ckpt)  # a valid checksum: written so
    out = rerun(ckpt, caplog)
    (line,) = warnings_about(caplog, ckpt)
    assert "holds non-finite values in params" in line and "resumed" not in caplog.text
    assert torch.equal(out, clean)


class Foreign:
    """A class no checkpoint holds."""


class RunsCode:
    """Unpickling this would call os.mkdir(marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.mark.parametrize("kind", ["instance", "reduce"])
def test_checkpoint_with_a_foreign_object_is_refused_and_nothing_runs(tmp_path, caplog, kind):
    ckpt = tmp_path / "run.ckpt"
    clean = killed_run(ckpt)
    marker = tmp_path / "code-ran"
    saved = torch.load(ckpt, weights_only=True)
    saved["note"] = Foreign() if kind == "instance" else RunsCode(marker)
    torch_save_atomic(saved, ckpt)  # a valid checksum: only the load can refuse it
    out = rerun(ckpt, caplog)
    assert not marker.exists(), "unpickling the checkpoint ran code"
    (line,) = warnings_about(caplog, ckpt)
    assert "holds an object a checkpoint never holds" in line and "set aside as run.ckpt.stale" in line
    assert ("Foreign" if kind == "instance" else "mkdir") in line
    assert "resumed" not in caplog.text and torch.equal(out, clean)


def test_bit_flip_in_an_hmc_checkpoint_is_set_aside(tmp_path, caplog):
    def gaussian(q):
        return -0.5 * (q**2).sum(1), -q

    init = torch.randn(2, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 0.4
    s = HMCSettings(chains=2, warmup=30, samples=10, rhat_max=1e9, ess_min=0.0)
    full, _ = sample_hmc(gaussian, init, s, seed=5)
    calls = {"n": 0}

    def dying(q):
        calls["n"] += 1
        if calls["n"] == 200:
            raise KeyboardInterrupt
        return gaussian(q)

    ckpt = tmp_path / "state.pt"
    with pytest.raises(KeyboardInterrupt):
        sample_hmc(dying, init, s, seed=5, checkpoint=ckpt, checkpoint_key="k", checkpoint_seconds=0.0)
    flip_exponent_bit(ckpt, torch.load(ckpt, weights_only=True)["state"]["q"])
    with caplog.at_level("INFO"):
        draws, _ = sample_hmc(gaussian, init, s, seed=5, checkpoint=ckpt, checkpoint_key="k")
    (line,) = warnings_about(caplog, ckpt)
    assert "fails its checksum" in line and "sampling from the start" in line and "resumed" not in caplog.text
    assert torch.equal(draws, full)


def test_unreadable_split_result_is_one_line_naming_it(tmp_path, caplog):
    path = tmp_path / "split0.json"
    path.write_text('{"key": "k", "metr')
    assert (
        load_keyed_json(path, "k", logging.getLogger("t"), then="training split 0 again", what="split result") is None
    )
    (line,) = warnings_about(caplog, path)
    assert "is unreadable" in line and "set aside as split0.json.stale, training split 0 again" in line


# ----------------------------------------------------------------------------- result files
def _one_error_line(capsys, path: Path) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and str(path) in err[0], err[0]
    return err[0]


def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"not a result file\n")
    elif how == "flipped":  # a bit in the stored array data: its CRC-32 no longer matches
        at = data.find(np.full(40, 0.25).tobytes())
        path.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])


@pytest.mark.parametrize("how", ["truncated", "garbage", "flipped"])
@pytest.mark.parametrize("command", ["synthetic-table", "toy-table"])
def test_corrupt_npz_result_is_one_line_naming_it(tmp_path, capsys, how, command):
    path = tmp_path / "gaussian" / "svgd" / "seed42" / "particles.npz"
    save_npz_atomic(path, particles=np.full((20, 2), 0.25), job=np.array(json.dumps({"dataset": "gaussian"})))
    _corrupt(path, how)
    out = [f"--out-{k}" for k in ("csv", "tex")]
    args = {
        "synthetic-table": [command, out[0], str(tmp_path / "t.csv"), out[1], str(tmp_path / "t.tex"), str(path)],
        "toy-table": [
            command,
            out[0],
            str(tmp_path / "t.csv"),
            out[1],
            str(tmp_path / "t.tex"),
            "--regression-hmc",
            str(path),
            "--regression",
            str(path),
        ],
    }[command]
    assert cli.main(args) == 2
    line = _one_error_line(capsys, path)
    assert "not a readable .npz" in line


@pytest.mark.parametrize("how", ["truncated", "list", "no-metrics", "bytes"])
@pytest.mark.parametrize("command", ["image-table", "uci-table"])
def test_corrupt_metrics_json_is_one_line_naming_it(tmp_path, capsys, how, command):
    path = tmp_path / "metrics.json"
    job = {"dataset": "fashionmnist", "method": "de", "seed": 38, "scale": "quick"}
    record = {"job": job, "metrics": {"accuracy": 0.9}, "splits": [{"split": 0, "rmse": 1.0, "nll": 1.0}]}
    write_json_atomic(path, record, indent=2)
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:40])
    elif how == "list":
        path.write_text("[1, 2]")
    elif how == "no-metrics":
        path.write_text(json.dumps({"job": "fashionmnist"}))
    else:
        path.write_bytes(b"\xff\xfe\x00garbage")
    o = tmp_path / "o"
    if command == "image-table":
        args = [
            command,
            "--reference",
            str(ROOT / "workflow/resources/table1_paper.csv"),
            "--datasets",
            "fashionmnist",
            "--methods",
            "de",
            "--out-tex",
            f"{o}.tex",
            "--out-png",
            f"{o}.png",
            "--out-csv",
            f"{o}.csv",
            "--out-vs-paper",
            f"{o}v.csv",
            str(path),
        ]
    else:
        args = [
            command,
            "--datasets",
            "boston",
            "--methods",
            "de",
            "--seeds",
            str(ROOT / "workflow/resources/table2_seeds.csv"),
            "--out-tex",
            f"{o}.tex",
            "--out-csv",
            f"{o}.csv",
            "--out-seeds",
            f"{o}s.csv",
            str(path),
        ]
    assert cli.main(args) == 2
    _one_error_line(capsys, path)


# ----------------------------------------------------------------------------- finished jobs survive a shutdown
def synthetic_spec(**extra):
    job = resolve_job(dict(CONFIG, scale="quick"), "synthetic", "gaussian", "sge-wgd", 42)
    job.update(particles=20, steps=40, log_every=10, **extra)
    return job


def image_spec(**extra):
    job = resolve_job(CONFIG, "image", "fashionmnist", "de", 38)
    job.update(particles=3, steps=4, hidden=[8], batch_size=16, log_every=1, val_fraction=0.25, **extra)
    return job


def uci_spec(root: Path, monkeypatch):
    """A tiny UCI job on a stand-in of Boston housing under ``root`` (two splits, 4 steps)."""
    from repens.data.uci import UCI_FOLDERS
    from test_uci import tiny_job, write_dataset

    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")  # a stand-in under a standard name: not the registry's
    write_dataset(root, name=UCI_FOLDERS["boston"])
    return lambda **extra: tiny_job("de", root, **extra)


@pytest.fixture()
def tiny_sets(tmp_path):
    from experiments.test_image import _write_set

    _write_set(tmp_path / "in.npz", 96, 40)
    _write_set(tmp_path / "ood.npz", 8, 30, seed=1)
    return {"train": str(tmp_path / "in.npz"), "ood": str(tmp_path / "ood.npz")}


def _run(spec, out: Path, log: Path, sets=None) -> int:
    extra = (
        []
        if sets is None
        else ["--input", f"train={sets['train']}", "--input", f"ood={sets['ood']}", "--device", "cpu"]
    )
    return cli.main(["--log", str(log), "train", "--spec", json.dumps(spec), *extra, "--out", str(out)])


def _log_of(log: Path) -> str:
    return log.read_text() if log.exists() else ""


@pytest.mark.parametrize("experiment", ["synthetic", "image", "uci"])
def test_finished_job_is_restored_not_retrained_after_its_outputs_are_deleted(
    tmp_path, monkeypatch, experiment, tiny_sets
):
    sets = tiny_sets if experiment == "image" else None
    spec, name = {
        "synthetic": (synthetic_spec, "particles.npz"),
        "image": (image_spec, "metrics.json"),
        "uci": (uci_spec(tmp_path / "uci", monkeypatch), "metrics.json"),
    }[experiment]
    out = tmp_path / "results" / name
    outputs = [out, out.with_name("predictions.npz")] if experiment == "image" else [out]
    record = final_record_path(out.with_name(out.name + ".ckpt"))

    assert _run(spec(), out, tmp_path / "first.log", sets) == 0
    written = {p: p.read_bytes() for p in outputs}
    assert record.exists() and not out.with_name(out.name + ".ckpt").exists()
    for p in outputs:  # Snakemake took the job as incomplete: it deletes the outputs, then runs it again
        p.unlink()

    def no_training(*args, **kwargs):
        raise AssertionError("the job trained again")

    real = RUNNERS[experiment]
    monkeypatch.setitem(RUNNERS, experiment, no_training)
    t0 = time.perf_counter()
    assert _run(spec(), out, tmp_path / "second.log", sets) == 0
    seconds = time.perf_counter() - t0
    assert {p: p.read_bytes() for p in outputs} == written
    second = _log_of(tmp_path / "second.log")
    (line,) = [ln for ln in second.splitlines() if "from the final record" in ln]
    assert " restored " in line and all(str(p) in line for p in outputs) and " step " not in second
    assert seconds < 10, f"restoring took {seconds:.1f} s"

    # another learning rate: no restore; the record is set aside in one line and the job trains
    monkeypatch.setitem(RUNNERS, experiment, real)
    for p in outputs:
        p.unlink()
    other = spec(lr=spec()["lr"] / 2)
    assert _run(other, out, tmp_path / "third.log", sets) == 0
    third = _log_of(tmp_path / "third.log")
    (line,) = [ln for ln in third.splitlines() if "final record" in ln and "set aside" in ln]
    assert "made under other settings" in line and "from the final record" not in third
    assert f"step {other['steps']}/{other['steps']}" in third
    assert out.read_bytes() != written[out] and record.exists() and record.with_name(record.name + ".stale").exists()


def _retrained_without_the_record(out: Path, tmp_path: Path, first: np.ndarray) -> str:
    """The synthetic job run again with its output gone: its final record set aside (the
    log line saying so is returned), the job trained again to the first run's particles."""
    out.unlink()
    assert _run(synthetic_spec(), out, tmp_path / "second.log") == 0
    second = _log_of(tmp_path / "second.log")
    (line,) = [ln for ln in second.splitlines() if "final record" in ln and "set aside" in ln]
    assert "from the final record" not in second and "step 40/40" in second
    np.testing.assert_array_equal(np.load(out)["particles"], first)
    return line


def test_damaged_final_record_is_set_aside_and_the_job_trains(tmp_path):
    out = tmp_path / "results" / "particles.npz"
    assert _run(synthetic_spec(), out, tmp_path / "first.log") == 0
    first = np.load(out)["particles"]
    record = final_record_path(out.with_name(out.name + ".ckpt"))
    data = bytearray(record.read_bytes())
    data[-10] ^= 0x01
    record.write_bytes(bytes(data))
    line = _retrained_without_the_record(out, tmp_path, first)
    assert "damaged" in line or "SHA-256" in line


def test_a_forged_final_record_of_another_spec_is_set_aside_and_the_job_trains(tmp_path):
    """A record whose key is this job's but whose output is another spec's (the output
    replaced, its SHA-256 recomputed) is not restored."""
    from repens.core.jobkey import FINAL_MAGIC, write_final_record

    out = tmp_path / "results" / "particles.npz"
    assert _run(synthetic_spec(), out, tmp_path / "first.log") == 0
    first = np.load(out)["particles"]
    record = final_record_path(out.with_name(out.name + ".ckpt"))
    data = record.read_bytes()
    key = json.loads(data[len(FINAL_MAGIC) : data.index(b"\n", len(FINAL_MAGIC))])["key"]
    other = tmp_path / "other" / "particles.npz"
    assert _run({**synthetic_spec(), "steps": 20}, other, tmp_path / "other.log") == 0
    out.write_bytes(other.read_bytes())
    write_final_record(record, key, [out])  # this job's key around the other job's output
    line = _retrained_without_the_record(out, tmp_path, first)
    assert "not this job's result" in line and "steps 20, not 40" in line


def test_final_key_follows_the_input_data(tmp_path):
    data = tmp_path / "train.npz"
    data.write_bytes(b"one")
    spec = {"experiment": "image", "lr": 0.1}
    key = final_key(spec, {"inputs": {"train": str(data)}, "device": "cpu"})
    assert key == final_key({**spec, "log_every": 7}, {"inputs": {"train": str(data)}, "device": "cpu"})
    assert key != final_key({**spec, "lr": 0.2}, {"inputs": {"train": str(data)}, "device": "cpu"})
    data.write_bytes(b"two")
    assert key != final_key(spec, {"inputs": {"train": str(data)}, "device": "cpu"})

    # a UCI job: its dataset folder under uci_data (a runtime field: where, not what)
    for root in ("a", "b"):
        (tmp_path / root / "yacht" / "data").mkdir(parents=True)
        (tmp_path / root / "yacht" / "data" / "data.txt").write_text("0 1\n")
    uci = {"experiment": "uci", "dataset": "yacht", "lr": 0.1}
    key = final_key({**uci, "uci_data": str(tmp_path / "a")}, {})
    assert key == final_key({**uci, "uci_data": str(tmp_path / "b")}, {})
    (tmp_path / "b" / "yacht" / "data" / "data.txt").write_text("0 2\n")
    assert key != final_key({**uci, "uci_data": str(tmp_path / "b")}, {})
