"""repens.pipeline.budget and `python -m repens budget`: Table 1's device-hours before a run.

The arithmetic runs on an injected timing; the step timer runs the real training loop on
tiny stacks on the CPU (no figure of its speed is asserted: that is the benchmarks')."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from repens.cli import main
from repens.core.variants import dataset_methods
from repens.pipeline import budget as budget_mod
from repens.pipeline.budget import BudgetError, Stage, budget, job_stages, load_config, plan, read_timings, time_stage
from repens.pipeline.config import resolve_job

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
IMAGE = CONFIG["experiments"]["image"]


def paper(config=CONFIG):
    return {**copy.deepcopy(config), "scale": "paper"}


def fake_seconds(dataset, method, stage):
    """A made-up step time, different for every (dataset, method, stage)."""
    return (1 + len(dataset)) * 0.01 + len(method) * 0.001 + (0.5 if stage.name == "search" else 0.0)


def test_hours_are_seeds_times_steps_times_seconds_per_step():
    cells = plan(paper())
    rows = budget(cells, fake_seconds)
    seeds = len(CONFIG["seeds"])
    assert [(r.dataset, r.method) for r in rows] == [(d, m) for d in IMAGE["report_datasets"] for m in IMAGE["methods"]]
    total = 0.0
    for r in rows:
        ds = IMAGE["datasets"][r.dataset]
        train = seeds * ds["steps"] * fake_seconds(r.dataset, r.method, Stage("train", {}, 0))
        search = 0.0
        if CONFIG["methods"][r.method].get("l2_search"):  # hyper-DE: its search stack first
            search = seeds * ds["search_steps"] * fake_seconds(r.dataset, r.method, Stage("search", {}, 0))
        assert r.jobs == seeds
        assert r.hours == pytest.approx((train + search) / 3600, rel=1e-12), (r.dataset, r.method)
        total += (train + search) / 3600
    assert sum(r.hours for r in rows) == pytest.approx(total)
    assert any("search" in r.steps for r in rows)


def test_hyper_de_search_is_one_stack_of_search_trials_members():
    spec = resolve_job(paper(), "image", "fashionmnist", "hyper-de", 38)
    search, train = job_stages(spec)
    assert (search.name, search.members, search.steps) == (
        "search",
        IMAGE["settings"]["search_trials"],
        IMAGE["datasets"]["fashionmnist"]["search_steps"],
    )
    assert search.spec["rule"] == "ensemble" and search.spec["space"] == "weight"
    assert (train.name, train.members, train.steps) == ("train", 50, 50000)
    # no search_steps: the search runs `steps`
    spec = {**spec, "search_steps": None, "steps": 123}
    assert [(s.name, s.steps) for s in job_stages(spec)] == [("search", 123), ("train", 123)]
    assert [s.name for s in job_stages(resolve_job(paper(), "image", "cifar10", "svgd", 38))] == ["train"]


def tiny_image_sets(folder: Path) -> dict[str, str]:
    """A 96-image training set (8 x 8 grey) and a 30-image OOD set, as prepare-images writes them."""
    rng = np.random.default_rng(0)
    files = {}
    for name, n_train, n_test in (("train", 96, 40), ("ood", 8, 30)):
        arrays = {}
        for split, n in (("train", n_train), ("test", n_test)):
            arrays[f"x_{split}"] = rng.integers(0, 256, size=(n, 1, 8, 8), dtype=np.uint8)
            arrays[f"y_{split}"] = rng.integers(0, 10, size=n).astype(np.int64)
        files[name] = str(folder / f"{name}.npz")
        np.savez(files[name], **arrays)
    return files


@pytest.mark.parametrize("method", ["hyper-de", "svgd"])
def test_stages_are_what_the_image_runner_trains(method, tmp_path, monkeypatch):
    """The planner's stages against the stacks run_image hands the training loop."""
    import repens.experiments.image as image

    trained = []
    real = image.fit_particles

    def recording(job, posterior, init, settings, *args, **kwargs):
        trained.append((job.rule, job.space, init.shape[0], settings.steps))
        return real(job, posterior, init, settings, *args, **kwargs)

    monkeypatch.setattr(image, "fit_particles", recording)
    spec = resolve_job(CONFIG, "image", "fashionmnist", method, 38)
    spec.update(
        particles=3,
        steps=3,
        hidden=[8],
        batch_size=16,
        search_trials=4,
        search_steps=2,
        search_top=2,
        log_every=1,
        val_fraction=0.25,
    )
    out = tmp_path / "metrics.json"
    image.run_image(spec, out, None, inputs=tiny_image_sets(tmp_path), device="cpu")
    assert trained == [(s.spec["rule"], s.spec["space"], s.members, s.steps) for s in job_stages(spec)]


def _config_file(tmp_path, config):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _timings_file(tmp_path, cells, seconds=fake_seconds):
    rows = [
        {
            "dataset": c.dataset,
            "method": c.method,
            "stage": s.name,
            "seconds_per_step": seconds(c.dataset, c.method, s),
            "particles": s.members,
            "batch_size": s.spec["batch_size"],
        }
        for c in cells
        for s in c.stages[0]
    ]
    path = tmp_path / "timings.json"
    path.write_text(json.dumps({"device": "Fake GPU 80GB", "rows": rows}))
    return path


def _run(capsys, *argv):
    rc = main(["budget", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_command_lists_every_dataset_and_method_of_the_config(tmp_path, capsys):
    """A method, a dataset of the table and a seed added to config.yaml show up."""
    config = paper()
    config["methods"]["de-wide"] = {"rule": "ensemble", "label": "DE (wide)"}
    config["experiments"]["image"]["methods"].append("de-wide")
    config["experiments"]["image"]["seeds"] = [1, 2, 3, 4, 5, 6, 7]
    config["experiments"]["image"]["datasets"]["mnist"] = {
        **config["experiments"]["image"]["datasets"]["fashionmnist"],
        "ood": "fashionmnist",
        "steps": 1000,
    }
    config["experiments"]["image"]["report_datasets"].append("mnist")
    path = _config_file(tmp_path, config)
    cells = plan(load_config(path))
    timings = _timings_file(tmp_path, cells)
    rc, out, err = _run(capsys, "--configfile", str(path), "--timings", str(timings))
    assert rc == 0, err
    assert "device: Fake GPU 80GB" in out and "GPU-hours" in out
    expanded = load_config(path)  # a variant's methods (de-code-protocol) run on its data sets only
    datasets = ("fashionmnist", "cifar10", "mnist")
    methods = {d: dataset_methods(expanded, "image", d) for d in datasets}
    assert "de-wide" in methods["mnist"] and "de-code-protocol" in methods["fashionmnist"]
    assert "de-code-protocol" not in methods["mnist"]
    listed = re.findall(r"^(\w+)\s+([\w-]+)\s+(\d+)\s+[\d,]+\s", out, re.M)
    assert [(d, m) for d, m, _ in listed] == [(d, m) for d in datasets for m in methods[d]]
    assert {jobs for _, _, jobs in listed} == {"7"}
    total = sum(r.hours for r in budget(cells, fake_seconds))
    assert f"total: {sum(map(len, methods.values())) * 7} jobs, {total:,.0f} GPU-hours" in out
    per_dataset = re.findall(r"^(\w+)\s+\(all\)\s+(\d+)\s+([\d.,]+)$", out, re.M)
    assert [(d, int(n)) for d, n, _ in per_dataset] == [(d, 7 * len(methods[d])) for d in datasets]
    mnist_de = next(r for r in budget(cells, fake_seconds) if (r.dataset, r.method) == ("mnist", "de"))
    assert mnist_de.hours == pytest.approx(7 * 1000 * fake_seconds("mnist", "de", Stage("train", {}, 0)) / 3600)


def test_quick_scale_costs_the_quick_table(tmp_path, capsys):
    path = _config_file(tmp_path, CONFIG)
    cells = plan(load_config(path))
    assert {c.dataset for c in cells} == set(IMAGE["quick"]["report_datasets"])
    rc, out, err = _run(capsys, "--configfile", str(path), "--timings", str(_timings_file(tmp_path, cells)))
    assert rc == 0, err
    assert "scale=quick" in out and "cifar10" not in out


def _one_line_error(capsys, *argv):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_bad_input_is_one_line_naming_the_file_and_key(tmp_path, capsys):
    good = _config_file(tmp_path, paper())
    timings = _timings_file(tmp_path, plan(load_config(good)))
    # a config mistake: the file and the key
    bad = paper()
    bad["experiments"]["image"]["methods"].append("de-typo")
    (tmp_path / "bad").mkdir()
    line = _one_line_error(capsys, "--configfile", str(_config_file(tmp_path / "bad", bad)), "--timings", str(timings))
    index = len(IMAGE["methods"])
    assert f"bad/config.yaml: config key experiments.image.methods[{index}]: unknown method 'de-typo'" in line, line
    bad = paper()
    bad["experiments"]["image"]["datasets"]["cifar10"]["particles"] = "many"
    line = _one_line_error(capsys, "--configfile", str(_config_file(tmp_path / "bad", bad)), "--timings", str(timings))
    assert "config key experiments.image.datasets.cifar10.particles" in line, line
    line = _one_line_error(capsys, "--configfile", str(tmp_path / "nope.yaml"))
    assert "nope.yaml: cannot read the config" in line, line
    # the timings file: an entry it lacks, one timed on another stack, not JSON
    rows = json.loads(timings.read_text())
    rows["rows"] = [r for r in rows["rows"] if not (r["method"] == "hyper-de" and r["stage"] == "search")]
    timings.write_text(json.dumps(rows))
    line = _one_line_error(capsys, "--configfile", str(good), "--timings", str(timings))
    assert f"{timings}: no step time for fashionmnist/hyper-de (L2 search stack): 20 members" in line, line
    rows["rows"][0]["particles"] = 7
    timings.write_text(json.dumps(rows))
    line = _one_line_error(capsys, "--configfile", str(good), "--timings", str(timings))
    assert f"{timings}: the fashionmnist/de step was timed with particles 7, the config's job has 50" in line, line
    timings.write_text("{not json")
    assert f"{timings}: not JSON" in _one_line_error(capsys, "--configfile", str(good), "--timings", str(timings))
    timings.write_text(json.dumps([{"dataset": "cifar10", "method": "de", "seconds_per_step": -1}]))
    line = _one_line_error(capsys, "--configfile", str(good), "--timings", str(timings))
    assert "row 0 (cifar10/de): seconds_per_step -1 is not a positive number" in line, line
    # options
    line = _one_line_error(capsys, "--configfile", str(good), "--datasets", "svhn", "--timings", str(timings))
    assert "--datasets: 'svhn' is not one of experiments.image.datasets (fashionmnist, cifar10)" in line, line


def test_reads_bench_image_json(tmp_path):
    """benchmarks/bench_image.py --json rows: `config` is the dataset, loop rows ignored."""
    rows = [
        {
            "config": "cifar10",
            "method": "de",
            "mode": "batched",
            "seconds_per_step": 0.2,
            "device_name": "cpu",
            "particles": 20,
            "batch_size": 128,
        },
        {"config": "cifar10", "method": "de", "mode": "loop", "seconds_per_step": 9.0, "device_name": "cpu"},
    ]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rows))
    timing, device = read_timings(path)
    (stage,) = job_stages(resolve_job(paper(), "image", "cifar10", "de", 38))
    assert timing("cifar10", "de", stage) == 0.2 and device.startswith("cpu")
    with pytest.raises(BudgetError, match="no step time for cifar10/svgd"):
        timing("cifar10", "svgd", stage)


def _tiny_stage(dataset="fashionmnist", method="de", **extra):
    spec = resolve_job(paper(), "image", dataset, method, 38)
    spec.update(particles=3, batch_size=8, **extra)
    if spec["model"] == "mlp":
        spec["hidden"] = [8]
    else:
        spec.update(depth=8, width=2)
    return job_stages(spec)


@pytest.mark.parametrize(
    "dataset,method",
    [("fashionmnist", "de"), ("fashionmnist", "sge-fwgd"), ("fashionmnist", "drle"), ("cifar10", "svgd")],
)
def test_timer_runs_the_training_step_on_cpu(dataset, method):
    (stage,) = _tiny_stage(dataset, method)
    seconds, steps = time_stage(stage, "cpu", steps=2)
    assert steps == 2 and math.isfinite(seconds) and seconds > 0
    seconds, steps = time_stage(stage, "cpu", min_seconds=0.0)  # default: at least two steps
    assert steps == 2 and seconds > 0


def test_timer_times_the_search_stack():
    search, train = _tiny_stage("fashionmnist", "hyper-de", search_trials=5)
    run = budget_mod.StageRun(search, "cpu")
    assert run.init.shape[0] == 5 and run.posterior.prior_std.shape == (5, 1)
    assert run.run(1) > 0
    assert budget_mod.StageRun(train, "cpu").init.shape[0] == 3


def test_saved_timings_read_back_to_the_same_budget(tmp_path, capsys):
    config = paper()
    image = config["experiments"]["image"]
    image["methods"] = ["de", "hyper-de"]
    image.pop("variants")
    image.pop("claims_variants")  # they name a variant
    image.pop("paper_protocol")
    image["report_datasets"] = ["fashionmnist"]
    image["datasets"]["fashionmnist"].update(particles=3, batch_size=8, hidden=[8])
    image["settings"]["search_trials"] = 6
    path = _config_file(tmp_path, config)
    saved = tmp_path / "t.json"
    rc, measured, err = _run(
        capsys, "--configfile", str(path), "--device", "cpu", "--steps", "2", "--save-timings", str(saved)
    )
    assert rc == 0, err
    assert "device: CPU" in measured and "CPU-hours" in measured
    assert "timing fashionmnist/hyper-de (search: 6 members, batch 8)" in err
    rc, read, err = _run(capsys, "--configfile", str(path), "--timings", str(saved))
    assert rc == 0, err
    table = lambda text: text[text.index("dataset ") :]  # noqa: E731
    assert table(read) == table(measured)
    assert {(r["method"], r["stage"], r["steps_timed"]) for r in json.loads(saved.read_text())["rows"]} == {
        ("de", "train", 2),
        ("hyper-de", "search", 2),
        ("hyper-de", "train", 2),
    }


def test_no_cuda_is_a_clear_error(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    line = _one_line_error(capsys, "--configfile", str(_config_file(tmp_path, CONFIG)), "--device", "cuda")
    assert line.startswith("error: --device: device 'cuda' requested but torch sees no CUDA device"), line


def test_budget_leaves_the_repens_log_level_as_it_found_it(tmp_path, capsys):
    """The budget silences the timed loops' log lines while it times them, and restores the
    level: in one process a later command's warnings (e.g. Ctrl-C's one line) still show."""
    import logging

    config = paper()
    image = config["experiments"]["image"]
    image["methods"] = ["de"]
    image["report_datasets"] = ["fashionmnist"]
    image["datasets"]["fashionmnist"].update(particles=2, batch_size=4, hidden=[4])
    log = logging.getLogger("repens")
    log.setLevel(logging.NOTSET)
    rc, _, err = _run(capsys, "--configfile", str(_config_file(tmp_path, config)), "--device", "cpu", "--steps", "1")
    assert rc == 0, err
    assert log.level == logging.NOTSET


# -- the marginal step, and a config read without jsonschema (a GPU node's Python) ---------


class _FakeRun:
    """A stage run whose every call costs ``overhead`` (set-up, eager warm-up steps and a
    capture) plus ``step`` per step, with a first-use cost on its first call."""

    overhead, step, first_use = 0.7, 0.01, 5.0

    def __init__(self, stage, device="auto"):
        import torch

        self.device = torch.device(device if device != "auto" else "cpu")
        self.calls: list[int] = []
        _FakeRun.last = self

    def run(self, steps):
        self.calls.append(steps)
        return (self.first_use if len(self.calls) == 1 else 0.0) + self.overhead + steps * self.step


def test_the_marginal_step_leaves_out_each_runs_warm_up_and_capture(monkeypatch):
    """Every timed call pays three eager warm-up steps and a verified capture (on a GPU),
    which are not training steps; the marginal step between a short and
    a longer run cancels them (benchmarks/bench_gpu_step.py)."""
    monkeypatch.setattr(budget_mod, "StageRun", _FakeRun)
    (stage,) = _tiny_stage()
    seconds, steps = time_stage(stage, "cpu", steps=50)
    assert steps == 50 and seconds == pytest.approx(_FakeRun.step, rel=1e-9)
    assert _FakeRun.last.calls == [1, 1, 51]  # warm-up, the short run, the short run + 50
    # a GPU's short run holds its warm-up steps and capture: 10 steps
    seconds, steps = time_stage(stage, "cpu", steps=20, short=budget_mod.SHORT_RUN_STEPS, warmup=2)
    assert _FakeRun.last.calls == [2, 10, 30] and seconds == pytest.approx(_FakeRun.step, rel=1e-9)
    # by time: enough steps for min_seconds at the short run's pace (overhead included), capped
    seconds, steps = time_stage(stage, "cpu", min_seconds=7.1, max_steps=200)
    assert steps == 10 and seconds == pytest.approx(_FakeRun.step, rel=1e-9)  # 7.1 s / 0.71 s
    seconds, steps = time_stage(stage, "cpu", min_seconds=1e6)
    assert steps == 200
    # the old reading, the long run's average, would have counted the overhead as steps
    assert (_FakeRun.overhead + 201 * _FakeRun.step) / 201 > 1.3 * seconds


def test_a_noisy_difference_falls_back_to_the_long_runs_average(monkeypatch):
    class Noisy(_FakeRun):
        def run(self, steps):
            self.calls.append(steps)
            return 1.0  # the longer run no slower: noise swamped the steps

    monkeypatch.setattr(budget_mod, "StageRun", Noisy)
    (stage,) = _tiny_stage()
    seconds, steps = time_stage(stage, "cpu", steps=4)
    assert steps == 4 and seconds == pytest.approx(1.0 / 5)


BAD_CONFIGS = {
    "particles": (
        lambda c: c["experiments"]["image"]["datasets"]["cifar10"].__setitem__("particles", "many"),
        "experiments.image.datasets.cifar10.particles: 'many' is not of type 'integer'",
    ),
    "typo": (
        lambda c: c["experiments"]["image"]["settings"].__setitem__("partcles", 3),
        "experiments.image.settings: Additional properties are not allowed ('partcles' was unexpected)",
    ),
    "scale": (lambda c: c.__setitem__("scale", "huge"), "scale: 'huge' is not one of ['quick', 'paper']"),
    "download": (
        lambda c: c.__setitem__("image_data_download", "maybe"),
        "image_data_download: 'maybe' is not one of ['true', 'false']",
    ),
    "method name": (
        lambda c: c["methods"].__setitem__("Bad_Name", {"rule": "svgd"}),
        "methods: 'Bad_Name' does not match any of the regexes",
    ),
    "seeds": (lambda c: c.__setitem__("seeds", []), "seeds: [] should be non-empty"),
    "lr": (
        lambda c: c["experiments"]["image"]["datasets"]["fashionmnist"].__setitem__("lr", -1),
        "experiments.image.datasets.fashionmnist.lr: -1 is less than or equal to the minimum of 0",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_config_checks_without_jsonschema_name_the_same_key(name, tmp_path, monkeypatch):
    """A GPU node has no jsonschema: load_config falls back on repens.pipeline.config.schema_errors,
    whose line is jsonschema's (with jsonschema, when this machine has it)."""
    mutate, expected = BAD_CONFIGS[name]
    config = paper()
    mutate(config)
    path = _config_file(tmp_path, config)
    lines = {}
    for blocked in (False, True):
        if blocked:
            monkeypatch.setitem(sys.modules, "jsonschema", None)  # `import jsonschema` raises ImportError
        elif importlib.util.find_spec("jsonschema") is None:
            continue
        with pytest.raises(BudgetError) as err:
            load_config(path)
        lines[blocked] = str(err.value)
    assert expected in lines[True], lines[True]
    if False in lines:
        assert lines[False] == lines[True]


def test_the_real_configs_pass_without_jsonschema(monkeypatch):
    from repens.pipeline.config import schema_errors

    schema = yaml.safe_load(budget_mod.SCHEMA.read_text())
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    for scale in ("quick", "paper"):
        config = load_config(ROOT / "config.yaml", scale)
        assert config["scale"] == scale and schema_errors(config, schema) == []
    assert plan(load_config(ROOT / "config.yaml", "paper"))


def test_budget_command_runs_where_neither_jsonschema_nor_snakemake_imports(tmp_path):
    """`python -m repens budget` on a node without jsonschema and Snakemake (a fresh
    process where importing either raises)."""
    cells = plan(load_config(_config_file(tmp_path, paper())))
    timings = _timings_file(tmp_path, cells)
    script = (
        "import sys\nsys.modules['jsonschema'] = None\nsys.modules['snakemake'] = None\n"
        "from repens.cli import main\n"
        f"sys.exit(main(['budget', '--configfile', {str(ROOT / 'config.yaml')!r}, '--scale', 'paper', "
        f"'--timings', {str(timings)!r}]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "total:" in proc.stdout and "GPU-hours" in proc.stdout


def test_a_side_by_side_trial_that_hangs_is_aborted_with_every_threads_stack():
    """benchmarks/side_trial.py: a hung trial says where each thread waited, then is gone."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "side_trial.py"
    spec = importlib.util.spec_from_file_location("side_trial", path)
    side_trial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(side_trial)
    run_trial = side_trial.run_trial

    hang = (
        "import threading, time\n"
        "def wait_in_a_stack(): time.sleep(60)\n"
        "threading.Thread(target=wait_in_a_stack, daemon=True).start()\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    rc, output = run_trial([sys.executable, "-X", "faulthandler", "-c", hang], timeout=2)
    assert rc is None and time.monotonic() - t0 < 30
    assert "started" in output and "wait_in_a_stack" in output
    assert "Current thread 0x" in output and output.count("Thread 0x") >= 1  # the main thread and the other
    rc, output = run_trial([sys.executable, "-c", "print('done')"], timeout=30)
    assert (rc, output.strip()) == (0, "done")
