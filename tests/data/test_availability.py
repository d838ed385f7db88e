"""repens.data.availability and repens.pipeline.cost: what the workflow checks before any job."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml

from repens.data import availability as av
from repens.data.images import IMAGE_DATASETS
from repens.jobs.job import ImageJob, SpecError
from repens.pipeline.config import resolve_job
from repens.pipeline.cost import image_cost_notice, image_cpu_seconds


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")


def test_lacking_image_data_places(tmp_path):
    root, mirror = tmp_path / "root", tmp_path / "mirror"
    files = IMAGE_DATASETS["fashionmnist"].files
    never = lambda url: False  # noqa: E731
    lacking = av.lacking_image_data(["fashionmnist"], root, None, True, probe=never)
    assert [m.path for m in lacking] == [root / f.folder / f.filename for f in files]
    # downloadable: nothing lacks; but not when downloads are off
    assert av.lacking_image_data(["fashionmnist"], root, None, True, probe=lambda url: True) == []
    assert len(av.lacking_image_data(["fashionmnist"], root, None, False, probe=lambda url: True)) == 4
    # archives in the mirror, extracted files under the root, or the prepared .npz
    for f in files[:2]:
        _touch(mirror / f.folder / f.filename)
    for f in files[2:]:
        for rel in f.extracted:
            _touch(root / rel)
    assert av.lacking_image_data(["fashionmnist"], root, mirror, False) == []
    assert len(av.lacking_image_data(["fashionmnist"], root, None, False)) == 2
    _touch(root / "mnist.npz")
    assert av.lacking_image_data(["mnist"], root, None, False) == []


def test_lacking_message_lists_files_and_commands(tmp_path):
    lacking = av.lacking_image_data(["svhn"], tmp_path, None, False)
    text = av.lacking_message(lacking, "snakemake -c2 results/table1.tex", "image_data_mirror", "no network")
    assert "data not available for svhn (no network); nothing was run" in text
    assert f"curl -fL --create-dirs -o {tmp_path}/test_32x32.mat http://ufldl.stanford.edu/" in text
    assert "snakemake -c2 results/table1.tex --config image_data_mirror=/path/to/copy" in text


def test_reachable_offline_and_closed_port(monkeypatch):
    monkeypatch.setenv(av.OFFLINE_ENV, "1")
    assert not av.reachable("http://127.0.0.1:1/x")
    monkeypatch.setenv(av.OFFLINE_ENV, "0")
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    assert not av.reachable(f"http://127.0.0.1:{port}/file", timeout=2.0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert av.reachable(f"http://127.0.0.1:{server.getsockname()[1]}/file", timeout=2.0)
    assert time.monotonic() - start < 5


def _image_spec(dataset: str, method: str, scale: str, **changes) -> dict:
    """A planned train_image job's spec (as preflight.smk reads it), with ``changes``."""
    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())
    config["scale"] = scale
    return {**resolve_job(config, "image", dataset, method, 0), **changes}


def test_cost_notice():
    steps = {"fashionmnist": {"paper": 0.2, "quick": 0.05}, "cifar10": {"paper": 60.0}}
    quick = [_image_spec("fashionmnist", "de", "quick", steps=600)] * 65
    assert image_cost_notice(quick, steps, 2, "quick") is None
    paper = [_image_spec("cifar10", "de", "paper", steps=50000)] * 2 + [
        _image_spec(
            "fashionmnist",
            "hyper-de",
            "paper",
            steps=50000,
            particles=50,
            l2_search=True,
            search_trials=20,
            search_steps=10000,
        )
    ]
    text = image_cost_notice(paper, steps, 2, "paper")
    assert "3 Table 1 training jobs at scale=paper" in text
    # hyper-DE: 50,000 steps of 50 members, then the search: 10,000 steps of one stack of
    # 20 candidates, 4,000 steps of 50 members' cost: 54,000 x 0.2 s = 3.0 h
    assert "cifar10: 2 jobs, about 69.4 days of CPU" in text and "fashionmnist: 1 jobs, about 3.0 h" in text
    assert image_cost_notice([ImageJob.from_spec(s) for s in paper], steps, 2, "paper") == text  # jobs as specs


def test_cost_of_a_job_reads_its_settings():
    steps = {"fashionmnist": {"paper": 0.5}}
    spec = _image_spec(
        "fashionmnist", "hyper-de", "paper", steps=100, particles=10, l2_search=True, search_trials=4, search_top=2
    )
    spec.pop("search_steps", None)  # unset: the search trains the job's steps
    assert image_cpu_seconds(spec, steps) == 0.5 * (100 + 100 * 4 / 10)
    assert image_cpu_seconds({**spec, "scale": "quick"}, steps) != image_cpu_seconds(spec, steps)  # NaN: unmeasured
    with pytest.raises(SpecError, match="unknown setting 'stepz'"):
        image_cost_notice([{**spec, "stepz": 1}], steps, 2, "paper")
