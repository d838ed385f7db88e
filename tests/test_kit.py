"""The job kit (repens.pipeline.kit): a target's training jobs on an offline GPU node without Snakemake.

The runner's behaviour (deadline, resume, skip, parallelism, failures, data steps) is tested
with a stand-in for ``python -m repens`` (a script that "trains" in ticks, checkpoints on
SIGTERM and resumes), so the timing is deterministic and fast; pack and import on files.
The slow test goes the whole way with real Table 1 jobs on the CPU: export (Snakemake's dry
run) -> run-jobs with a deadline that interrupts a job -> run-jobs again (it resumes from
its checkpoint, then skips the finished jobs) -> pack -> import -> ``snakemake
results/table1.tex`` builds the table training nothing; on the "node" neither Snakemake nor
jsonschema can be imported (a sitecustomize makes each import fail and logs it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from repens.pipeline import kit
from repens.pipeline.kit import KitError, command_of, pack, parse_dry_run, read_pack, repens_argv, run_jobs

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REPENS_SHARED_DATA", ROOT.parent / "shared" / "data"))

# -- a stand-in for `python -m repens` -----------------------------------------------------

FAKE_REPENS = textwrap.dedent('''
    """`train --spec JSON --out F`: ticks of 0.05 s, a checkpoint on SIGTERM, resumed from it;
    `train-stack --spec JSON --out F ...` (the specs equal but for seed; with `--stacks`, several
    such stacks side by side): the same for all its seeds at once, checkpoint
    `<first F>.stack.ckpt` keyed by the seeds (other seeds: set aside, a fresh start); an image
    spec also writes predictions.npz beside F;
    `prepare-images ... --out F`: writes F. Each start and end is appended to $FAKE_EVENTS."""
    import json, os, signal, sys, time
    from pathlib import Path

    args = sys.argv[1:]
    while args[0].startswith("--"):  # repens' own options (--threads N)
        args = args[2:]
    def opt(name):
        return args[args.index(name) + 1] if name in args else None
    def opts(name):
        return [args[i + 1] for i, a in enumerate(args) if a == name]
    events = Path(os.environ["FAKE_EVENTS"])
    def event(what):
        with open(events, "a") as fh:
            fh.write(json.dumps({"what": what, "out": opt("--out"), "outs": opts("--out"), "t": time.time(),
                                 "argv": sys.argv[1:]}) + "\\n")
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    event("start")
    if args[0] == "prepare-images":
        if os.environ.get("FAKE_PREPARE_FAILS"):
            sys.exit(2)
        Path(opt("--out")).parent.mkdir(parents=True, exist_ok=True)
        Path(opt("--out")).write_text("data")
        event("end")
        sys.exit(0)
    specs = [json.loads(s) for s in opts("--spec")]
    outs = [Path(o) for o in opts("--out")]
    spec, out = specs[0], outs[0]
    if args[0] == "train-stack":
        sizes = [int(n) for n in opt("--stacks").split(",")] if opt("--stacks") else [len(specs)]
        assert len(specs) == len(outs) > 1 and sum(sizes) == len(specs), args
        if len(sizes) > 1:  # stacks side by side: each one method's seeds
            print(f"stacks side by side: {sizes}", flush=True)
        else:
            assert len({s["seed"] for s in specs}) == len(specs), args
            assert all({**s, "seed": 0} == {**spec, "seed": 0} for s in specs), args
        ckpt = out.with_name(out.name + ".stack.ckpt")
        seeds = [s["seed"] for s in specs]
        def save(tick):
            ckpt.write_text(json.dumps({"seeds": seeds, "tick": tick}))
        def load():
            saved = json.loads(ckpt.read_text())
            if saved["seeds"] == seeds:
                return saved["tick"]
            os.replace(ckpt, ckpt.with_name(ckpt.name + ".stale"))
            print(f"a checkpoint of seeds {saved['seeds']}, not {seeds}: set aside", flush=True)
            return 0
        print(f"stack of seeds {seeds}", flush=True)
    else:
        assert args[0] == "train" and len(outs) == 1, args
        ckpt = out.with_name(out.name + ".ckpt")
        save = lambda tick: ckpt.write_text(str(tick))
        load = lambda: int(ckpt.read_text())
    for o in outs:
        o.parent.mkdir(parents=True, exist_ok=True)
    if spec.get("exit"):
        print("failing on purpose", flush=True)
        sys.exit(spec["exit"])
    if spec.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    start = load() if ckpt.exists() else 0
    print(f"resumed at tick {start}" if start else "fresh start", flush=True)
    for tick in range(start, spec["ticks"]):
        time.sleep(0.05)
        if stop:
            save(tick + 1)
            print(f"SIGTERM at tick {tick + 1}; checkpoint written", flush=True)
            event("stopped")
            sys.exit(143)
    for s, o in zip(specs, outs):
        o.write_text(json.dumps({"ticks": s["ticks"], "resumed_at": start, **({"seed": s["seed"]} if "seed" in s
                                                                             else {})}))
        if s.get("experiment") == "image":  # results that store their job's spec, as train's do
            o.write_text(json.dumps({**json.loads(o.read_text()), "job": s}))
            import numpy as np
            with open(o.with_name("predictions.npz"), "wb") as fh:
                np.savez(fh, job=np.array(json.dumps(s)))
    if ckpt.exists():
        ckpt.unlink()
    event("end")
''')


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A working directory with the stand-in; ``node.jobs(...)`` writes a jobs file and
    ``node.run(...)`` runs it (returns rc, printed lines)."""
    script = tmp_path / "fake_repens.py"
    script.write_text(FAKE_REPENS)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("FAKE_EVENTS", str(tmp_path / "events.jsonl"))

    class Node:
        dir = work
        launcher = [sys.executable, str(script)]

        @staticmethod
        def job(name, ticks=4, inputs=(), **spec_extra):
            spec = json.dumps({"ticks": ticks, "name": name, **spec_extra}, sort_keys=True)
            out = f"results/fake/{name}/out.json"
            return {
                "id": out,
                "rule": "train_fake",
                "wildcards": {"name": name},
                "command": "train",
                "argv": ["train", "--spec", spec, "--out", out],
                "spec": spec,
                "outputs": [out],
                "log": f"logs/fake/{name}.log",
                "benchmark": f"results/fake/{name}/benchmark.tsv",
                "inputs": list(inputs),
            }

        @staticmethod
        def image_job(method, seed, ticks=4, **spec_extra):
            """An image job as Snakemake writes one (``--threads``, inputs, device), with its
            two outputs; its inputs are made here."""
            spec = json.dumps(
                {
                    "experiment": "image",
                    "dataset": "fake",
                    "method": method,
                    "seed": seed,
                    "ticks": ticks,
                    **spec_extra,
                },
                sort_keys=True,
            )
            base = f"results/image/fake/{method}/seed{seed}"
            inputs = ["data/images/fake.npz", "data/images/ood.npz"]
            for path in inputs:
                (work / path).parent.mkdir(parents=True, exist_ok=True)
                (work / path).write_text("data")
            argv = [
                "--threads",
                "1",
                "train",
                "--spec",
                spec,
                "--input",
                f"train={inputs[0]}",
                "--input",
                f"ood={inputs[1]}",
                "--device",
                "auto",
                "--out",
                f"{base}/metrics.json",
            ]
            return {
                "id": f"{base}/metrics.json",
                "rule": "train_image",
                "wildcards": {"dataset": "fake", "method": method, "seed": str(seed)},
                "command": "train",
                "argv": argv,
                "spec": spec,
                "outputs": [f"{base}/metrics.json", f"{base}/predictions.npz"],
                "log": f"logs/image/fake/{method}/seed{seed}.log",
                "benchmark": f"{base}/benchmark.tsv",
                "inputs": inputs,
            }

        @staticmethod
        def jobs(jobs, prepare=()):
            path = work / "jobs.json"
            path.write_text(
                json.dumps(
                    {
                        "kit": kit.KIT_FORMAT,
                        "snakemake": {"targets": [], "config": []},
                        "jobs": jobs,
                        "prepare": list(prepare),
                    }
                )
            )
            return path

        @staticmethod
        def run(**kwargs):
            out = io.StringIO()
            rc = run_jobs(work / "jobs.json", directory=work, launcher=[sys.executable, str(script)], out=out, **kwargs)
            return rc, out.getvalue()

        @staticmethod
        def events():
            path = tmp_path / "events.jsonl"
            return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

        @staticmethod
        def state():
            return json.loads((work / kit.DEFAULT_STATE).read_text())

    return Node


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_deadline_interrupts_a_job_the_next_call_resumes_it_and_then_skips_finished_ones(node):
    long, short = node.job("long", ticks=80), node.job("short", ticks=2)
    node.jobs([long, short])
    t0 = time.monotonic()
    rc, out = node.run(parallel=2, deadline=1.5, grace=10)
    assert rc == 75, out  # work remains: run again
    assert time.monotonic() - t0 < 6, out
    assert "deadline: SIGTERM to 1 running task(s)" in out, out
    state = node.state()
    assert state["jobs"][short["id"]]["status"] == "done"
    attempt = state["jobs"][long["id"]]["attempts"][-1]
    assert (attempt["status"], attempt["returncode"], attempt["stopped"]) == ("interrupted", 143, "deadline")
    ckpt = node.dir / (long["id"] + ".ckpt")
    tick = int(ckpt.read_text())
    assert 0 < tick < 80 and "checkpoint written" in (node.dir / long["log"]).read_text()
    # the next call: the interrupted job resumes from its checkpoint; the finished one is skipped
    rc, out = node.run(parallel=2)
    assert rc == 0, out
    assert f"resumed at tick {tick}" in (node.dir / long["log"]).read_text()
    assert json.loads((node.dir / long["id"]).read_text()) == {"ticks": 80, "resumed_at": tick}
    assert not ckpt.exists()
    starts = [e["out"] for e in node.events() if e["what"] == "start"]
    assert starts.count(short["id"]) == 1 and starts.count(long["id"]) == 2
    # Snakemake's benchmark format, both calls' time summed
    rows = (node.dir / long["benchmark"]).read_text().splitlines()
    assert rows[0].split("\t") == [
        "s",
        "h:m:s",
        "max_rss",
        "max_vms",
        "max_uss",
        "max_pss",
        "io_in",
        "io_out",
        "mean_load",
        "cpu_time",
    ]
    seconds = sum(a["seconds"] for a in node.state()["jobs"][long["id"]]["attempts"])
    assert float(rows[1].split("\t")[0]) == pytest.approx(seconds, abs=0.01) and seconds >= 80 * 0.05
    # a third call runs nothing
    rc, out = node.run(parallel=2)
    assert rc == 0 and "0 job(s) to run" in out and "2 done" in out, out
    assert len([e for e in node.events() if e["what"] == "start"]) == 3
    assert len(node.state()["calls"]) == 3


def test_k_jobs_at_a_time(node):
    node.jobs([node.job(f"j{i}", ticks=6) for i in range(5)])
    rc, out = node.run(parallel=2)
    assert rc == 0, out
    spans = {}
    for e in node.events():
        spans.setdefault(e["out"], {})[e["what"]] = e["t"]
    edges = sorted(
        [(s["start"], 1) for s in spans.values()] + [(s["end"], -1) for s in spans.values()], key=lambda x: (x[0], x[1])
    )
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak == 2


def test_a_failed_job_is_not_run_again_unless_asked(node):
    bad, good = node.job("bad", exit=3), node.job("good")
    node.jobs([bad, good])
    rc, out = node.run()
    assert rc == 1 and "failed results/fake/bad/out.json (exit 3" in out, out
    assert node.state()["jobs"][bad["id"]]["status"] == "failed"
    rc, out = node.run()
    assert rc == 1 and len(node.state()["jobs"][bad["id"]]["attempts"]) == 1, out
    rc, out = node.run(retry_failed=True)
    assert rc == 1 and len(node.state()["jobs"][bad["id"]]["attempts"]) == 2, out


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(node):
    stubborn = node.job("stubborn", ticks=400, ignore_term=True)
    node.jobs([stubborn])
    t0 = time.monotonic()
    rc, out = node.run(deadline=2.0, grace=0.7)
    assert time.monotonic() - t0 < 5
    assert rc == 75 and "SIGKILL results/fake/stubborn/out.json" in out, out
    attempt = node.state()["jobs"][stubborn["id"]]["attempts"][-1]
    assert attempt["returncode"] == -signal.SIGKILL and attempt["status"] == "interrupted"


def test_no_job_starts_too_close_to_the_deadline(node):
    node.jobs([node.job("a", ticks=4), node.job("b", ticks=30)])
    rc, out = node.run(parallel=1, deadline=2.0, min_run=1.9)  # a takes more than 0.1 s
    assert rc == 75, out
    assert [e["out"] for e in node.events() if e["what"] == "start"] == ["results/fake/a/out.json"]


def test_a_job_expected_to_outlast_the_deadline_is_not_started_and_a_shorter_one_is(node):
    """The first job in order would not finish before the deadline (expected 100 s, 2 s
    left): it is held back, said once, and the next, short enough, runs."""
    long, short, unknown = node.job("long", ticks=4), node.job("short", ticks=2), node.job("unknown", ticks=2)
    long["expected_s"], short["expected_s"] = 100.0, 0.5
    node.jobs([long, short, unknown])
    rc, out = node.run(parallel=1, deadline=2.0, min_run=1.9)
    assert rc == 75, out
    starts = [e["out"] for e in node.events() if e["what"] == "start"]
    assert starts == [short["id"]], out  # "unknown": no expectation, and under min_run left after "short"
    assert out.count(f"not started {long['id']}: expected 100 s (x 1.1)") == 1, out
    held = [e for e in node.state()["calls"][-1]["events"] if e["what"] == "held back"]
    assert [e["task"] for e in held] == [long["id"]] and held[0]["expected"] == 100.0


def test_an_expected_time_is_scaled_to_the_jobs_that_will_share_the_gpu(node):
    """Measured among 6 jobs (expected_jobs), 15 s is 5 s with two jobs at a time and 15 s
    with six: with 10 s left (x 1.1) the jobs start under ``parallel=2`` (the last pair with
    more than 5.5 s left) and are held back under ``parallel=6`` (six ready jobs), the
    message naming the jobs it was scaled to."""
    jobs = [node.job(f"j{i}", ticks=2) for i in range(6)]
    for job in jobs:
        job["expected_s"], job["expected_jobs"] = 15.0, 6.0
    node.jobs(jobs)
    rc, out = node.run(parallel=6, deadline=10.0)
    assert rc == 75 and not [e for e in node.events() if e["what"] == "start"], out
    assert f"not started {jobs[0]['id']}: expected 15 s with 6 job(s) at a time (x 1.1)" in out, out
    rc, out = node.run(parallel=2, deadline=10.0)
    assert rc == 0 and "not started" not in out, out
    assert all(node.state()["jobs"][job["id"]]["status"] == "done" for job in jobs)


def test_a_resumed_job_is_expected_to_take_only_what_its_log_says_is_left(node):
    """90% done by its log: 10% of 10 s (x 1.1) fits in a 2 s deadline; from the start it would not.
    Its steps come from the spec on its command line (a jobs file may hold no separate spec)."""
    job = node.job("half", ticks=2, steps=50000)
    job["expected_s"] = 10.0
    del job["spec"]
    node.jobs([job])
    log = node.dir / job["log"]
    log.parent.mkdir(parents=True)
    log.write_text("2026-11-26 10:00:00,000 repens.train INFO step 45000/50000  300 steps/s\n")
    rc, out = node.run(parallel=1, deadline=2.0)
    assert rc == 0 and "not started" not in out, out
    log.write_text("")
    (node.dir / job["id"]).unlink()
    rc, out = node.run(parallel=1, deadline=2.0)
    assert rc == 75 and "not started results/fake/half/out.json: expected 10 s" in out, out


def test_a_deadline_that_leaves_no_job_time_to_start_is_refused_before_anything_runs(node):
    node.jobs([node.job("a", ticks=4)])
    with pytest.raises(kit.KitError, match="--deadline 310 s is not above --min-run 400 s"):
        node.run(deadline=310.0, min_run=400.0)
    assert node.events() == [] and not (node.dir / kit.DEFAULT_STATE).exists()


def test_missing_data_is_prepared_first_offline_from_the_shipped_archives(node):
    data = "data/images/fake.npz"
    step = {
        "rule": "prepare_images",
        "command": "prepare-images",
        "outputs": [data],
        "log": "logs/data/fake.log",
        "argv": [
            "prepare-images",
            "--dataset",
            "fake",
            "--root",
            "data/images",
            "--mirror",
            "/login/mirror",
            "--out",
            data,
        ],
        "dataset": "fake",
        "archives": [],
    }
    a, b = node.job("a", inputs=[data]), node.job("b", inputs=[data])
    node.jobs([a, b], prepare=[step])
    (node.dir / "data" / "raw").mkdir(parents=True)
    rc, out = node.run(parallel=2)
    assert rc == 0, out
    events = node.events()
    assert events[0]["out"] == data and events[1]["what"] == "end"  # the data step, alone, first
    assert events[0]["argv"] == [
        "prepare-images",
        "--dataset",
        "fake",
        "--root",
        "data/images",
        "--offline",
        "--mirror",
        "data/raw",
        "--out",
        data,
    ]
    assert sum(e["what"] == "start" and e["out"] == data for e in events) == 1
    assert node.state()["prepare"][data]["status"] == "done"


def test_a_job_whose_data_step_fails_is_blocked(node, monkeypatch):
    data = "data/images/fake.npz"
    step = {
        "rule": "prepare_images",
        "command": "prepare-images",
        "outputs": [data],
        "log": "logs/data/fake.log",
        "argv": ["prepare-images", "--dataset", "fake", "--root", "data/images", "--out", data],
    }
    node.jobs([node.job("a", inputs=[data]), node.job("c", inputs=["data/shipped.txt"])], prepare=[step])
    monkeypatch.setenv("FAKE_PREPARE_FAILS", "1")
    rc, out = node.run()
    assert "blocked results/fake/c/out.json: no file data/shipped.txt" in out, out
    assert "blocked results/fake/a/out.json: its data step data/images/fake.npz did not finish" in out, out
    assert [e["out"] for e in node.events() if e["what"] == "start"] == [data]
    assert "--mirror" not in node.events()[0]["argv"]  # no data/raw here: nothing to name


def test_another_spec_at_the_same_paths_runs_again(node):
    job = node.job("a", ticks=2)
    node.jobs([job])
    assert node.run()[0] == 0
    assert kit.job_status(job, node.state()["jobs"][job["id"]], node.dir) == "done"
    changed = node.job("a", ticks=3)
    node.jobs([changed])
    assert kit.job_status(changed, node.state()["jobs"][job["id"]], node.dir) == "todo"
    rc, out = node.run()
    assert rc == 0 and json.loads((node.dir / job["id"]).read_text())["ticks"] == 3, out
    assert len(node.state()["jobs"][job["id"]]["attempts"]) == 1  # the other spec's run is not this one's time


def test_sigterm_to_the_runner_stops_its_jobs_cleanly(node, tmp_path):
    job = node.job("a", ticks=200)
    node.jobs([job])
    script = (
        f"import sys; from repens.pipeline.kit import run_jobs; "
        f"sys.exit(run_jobs({str(node.dir / 'jobs.json')!r}, directory={str(node.dir)!r}, "
        f"launcher=[sys.executable, {str(tmp_path / 'fake_repens.py')!r}]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for _ in range(200):
        if any(e["what"] == "start" for e in node.events()):
            break
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 75, out
    assert "SIGTERM: SIGTERM to 1 running task(s)" in out
    assert (node.dir / (job["id"] + ".ckpt")).is_file()


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_a_job_left_running_by_a_killed_runner_is_stopped_before_it_runs_again(node, tmp_path):
    """A command limit that kills the runner (SIGKILL) leaves its jobs running: the next call
    stops them (SIGTERM: they checkpoint) and resumes them, never running one job twice at once."""
    job = node.job("a", ticks=60)
    node.jobs([job])
    script = (
        f"import sys; from repens.pipeline.kit import run_jobs; "
        f"sys.exit(run_jobs({str(node.dir / 'jobs.json')!r}, directory={str(node.dir)!r}, "
        f"launcher=[sys.executable, {str(tmp_path / 'fake_repens.py')!r}]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    runner = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL)
    for _ in range(200):
        if any(e["what"] == "start" for e in node.events()):
            break
        time.sleep(0.05)
    time.sleep(0.3)
    runner.kill()
    runner.wait()
    assert node.state()["jobs"][job["id"]]["status"] == "running"
    rc, out = node.run(grace=10)
    assert rc == 0, out
    assert "still running from an earlier call" in out, out
    log = (node.dir / job["log"]).read_text()
    tick = int(re.search(r"SIGTERM at tick (\d+)", log)[1])
    assert f"resumed at tick {tick}" in log
    assert json.loads((node.dir / job["id"]).read_text())["resumed_at"] == tick


# -- seed stacks (--stack-seeds) ------------------------------------------------------------


#: a train-stack's command line before its jobs: the first job's, --device overridden
STACK_ARGV = [
    "--threads",
    "1",
    "train-stack",
    "--input",
    "train=data/images/fake.npz",
    "--input",
    "ood=data/images/ood.npz",
    "--device",
    "cpu",
]


def _starts(node):
    return [e for e in node.events() if e["what"] == "start"]


def _command(argv):
    return command_of(argv)


def test_stack_seeds_runs_the_seeds_of_one_image_job_as_one_stack(node):
    de = [node.image_job("de", seed, ticks=6) for seed in (1, 2, 3)]
    svgd = [node.image_job("svgd", seed, ticks=4) for seed in (1, 2)]
    other_lr = node.image_job("de", 4, ticks=6, lr=0.1)  # another setting than de's: a group of one
    plain = node.job("plain", ticks=2, seed=1)  # not an image job: never stacked
    jobs = [de[0], svgd[0], plain, de[1], other_lr, svgd[1], de[2]]
    node.jobs(jobs)
    assert kit.stack_groups(jobs) == [[0, 3, 6], [1, 5], [2], [4]]
    rc, out = node.run(parallel=2, stack_seeds=True, device="cpu")
    assert rc == 0, out
    assert "7 job(s) to run (5 of them in 2 seed stack(s)), 2 at a time" in out, out
    starts = _starts(node)
    assert sorted(_command(e["argv"]) for e in starts) == ["train", "train", "train-stack", "train-stack"]
    stack = next(e for e in starts if e["outs"][0] == de[0]["id"])
    # the first seed's command line (--device overridden), then each seed's --spec and --out, in order
    assert stack["argv"] == [
        *STACK_ARGV,
        *[w for j in de for w in ("--spec", j["spec"], "--out", j["id"])],
    ]
    assert next(e for e in starts if e["outs"][0] == svgd[0]["id"])["outs"] == [j["id"] for j in svgd]
    single = next(e for e in starts if e["out"] == other_lr["id"])["argv"]
    assert single == kit._with_option(other_lr["argv"], "--device", "cpu")
    state = node.state()
    for group in (de, svgd):
        ids = [j["id"] for j in group]
        seconds = {state["jobs"][i]["attempts"][-1]["stack"]["seconds"] for i in ids}
        assert len(seconds) == 1  # one process, one time
        for job in group:
            record = state["jobs"][job["id"]]
            assert record["status"] == "done" and len(record["attempts"]) == 1
            attempt = record["attempts"][0]
            assert attempt["stack"]["jobs"] == ids and attempt["returncode"] == 0
            assert attempt["seconds"] == pytest.approx(attempt["stack"]["seconds"] / len(group), abs=0.002)
            assert attempt["cpu_seconds"] == pytest.approx(attempt["stack"]["cpu_seconds"] / len(group), abs=0.002)
            assert json.loads((node.dir / job["id"]).read_text())["seed"] == json.loads(job["spec"])["seed"]
            assert (node.dir / job["outputs"][1]).is_file()
            rows = (node.dir / job["benchmark"]).read_text().splitlines()
            assert float(rows[1].split("\t")[0]) == pytest.approx(attempt["seconds"], abs=0.01)
            # each seed's log holds the stack's output
            log = (node.dir / job["log"]).read_text()
            assert f"stack of seeds {[json.loads(j['spec'])['seed'] for j in group]}" in log and "fresh start" in log
            assert kit.job_status(job, record, node.dir) == "done"
    assert "attempts" in state["jobs"][plain["id"]] and "stack" not in state["jobs"][plain["id"]]["attempts"][0]
    assert f"done {de[1]['id']} after" in out and "a stack of 3 seeds" in out
    rc, out = node.run(parallel=2, stack_seeds=True)
    assert rc == 0 and "0 job(s) to run" in out and "7 done" in out, out
    assert len(_starts(node)) == 4


def test_side_by_side_trains_several_image_tasks_in_one_process(node):
    """``side_by_side=2``: the de stack and the svgd stack share one process (train-stack
    --stacks 3,2); the next image task opens a process of its own; a job that is not an image
    job never joins. Each job keeps its record, benchmark and log."""
    de = [node.image_job("de", seed, ticks=4) for seed in (1, 2, 3)]
    svgd = [node.image_job("svgd", seed, ticks=3) for seed in (1, 2)]
    other_lr = node.image_job("de", 4, ticks=2, lr=0.1)
    plain = node.job("plain", ticks=2, seed=1)
    node.jobs([de[0], svgd[0], plain, de[1], other_lr, svgd[1], de[2]])
    rc, out = node.run(parallel=1, stack_seeds=True, side_by_side=2, device="cpu")
    assert rc == 0, out
    starts = _starts(node)
    assert [(_command(e["argv"]), len(e["outs"])) for e in starts] == [("train-stack", 5), ("train", 1), ("train", 1)]
    together = starts[0]["argv"]
    assert kit._option(together, "--stacks") == "3,2"
    assert together[: together.index("--stacks")] == STACK_ARGV
    assert starts[0]["outs"] == [j["id"] for j in de + svgd]
    assert {starts[1]["out"], starts[2]["out"]} == {plain["id"], other_lr["id"]}
    state = node.state()
    for job in de + svgd:
        record = state["jobs"][job["id"]]
        assert record["status"] == "done" and record["attempts"][0]["stack"]["jobs"] == [j["id"] for j in de + svgd]
        assert "stacks side by side: [3, 2]" in (node.dir / job["log"]).read_text()
        assert (node.dir / job["benchmark"]).is_file()
    assert state["calls"][-1]["side_by_side"] == 2


def test_side_by_side_key_takes_image_training_tasks_of_one_command_line(node):
    de, svgd = node.image_job("de", 1), node.image_job("svgd", 2)
    stack = kit.stack_argv([de["argv"], node.image_job("de", 2)["argv"]])
    assert kit.side_by_side_key(de["argv"]) == kit.side_by_side_key(svgd["argv"]) == kit.side_by_side_key(stack)
    assert kit.side_by_side_key(kit._with_option(de["argv"], "--device", "cuda")) != kit.side_by_side_key(de["argv"])
    assert kit.side_by_side_key(node.job("plain", seed=1)["argv"]) is None
    assert kit.side_by_side_key([*de["argv"], "--checkpoint", "x.ckpt"]) is None
    # the float32 matmul precision is set for the whole process: jobs of another stay apart
    tf32, fp32 = node.image_job("de", 3, matmul_precision="high"), node.image_job("svgd", 3, matmul_precision="highest")
    also_tf32 = node.image_job("svgd", 4, matmul_precision="high")
    keys = {kit.side_by_side_key(j["argv"]) for j in (de, tf32, fp32, also_tf32)}
    assert len(keys) == 3 and None not in keys
    assert kit.side_by_side_key(kit.stack_argv([tf32["argv"], fp32["argv"]])) is None
    argv = kit.side_by_side_argv([stack, svgd["argv"]])
    assert kit._option(argv, "--stacks") == "2,1" and kit.command_of(argv) == "train-stack"
    assert kit._spec_out_pairs(argv) == kit._spec_out_pairs(stack) + kit._spec_out_pairs(svgd["argv"])


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_an_interrupted_stack_resumes_from_its_checkpoint(node):
    jobs = [node.image_job("de", seed, ticks=80) for seed in (1, 2)]
    node.jobs(jobs)
    rc, out = node.run(deadline=1.5, grace=10, stack_seeds=True)
    assert rc == 75, out
    assert "deadline: SIGTERM to 1 running task(s)" in out
    ckpt = node.dir / (jobs[0]["id"] + ".stack.ckpt")
    tick = json.loads(ckpt.read_text())["tick"]
    assert 0 < tick < 80
    for job in jobs:
        attempt = node.state()["jobs"][job["id"]]["attempts"][-1]
        assert (attempt["status"], attempt["returncode"], attempt["stopped"]) == ("interrupted", 143, "deadline")
        assert kit.job_status(job, node.state()["jobs"][job["id"]], node.dir) == "interrupted"
        assert "checkpoint written" in (node.dir / job["log"]).read_text()
        assert not (node.dir / job["benchmark"]).exists()
    rc, out = node.run(stack_seeds=True)
    assert rc == 0, out
    assert not ckpt.exists()
    assert [e["outs"] for e in _starts(node)] == [[j["id"] for j in jobs]] * 2
    for job in jobs:
        assert f"resumed at tick {tick}" in (node.dir / job["log"]).read_text()
        assert json.loads((node.dir / job["id"]).read_text())["resumed_at"] == tick
        attempts = node.state()["jobs"][job["id"]]["attempts"]
        assert [a["status"] for a in attempts] == ["interrupted", "done"]
        rows = (node.dir / job["benchmark"]).read_text().splitlines()
        assert float(rows[1].split("\t")[0]) == pytest.approx(sum(a["seconds"] for a in attempts), abs=0.01)


def test_a_partly_finished_group_stacks_only_the_rest(node):
    jobs = [node.image_job("de", seed, ticks=2) for seed in (1, 2, 3)]
    node.jobs(jobs)
    rc, out = node.run(stack_seeds=True, only=[jobs[1]["id"]])  # seed 2 alone: a group of one, `train`
    assert rc == 0, out
    assert [_command(e["argv"]) for e in _starts(node)] == ["train"]
    rc, out = node.run(stack_seeds=True)
    assert rc == 0 and "2 job(s) to run (2 of them in 1 seed stack(s))" in out, out
    last = _starts(node)[-1]
    assert _command(last["argv"]) == "train-stack" and last["outs"] == [jobs[0]["id"], jobs[2]["id"]]
    assert len(node.state()["jobs"][jobs[1]["id"]]["attempts"]) == 1
    assert all(kit.job_status(j, node.state()["jobs"][j["id"]], node.dir) == "done" for j in jobs)


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_a_job_interrupted_alone_resumes_alone_while_the_rest_stack(node):
    jobs = [node.image_job("de", seed, ticks=40) for seed in (1, 2, 3)]  # one stack key
    node.jobs(jobs)
    rc, out = node.run(deadline=1.0, grace=10, only=[jobs[0]["id"]])  # seed 1 alone, stopped
    assert rc == 75, out
    tick = int((node.dir / (jobs[0]["id"] + ".ckpt")).read_text())
    assert 0 < tick < 40
    rc, out = node.run(stack_seeds=True)
    assert rc == 0, out
    starts = _starts(node)[1:]
    assert sorted((_command(e["argv"]), tuple(e["outs"])) for e in starts) == [
        ("train", (jobs[0]["id"],)),
        ("train-stack", (jobs[1]["id"], jobs[2]["id"])),
    ]
    assert json.loads((node.dir / jobs[0]["id"]).read_text())["resumed_at"] == tick
    assert f"resumed at tick {tick}" in (node.dir / jobs[0]["log"]).read_text()


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_a_stack_left_running_by_a_killed_runner_is_stopped_once_and_resumed(node, tmp_path):
    jobs = [node.image_job("de", seed, ticks=60) for seed in (1, 2)]
    node.jobs(jobs)
    script = (
        f"import sys; from repens.pipeline.kit import run_jobs; "
        f"sys.exit(run_jobs({str(node.dir / 'jobs.json')!r}, directory={str(node.dir)!r}, stack_seeds=True, "
        f"launcher=[sys.executable, {str(tmp_path / 'fake_repens.py')!r}]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    runner = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL)
    for _ in range(200):
        if _starts(node):
            break
        time.sleep(0.05)
    time.sleep(0.3)
    runner.kill()
    runner.wait()
    assert len({node.state()["jobs"][j["id"]]["pid"] for j in jobs}) == 1
    rc, out = node.run(grace=10, stack_seeds=True)
    assert rc == 0, out
    assert out.count("still running from an earlier call") == 1, out  # one process for both seeds
    log = (node.dir / jobs[0]["log"]).read_text()
    tick = int(re.search(r"SIGTERM at tick (\d+)", log)[1])
    for job in jobs:
        assert json.loads((node.dir / job["id"]).read_text())["resumed_at"] == tick
        assert f"resumed at tick {tick}" in (node.dir / job["log"]).read_text()


def test_stacked_seeds_are_packed_and_imported_as_their_jobs(node, tmp_path, monkeypatch):
    jobs = [node.image_job("de", seed, ticks=2) for seed in (1, 2)]
    node.jobs(jobs)
    assert node.run(stack_seeds=True)[0] == 0
    parts = pack(node.dir / "jobs.json", tmp_path / "r", directory=node.dir, stream=io.StringIO())
    manifest = read_pack(parts, tmp_path / "unpacked")
    assert [j["id"] for j in manifest["jobs"]] == [j["id"] for j in jobs]
    for job, entry in zip(jobs, manifest["jobs"]):
        assert entry["status"] == "done" and entry["spec"] == job["spec"]
        assert entry["files"] == [*job["outputs"], job["benchmark"], job["log"]]
        assert entry["attempts"][0]["stack"]["jobs"] == [j["id"] for j in jobs]

    def dry_run(targets, extra=(), **where):  # Snakemake would run each seed's own train job
        return [
            {
                "rule": "train_image",
                "output": ", ".join(j["outputs"]),
                "shellcmd": "python -m repens " + shlex.join(j["argv"]),
            }
            for j in jobs
            if j["id"] in targets
        ]

    monkeypatch.setattr(kit, "_dry_run", dry_run)
    login = tmp_path / "login"
    for path in jobs[0]["inputs"]:
        (login / path).parent.mkdir(parents=True, exist_ok=True)
        (login / path).write_text("data")
    result = kit.import_results(parts, directory=login, metadata=False, prepare=False, stream=io.StringIO())
    assert result["jobs"] == [j["id"] for j in jobs]
    for job in jobs:
        for rel in (*job["outputs"], job["benchmark"], job["log"]):
            assert (login / rel).read_bytes() == (node.dir / rel).read_bytes()


def test_stack_key_takes_only_image_train_jobs_with_a_seed(node):
    job = node.image_job("de", 1)
    assert kit.stack_key(job) == kit.stack_key(node.image_job("de", 2))
    assert kit.stack_key(job) != kit.stack_key(node.image_job("de", 2, lr=0.1))
    assert kit.stack_key(job, kit._with_option(job["argv"], "--device", "cuda")) != kit.stack_key(job)
    assert kit.stack_key(node.job("plain", seed=1)) is None
    assert kit.stack_key({**job, "argv": [*job["argv"], "--checkpoint", "x.ckpt"]}) is None
    no_seed = json.dumps({k: v for k, v in json.loads(job["spec"]).items() if k != "seed"})
    assert kit.stack_key({**job, "spec": no_seed}) is None
    twice = [job, node.image_job("de", 2), job]  # a repeated seed is not stacked with itself
    assert kit.stack_groups(twice) == [[0, 1], [2]]


@pytest.mark.slow
def test_stack_seeds_with_the_real_train_stack_equals_the_seeds_run_one_by_one(tmp_path):
    """Two seeds of a tiny image job and one of another method, on synthetic data: run-jobs
    --stack-seeds runs one real ``python -m repens train-stack`` for the two seeds, and with
    --side-by-side 2 one process trains that stack and the other job side by side; each
    seed's metrics and predictions equal those of its own ``train`` job run by run-jobs
    without either (one thread, as the rule runs them)."""
    import numpy as np

    from repens.pipeline.config import resolve_job

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    rng = np.random.default_rng(0)
    for name, n_train, n_test in (("in", 64, 24), ("ood", 8, 16)):
        arrays = {}
        for split, n in (("train", n_train), ("test", n_test)):
            y = rng.integers(0, 10, size=n)
            x = rng.normal(40 + 15 * y[:, None, None, None], 30, size=(n, 1, 8, 8)).clip(0, 255).astype(np.uint8)
            arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y.astype(np.int64)
        np.savez(tmp_path / f"{name}.npz", **arrays)
    jobs = []
    for method, seed in (("de", 38), ("de", 39), ("kde-fwgd", 38)):
        spec = dict(resolve_job(config, "image", "fashionmnist", method, seed))
        spec.update(particles=2, steps=8, hidden=[8], batch_size=16, log_every=4)
        spec = json.dumps(spec, sort_keys=True)
        base = f"results/image/fashionmnist/{method}/seed{seed}"
        argv = [
            "--threads",
            "1",
            "train",
            "--spec",
            spec,
            "--input",
            f"train={tmp_path / 'in.npz'}",
            "--input",
            f"ood={tmp_path / 'ood.npz'}",
            "--device",
            "cpu",
            "--out",
            f"{base}/metrics.json",
        ]
        jobs.append(
            {
                "id": f"{base}/metrics.json",
                "rule": "train_image",
                "wildcards": {},
                "command": "train",
                "argv": argv,
                "spec": spec,
                "outputs": [f"{base}/metrics.json", f"{base}/predictions.npz"],
                "log": f"logs/image/fashionmnist/{method}/seed{seed}.log",
                "benchmark": f"{base}/benchmark.tsv",
                "inputs": [],
            }
        )
    results = {}
    for how, stacked, side in (("stack", True, 1), ("side", True, 2), ("single", False, 1)):
        work = tmp_path / how
        work.mkdir()
        (work / "jobs.json").write_text(
            json.dumps({"kit": kit.KIT_FORMAT, "snakemake": {}, "jobs": jobs, "prepare": []})
        )
        out = io.StringIO()
        rc = run_jobs(work / "jobs.json", directory=work, stack_seeds=stacked, side_by_side=side, parallel=2, out=out)
        assert rc == 0, out.getvalue() + "".join((work / j["log"]).read_text() for j in jobs)
        assert ("in 1 seed stack(s)" in out.getvalue()) == stacked
        assert ("3 jobs side by side (stacks of 2,1)" in out.getvalue()) == (side > 1), out.getvalue()
        results[how] = work
    for how in ("stack", "side"):
        for job in jobs:
            stack, single = results[how] / job["id"], results["single"] / job["id"]
            assert json.loads(stack.read_text())["metrics"] == json.loads(single.read_text())["metrics"]
            a, b = (np.load(p.with_name("predictions.npz")) for p in (stack, single))
            for key in set(a.files) - {"provenance"}:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            assert (results[how] / job["benchmark"]).is_file()
        for job in jobs[:2]:
            assert json.loads((results[how] / job["id"]).read_text())["seed_stack"]["seeds"] == [38, 39]
            assert "seed stack [38, 39]" in (results[how] / job["log"]).read_text()
    assert "2 stacks side by side on cpu" in (results["side"] / jobs[2]["log"]).read_text()


# -- pack and import ------------------------------------------------------------------------


def _finished(node, names=("a", "b"), ticks=2):
    jobs = [node.job(n, ticks=ticks) for n in names]
    node.jobs(jobs)
    assert node.run(parallel=2)[0] == 0
    return jobs


def test_pack_cuts_the_stream_into_parts_and_reads_back(node, tmp_path):
    a, b = _finished(node)
    big = node.dir / "results/fake/b/extra.bin"  # incompressible: 300 KB
    big.write_bytes(os.urandom(300_000))
    (node.dir / "results/fake/b/out.json.ckpt").write_text("never packed with a finished job")
    # two files of 128 KiB cannot take b: it is left for a later pack, which takes only it
    out = io.StringIO()
    parts = pack(
        node.dir / "jobs.json",
        tmp_path / "out2" / "r",
        directory=node.dir,
        max_bytes=128 * 1024,
        max_files=2,
        stream=out,
    )
    assert "left for a later pack (no room): 1 job(s): results/fake/b/out.json" in out.getvalue()
    manifest = read_pack(parts, tmp_path / "y")
    assert [j["id"] for j in manifest["jobs"]] == [a["id"]] and manifest["left"] == [b["id"]]
    parts = pack(
        node.dir / "jobs.json", tmp_path / "out3" / "r", directory=node.dir, only_new=True, stream=io.StringIO()
    )
    assert [j["id"] for j in read_pack(parts, tmp_path / "z")["jobs"]] == [b["id"]]
    # eight files of 128 KiB take both: the stream is cut into parts .00, .01, ...
    parts = pack(
        node.dir / "jobs.json",
        tmp_path / "out" / "results",
        directory=node.dir,
        max_bytes=128 * 1024,
        stream=io.StringIO(),
    )
    assert [p.name for p in parts] == [f"results.tar.gz.{i:02d}" for i in range(len(parts))] and len(parts) == 3
    assert all(p.stat().st_size <= 128 * 1024 for p in parts)
    unpacked = tmp_path / "unpacked"
    manifest = read_pack(reversed(parts), unpacked)  # any order
    for job in (a, b):
        entry = next(j for j in manifest["jobs"] if j["id"] == job["id"])
        assert entry["spec"] == job["spec"] and entry["status"] == "done" and entry["attempts"]
        for rel in (job["id"], job["benchmark"], job["log"]):
            assert (unpacked / rel).read_bytes() == (node.dir / rel).read_bytes()
    assert (unpacked / "results/fake/b/extra.bin").read_bytes() == big.read_bytes()
    assert not (unpacked / "results/fake/b/out.json.ckpt").exists()
    with pytest.raises(KitError, match="not one complete series"):
        read_pack(parts[1:], tmp_path / "x")


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
def test_a_lease_runs_to_its_deadline_then_packs_what_finished_with_the_logs(node, tmp_path):
    quick, slow = node.job("quick", ticks=2), node.job("slow", ticks=400)  # 0.1 s and 20 s of ticks
    node.jobs([quick, slow])
    out, t0 = io.StringIO(), time.monotonic()
    rc = kit.lease(
        node.dir / "jobs.json",
        tmp_path / "out",
        until=4.0,
        min_run=0.5,
        grace=1.0,
        pack_reserve=1.0,
        device=None,
        parallel=2,
        directory=node.dir,
        launcher=node.launcher,
        stream=out,
    )
    assert rc == 75 and time.monotonic() - t0 < 6, out.getvalue()
    # the deadline (4 - 1 - 1 = 2 s) interrupted the slow job, which checkpointed
    assert "SIGTERM" in out.getvalue() and (node.dir / (slow["id"] + ".ckpt")).exists()
    parts = sorted((tmp_path / "out").glob("results.tar.gz*"))
    packed = {j["id"]: j["status"] for j in read_pack(parts, tmp_path / "unpacked")["jobs"]}
    assert packed == {quick["id"]: "done", slow["id"]: "interrupted"}  # the slow one's log only
    assert (tmp_path / "unpacked" / quick["id"]).exists() and not (tmp_path / "unpacked" / slow["id"]).exists()
    with tarfile.open(tmp_path / "out" / "logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {kit.DEFAULT_STATE, quick["log"], slow["log"]} <= names
    assert node.state()["jobs"][slow["id"]]["status"] == "interrupted"


def test_a_lease_too_short_for_any_job_is_refused_before_anything_runs(node, tmp_path):
    node.jobs([node.job("a", ticks=2)])
    with pytest.raises(KitError, match="no job could start"):
        kit.lease(node.dir / "jobs.json", tmp_path / "out", until=200.0, directory=node.dir, launcher=node.launcher)
    assert node.events() == [] and not (tmp_path / "out").exists()


def test_pack_takes_checkpoints_of_unfinished_jobs_when_asked(node, tmp_path):
    job = node.job("a", ticks=100)
    node.jobs([job])
    assert node.run(deadline=1.5)[0] == 75
    plain = read_pack(
        pack(node.dir / "jobs.json", tmp_path / "p", directory=node.dir, stream=io.StringIO()), tmp_path / "u1"
    )
    assert plain["jobs"][0]["status"] == "interrupted" and plain["jobs"][0]["files"] == [job["log"]]
    with_ckpt = read_pack(
        pack(node.dir / "jobs.json", tmp_path / "q", directory=node.dir, checkpoints=True, stream=io.StringIO()),
        tmp_path / "u2",
    )
    assert (tmp_path / "u2" / (job["id"] + ".ckpt")).is_file() and with_ckpt["jobs"][0]["status"] == "interrupted"


def test_import_puts_results_in_place_dated_after_their_inputs(node, tmp_path):
    data = node.dir / "data/images/fake.npz"
    data.parent.mkdir(parents=True)
    data.write_text("data")
    a = node.job("a", inputs=["data/images/fake.npz"])
    node.jobs([a])
    assert node.run()[0] == 0
    parts = pack(node.dir / "jobs.json", tmp_path / "r", directory=node.dir, stream=io.StringIO())
    login = tmp_path / "login"
    (login / "data/images").mkdir(parents=True)
    (login / "data/images/fake.npz").write_text("data")
    future = time.time() + 1000  # an input dated later than now: the outputs go after it
    os.utime(login / "data/images/fake.npz", (future, future))
    result = kit.import_results(
        parts, directory=login, verify=False, metadata=False, prepare=False, stream=io.StringIO()
    )
    assert result["jobs"] == [a["id"]]
    for rel in (a["id"], a["benchmark"], a["log"]):
        assert (login / rel).read_bytes() == (node.dir / rel).read_bytes()
        assert (login / rel).stat().st_mtime > future
    assert not list(login.glob(".repens-import-*"))
    # a missing input is not silently skipped
    (login / "data/images/fake.npz").unlink()
    with pytest.raises(KitError, match="inputs missing here: data/images/fake.npz"):
        kit.import_results(parts, directory=login, verify=False, metadata=False, prepare=False, stream=io.StringIO())


def test_import_refuses_results_of_another_config(node, tmp_path, monkeypatch):
    """Each job's spec is checked against what Snakemake would pass now (its dry run, here
    stood in for): results of another config are not imported as this one's."""
    a = node.job("a")
    node.jobs([a])
    assert node.run()[0] == 0
    parts = pack(node.dir / "jobs.json", tmp_path / "r", directory=node.dir, stream=io.StringIO())
    asked = []

    def dry_run(spec):
        def fake(targets, extra=(), **where):
            asked.append((list(targets), list(extra), where["config"]))
            argv = ["train", "--spec", spec, "--out", a["id"]]
            return [{"rule": "train_fake", "output": a["id"], "shellcmd": "python -m repens " + shlex.join(argv)}]

        return fake

    login = tmp_path / "login"
    monkeypatch.setattr(kit, "_dry_run", dry_run(a["spec"].replace('"ticks": 4', '"ticks": 5')))
    with pytest.raises(KitError, match="1 job\\(s\\) of the pack are not what Snakemake would run here now"):
        kit.import_results(
            parts, directory=login, metadata=False, prepare=False, config=["scale=paper"], stream=io.StringIO()
        )
    assert asked == [([a["id"]], ["--force"], ["scale=paper"])]
    assert not (login / a["id"]).exists()
    monkeypatch.setattr(kit, "_dry_run", dry_run(a["spec"]))
    kit.import_results(parts, directory=login, metadata=False, prepare=False, stream=io.StringIO())
    assert (login / a["id"]).read_text() == (node.dir / a["id"]).read_text()
    assert asked[-1][2] == []  # by default the export's --config


def test_a_pack_member_outside_the_directory_is_refused(tmp_path):
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, blob in (
            ("manifest.json", json.dumps({"kit": kit.KIT_FORMAT, "jobs": []}).encode()),
            ("../outside.txt", b"x"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(KitError, match="not a relative path inside the working directory"):
        read_pack([path], tmp_path / "in")
    assert not (tmp_path / "outside.txt").exists()


def test_the_runner_and_pack_import_neither_snakemake_nor_jsonschema_nor_torch(node, tmp_path):
    """`python -m repens run-jobs` / `pack` themselves: the standard library and repens.pipeline.kit only."""
    _finished(node)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    for argv in (
        ["run-jobs", "jobs.json"],
        ["run-jobs", "jobs.json", "--stack-seeds"],
        ["pack", "jobs.json", "--out", str(tmp_path / "p")],
    ):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "repens", *argv],
            cwd=node.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        imported = {
            line.split("|")[-1].strip().split(".")[0]
            for line in proc.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "repens" in imported
        assert not imported & {"snakemake", "jsonschema", "torch", "numpy", "yaml"}, argv


# -- Snakemake's dry run, read ---------------------------------------------------------------

DRY_RUN = """\
Building DAG of jobs...
Job stats:
job                count
---------------  -------
prepare_images         1
train_image            1
total                  2


[Wed Nov 25 15:50:25 2026]
rule prepare_images:
    output: data/images/mnist.npz
    log: logs/data/mnist.log
    jobid: 3
    reason: Missing output files: data/images/mnist.npz
    wildcards: dataset=mnist
    resources: tmpdir=/tmp
Shell command: python -m repens prepare-images --dataset mnist --root data/images   --out data/images/mnist.npz > logs/data/mnist.log 2>&1 || { status=$?; tail -n 3 logs/data/mnist.log >&2; exit $status; }

[Wed Nov 25 15:50:25 2026]
rule train_image:
    input: data/images/fashionmnist.npz, data/images/mnist.npz (ancient)
    output: results/image/fashionmnist/de/seed39/metrics.json, results/image/fashionmnist/de/seed39/predictions.npz
    log: logs/image/fashionmnist/de/seed39.log
    jobid: 4
    benchmark: results/image/fashionmnist/de/seed39/benchmark.tsv
    reason: Missing output files: results/image/fashionmnist/de/seed39/metrics.json
    wildcards: dataset=fashionmnist, method=de, seed=39
    resources: tmpdir=/tmp, runtime=60, gpu_share=100, mem_mb=6000, mem=6 GB, mem_mib=5723
Shell command: python -m repens --threads 1 train --spec '{"lr": 0.0025, "method": "de", "label": "it'"'"'s"}' --input train=data/images/fashionmnist.npz --input ood=data/images/mnist.npz --device auto --out results/image/fashionmnist/de/seed39/metrics.json > logs/image/fashionmnist/de/seed39.log 2>&1

[Wed Nov 25 15:50:25 2026]
localrule summarize_image:
    input: results/image/fashionmnist/de/seed39/metrics.json
    output: results/table1.tex
    jobid: 0
Shell command: set -o pipefail; python -m repens image-table --out-tex results/table1.tex results/image/fashionmnist/de/seed39/metrics.json
Job stats:
"""  # noqa: E501 (Snakemake's dry-run output, verbatim)


def test_dry_run_is_read_into_jobs_with_their_exact_spec():
    blocks = parse_dry_run(DRY_RUN)
    assert [b["rule"] for b in blocks] == ["prepare_images", "train_image", "summarize_image"]
    train = blocks[1]
    argv = repens_argv(train["shellcmd"])
    assert command_of(argv) == "train"
    assert kit._option(argv, "--spec") == '{"lr": 0.0025, "method": "de", "label": "it\'s"}'
    assert argv[-2:] == ["--out", "results/image/fashionmnist/de/seed39/metrics.json"]
    record = kit._job_record(train, argv)
    assert record["inputs"] == ["data/images/fashionmnist.npz", "data/images/mnist.npz"]
    assert record["outputs"][1].endswith("predictions.npz") and record["log"] == "logs/image/fashionmnist/de/seed39.log"
    assert record["benchmark"] == "results/image/fashionmnist/de/seed39/benchmark.tsv"
    assert record["wildcards"] == {"dataset": "fashionmnist", "method": "de", "seed": "39"}
    prep = repens_argv(blocks[0]["shellcmd"])
    assert prep == ["prepare-images", "--dataset", "mnist", "--root", "data/images", "--out", "data/images/mnist.npz"]
    assert command_of(prep) == "prepare-images"
    assert repens_argv(blocks[2]["shellcmd"]) is None  # not `python -m repens ...` first
    assert kit._with_option(["train", "--device", "auto", "--out", "x"], "--device", "cuda") == [
        "train",
        "--device",
        "cuda",
        "--out",
        "x",
    ]


# -- the whole way, real jobs ----------------------------------------------------------------


BLOCKER = textwrap.dedent("""
    import os, sys

    class _NotOnTheNode:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("snakemake", "jsonschema"):
                with open(os.environ["KIT_BLOCKED_LOG"], "a") as fh:
                    fh.write(f"{os.getpid()} {name} {' '.join(sys.argv[:3])}\\n")
                raise ImportError(f"{name} is not on the GPU node")
            return None

    sys.meta_path.insert(0, _NotOnTheNode())
""")


def _snakemake(workdir: Path, *args: str, timeout: int = 300) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _repens(cwd: Path, *args: str, env: dict | None = None, timeout: int = 300) -> tuple[int, str]:
    env = env or {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "repens", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return proc.returncode, proc.stdout + proc.stderr


def tiny_config(mirror: Path) -> dict:
    """Table 1 on FashionMNIST with two methods and one seed; the deep ensemble long enough
    (600 steps) to be interrupted in its loop, the other short."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    image = config["experiments"]["image"]
    image["methods"], image["seeds"] = ["de", "dle"], [38]
    image.pop("variants")  # the two methods alone
    image.pop("claims_variants")  # they name a variant
    image.pop("paper_protocol")
    image["quick"] = {
        "settings": {"particles": 2, "steps": 20, "log_every": 50},
        "method_settings": {"de": {"steps": 600}},
        "report_datasets": ["fashionmnist"],
    }
    config.update(scale="quick", image_data_mirror=str(mirror), image_data_download=False)
    return config


@pytest.mark.slow
@pytest.mark.skipif(
    not (SHARED / "FashionMNIST" / "raw").is_dir() or not (SHARED / "MNIST" / "raw").is_dir(),
    reason="no shared copy of FashionMNIST/MNIST",
)
def test_table1_on_a_node_without_snakemake_and_back(tmp_path):
    from repens.core.jobkey import RUNTIME_FIELDS
    from repens.pipeline.config import resolve_job

    mirror = tmp_path / "mirror"
    for name in ("FashionMNIST", "MNIST"):
        shutil.copytree(SHARED / name / "raw", mirror / name / "raw")
    login, node_dir = tmp_path / "login", tmp_path / "node"
    login.mkdir()
    config = tiny_config(mirror)
    (login / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    # 1. login: the jobs of Table 1, with the archives staged to travel with the tree
    rc, out = _repens(login, "export-jobs", "results/table1.tex", "--stage-raw", "data/raw", "--out", "jobs.json")
    assert rc == 0, out
    exported = json.loads((login / "jobs.json").read_text())
    assert [j["wildcards"]["method"] for j in exported["jobs"]] == ["de", "dle"]
    for job in exported["jobs"]:  # exactly the spec Snakemake passes (workflow/rules/common.smk job_spec)
        resolved = resolve_job(config, "image", "fashionmnist", job["wildcards"]["method"], 38)
        assert job["spec"] == json.dumps({k: v for k, v in resolved.items() if k not in RUNTIME_FIELDS}, sort_keys=True)
        assert job["inputs"] == ["data/images/fashionmnist.npz", "data/images/mnist.npz"]
    assert sorted(s["dataset"] for s in exported["prepare"]) == ["fashionmnist", "mnist"]
    assert (login / "data/raw/FashionMNIST/raw/train-images-idx3-ubyte.gz").is_file()
    assert not (login / "results").exists() and not (login / "data/images").exists()

    # 2. the node: the tree's copy (jobs file, archives); importing snakemake or jsonschema fails there
    node_dir.mkdir()
    shutil.copy(login / "jobs.json", node_dir)
    shutil.copytree(login / "data/raw", node_dir / "data/raw")
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    blocked = tmp_path / "blocked.log"
    env = {
        **os.environ,
        "KIT_BLOCKED_LOG": str(blocked),
        "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    rc, out = _repens(node_dir, "run-jobs", "jobs.json", "--prepare-only", "--parallel", "2", env=env)
    assert rc == 0 and (node_dir / "data/images/fashionmnist.npz").is_file(), out
    assert "--mirror data/raw" in (node_dir / "logs/data/mnist.log").read_text()
    de_log = node_dir / "logs/image/fashionmnist/de/seed38.log"
    # a deadline that falls in the deep ensemble's training loop (startup times vary: a
    # deadline that comes before the loop kills the job with nothing to resume; try longer).
    # On a quiet 2-core machine the loop ran from about 4.8 s to 9.3 s after run-jobs
    # started (measured 2026-11-27, the stale lock's takeover included): deadlines growing
    # by a factor of 1.25 (well under 9.3 / 4.8) cannot jump from before the loop to after
    # it, even where load stretches one end more than the other.
    for deadline in (2.0 * 1.25**k for k in range(16)):
        rc, out = _repens(
            node_dir, "run-jobs", "jobs.json", "--parallel", "2", "--deadline", str(deadline), "--grace", "60", env=env
        )
        assert "deadline" in out or rc == 0, out
        if "checkpoint written" in de_log.read_text():
            break
        assert not (node_dir / "results/image/fashionmnist/de/seed38/metrics.json").exists(), (
            "the job finished before any deadline interrupted its loop"
        )
    found = re.search(r"SIGTERM at step (\d+); checkpoint written", de_log.read_text())
    assert found, f"no deadline fell in the training loop: {out}\n{de_log.read_text()}"
    step = int(found[1])
    assert rc == 75 and 0 < step < 600, out
    rc, out = _repens(node_dir, "run-jobs", "jobs.json", "--parallel", "2", env=env)
    assert rc == 0, out
    assert (
        f"resumed from results/image/fashionmnist/de/seed38/metrics.json.ckpt at step {step}/600" in de_log.read_text()
    )
    rc, out = _repens(node_dir, "run-jobs", "jobs.json", "--parallel", "2", env=env)
    assert rc == 0 and "0 job(s) to run" in out and "2 done" in out, out
    rc, out = _repens(node_dir, "pack", "jobs.json", "--out", "out/results", env=env)
    assert rc == 0, out
    assert not blocked.exists(), blocked.read_text()  # no process on the node tried either import
    parts = sorted((node_dir / "out").iterdir())
    assert [p.name for p in parts] == ["results.tar.gz"] and parts[0].stat().st_size < 16 * kit.MIB

    # 3. login: import (the data are prepared here by Snakemake), then Table 1, training nothing
    rc, out = _repens(login, "import-results", str(parts[0]))
    assert rc == 0 and "imported 2 finished job(s)" in out, out
    rc, out = _snakemake(login, "-c1", "results/table1.tex")
    assert rc == 0, out
    ran = re.findall(r"^(?:local)?rule (\w+):", out, re.M)
    assert ran == ["summarize_image"], out
    table = (login / "results/table1.csv").read_text()
    assert "de" in table and "dle" in table
    rc, out = _snakemake(login, "-n", "results/table1.tex")
    assert rc == 0 and "Nothing to be done" in out, out
    # Snakemake holds the imported jobs' params: a changed setting reruns exactly that method
    config["experiments"]["image"]["quick"]["method_settings"]["de"]["lr"] = 0.001
    (login / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    rc, out = _snakemake(login, "-n", "results/table1.tex")
    assert rc == 0, out
    assert re.findall(r"wildcards: dataset=fashionmnist, method=([\w-]+), seed=38", out) == ["de"], out
    assert "Params have changed since last execution" in out


def test_a_next_call_on_the_same_machine_lets_a_longer_job_start_and_resume_there(node):
    """With ``then`` seconds of a next call, a job expected to outlast this call's deadline
    starts (stopped at the deadline, it checkpoints); without, it is held back."""
    long = node.job("long", ticks=30)
    long["expected_s"] = 4.0
    node.jobs([long])
    rc, out = node.run(parallel=1, deadline=1.0)
    assert rc == 75 and "not started results/fake/long/out.json: expected 4 s" in out, out
    rc, out = node.run(parallel=1, deadline=1.0, then=5.0)
    assert rc == 75 and "start results/fake/long/out.json" in out, out
    assert node.state()["jobs"][long["id"]]["attempts"][-1]["status"] == "interrupted"


def _repack(parts, out: Path, edit) -> Path:
    """The pack ``parts`` written again to ``out`` after ``edit(manifest, members)`` (name -> bytes)."""
    members = {}
    with tarfile.open(parts[0], "r:gz") as tar:
        for member in tar:
            members[member.name] = tar.extractfile(member).read()
    manifest = json.loads(members.pop("manifest.json"))
    edit(manifest, members)
    with tarfile.open(out, "w:gz") as tar:
        for name, blob in [("manifest.json", json.dumps(manifest).encode()), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return out


def _no_snakemake(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"Snakemake was run: {args}")

    monkeypatch.setattr(kit, "_snakemake", refuse)
    monkeypatch.setattr(kit, "_dry_run", refuse)


def _login(tmp_path, job) -> Path:
    """A login machine's working directory holding ``job``'s inputs."""
    login = tmp_path / "login"
    for path in job["inputs"]:
        (login / path).parent.mkdir(parents=True, exist_ok=True)
        (login / path).write_text("data")
    return login


def _image_pack(node, tmp_path):
    jobs = [node.image_job("de", 1, ticks=2)]
    node.jobs(jobs)
    assert node.run()[0] == 0
    return jobs[0], pack(node.dir / "jobs.json", tmp_path / "r", directory=node.dir, stream=io.StringIO())


@pytest.mark.parametrize(
    "member", ["Snakefile", "config.yaml", ".snakemake/metadata/x", "profiles/default/config.yaml"]
)
def test_a_pack_member_its_manifest_does_not_list_is_refused_and_nothing_runs(node, tmp_path, monkeypatch, member):
    job, parts = _image_pack(node, tmp_path)
    evil = _repack(parts, tmp_path / "evil.tar.gz", lambda m, files: files.update({member: b"rule all: shell: 'rm'"}))
    _no_snakemake(monkeypatch)
    login = tmp_path / "login"
    with pytest.raises(KitError, match=f"pack member '{re.escape(member)}': not a file its manifest lists"):
        kit.import_results([evil], directory=login, stream=io.StringIO())
    assert not [p for p in login.rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    "where, word",
    [("config", "--delete-all-output"), ("config", "scale"), ("configfile", "--forceall"), ("file", "Snakefile")],
)
def test_a_manifest_that_names_options_or_files_outside_results_and_logs_is_refused(
    node, tmp_path, monkeypatch, where, word
):
    job, parts = _image_pack(node, tmp_path)

    def edit(manifest, files):
        if where == "file":  # listed by the job, with its SHA-256: still not a result
            entry = manifest["jobs"][0]
            entry["files"].append(word)
            entry["sha256"][word] = hashlib.sha256(b"x").hexdigest()
            files[word] = b"x"
        else:
            manifest["snakemake"][where] = [word] if where == "config" else word

    evil = _repack(parts, tmp_path / "evil.tar.gz", edit)
    _no_snakemake(monkeypatch)
    login = tmp_path / "login"
    with pytest.raises(KitError, match=re.escape(repr(word))):
        kit.import_results([evil], directory=login, stream=io.StringIO())
    assert not [p for p in login.rglob("*") if p.is_file()]


def test_a_pack_whose_result_is_of_another_spec_is_refused(node, tmp_path, monkeypatch):
    """The manifest's spec is right (Snakemake would run it) but the metrics file is of
    another spec, its SHA-256 in the manifest recomputed."""
    job, parts = _image_pack(node, tmp_path)
    metrics = job["outputs"][0]

    def edit(manifest, files):
        data = json.loads(files[metrics])
        files[metrics] = json.dumps({**data, "job": {**data["job"], "ticks": 5}}).encode()
        manifest["jobs"][0].setdefault("sha256", {})[metrics] = hashlib.sha256(files[metrics]).hexdigest()

    evil = _repack(parts, tmp_path / "evil.tar.gz", edit)
    _no_snakemake(monkeypatch)
    login = _login(tmp_path, job)
    with pytest.raises(KitError, match=f"pack member '{metrics}': holds the result of another job.*ticks 5, not 2"):
        kit.import_results([evil], directory=login, verify=False, prepare=False, metadata=False, stream=io.StringIO())
    assert not (login / metrics).exists()


@pytest.mark.parametrize("damage", ["missing", "changed"])
def test_a_pack_missing_or_changing_a_listed_file_is_refused(node, tmp_path, monkeypatch, damage):
    job, parts = _image_pack(node, tmp_path)
    predictions = job["outputs"][1]

    def edit(manifest, files):
        if damage == "missing":
            del files[predictions]
        else:
            files[predictions] += b"\0"

    evil = _repack(parts, tmp_path / "evil.tar.gz", edit)
    _no_snakemake(monkeypatch)
    login = _login(tmp_path, job)
    why = "listed but not in the pack" if damage == "missing" else "its SHA-256 is not the manifest's"
    with pytest.raises(KitError, match=f"pack member '{predictions}'.*{why}"):
        kit.import_results([evil], directory=login, verify=False, prepare=False, metadata=False, stream=io.StringIO())
    assert not (login / "results").exists()


def test_a_yaml_error_in_the_configfile_is_named_with_its_line_before_snakemake_runs(tmp_path, monkeypatch):
    extra = tmp_path / "extra.yaml"
    extra.write_text("scale: paper\nseeds: [42\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("Snakemake was run"))
    with pytest.raises(KitError, match=rf"^--configfile {re.escape(str(extra))}:3:1: YAML syntax error"):
        kit._snakemake(["-n", "all"], "dry run", directory=tmp_path, configfile=str(extra))
