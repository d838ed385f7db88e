"""The job kit (repens.kit): a target's training jobs on an offline GPU node without Snakemake.

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

from repens import kit
from repens.kit import KitError, command_of, pack, parse_dry_run, read_pack, repens_argv, run_jobs

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REPENS_SHARED_DATA", ROOT.parent / "shared" / "data"))

# -- a stand-in for `python -m repens` -----------------------------------------------------

FAKE_REPENS = textwrap.dedent('''
    """`train --spec JSON --out F`: ticks of 0.05 s, a checkpoint on SIGTERM, resumed from it;
    `prepare-images ... --out F`: writes F. Each start and end is appended to $FAKE_EVENTS."""
    import json, os, signal, sys, time
    from pathlib import Path

    args = sys.argv[1:]
    def opt(name):
        return args[args.index(name) + 1] if name in args else None
    events = Path(os.environ["FAKE_EVENTS"])
    def event(what):
        with open(events, "a") as fh:
            fh.write(json.dumps({"what": what, "out": opt("--out"), "t": time.time(), "argv": args}) + "\\n")
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
    spec = json.loads(opt("--spec"))
    out = Path(opt("--out"))
    ckpt = out.with_name(out.name + ".ckpt")
    out.parent.mkdir(parents=True, exist_ok=True)
    if spec.get("exit"):
        print("failing on purpose", flush=True)
        sys.exit(spec["exit"])
    if spec.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    start = int(ckpt.read_text()) if ckpt.exists() else 0
    print(f"resumed at tick {start}" if start else "fresh start", flush=True)
    for tick in range(start, spec["ticks"]):
        time.sleep(0.05)
        if stop:
            ckpt.write_text(str(tick + 1))
            print(f"SIGTERM at tick {tick + 1}; checkpoint written", flush=True)
            event("stopped")
            sys.exit(143)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"ticks": spec["ticks"], "resumed_at": start}))
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

        @staticmethod
        def job(name, ticks=4, inputs=(), **spec_extra):
            spec = json.dumps({"ticks": ticks, "name": name, **spec_extra}, sort_keys=True)
            out = f"results/fake/{name}/out.json"
            return {"id": out, "rule": "train_fake", "wildcards": {"name": name}, "command": "train",
                    "argv": ["train", "--spec", spec, "--out", out], "spec": spec, "outputs": [out],
                    "log": f"logs/fake/{name}.log", "benchmark": f"results/fake/{name}/benchmark.tsv",
                    "inputs": list(inputs)}

        @staticmethod
        def jobs(jobs, prepare=()):
            path = work / "jobs.json"
            path.write_text(json.dumps({"kit": kit.KIT_FORMAT, "snakemake": {"targets": [], "config": []},
                                        "jobs": jobs, "prepare": list(prepare)}))
            return path

        @staticmethod
        def run(**kwargs):
            out = io.StringIO()
            rc = run_jobs(work / "jobs.json", directory=work, launcher=[sys.executable, str(script)], out=out,
                          **kwargs)
            return rc, out.getvalue()

        @staticmethod
        def events():
            path = tmp_path / "events.jsonl"
            return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

        @staticmethod
        def state():
            return json.loads((work / kit.DEFAULT_STATE).read_text())

    return Node


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
    assert rows[0].split("\t") == ["s", "h:m:s", "max_rss", "max_vms", "max_uss", "max_pss", "io_in", "io_out",
                                   "mean_load", "cpu_time"]
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
    edges = sorted([(s["start"], 1) for s in spans.values()] + [(s["end"], -1) for s in spans.values()],
                   key=lambda x: (x[0], x[1]))
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


def test_missing_data_is_prepared_first_offline_from_the_shipped_archives(node):
    data = "data/images/fake.npz"
    step = {"rule": "prepare_images", "command": "prepare-images", "outputs": [data], "log": "logs/data/fake.log",
            "argv": ["prepare-images", "--dataset", "fake", "--root", "data/images", "--mirror", "/login/mirror",
                     "--out", data], "dataset": "fake", "archives": []}
    a, b = node.job("a", inputs=[data]), node.job("b", inputs=[data])
    node.jobs([a, b], prepare=[step])
    (node.dir / "data" / "raw").mkdir(parents=True)
    rc, out = node.run(parallel=2)
    assert rc == 0, out
    events = node.events()
    assert events[0]["out"] == data and events[1]["what"] == "end"  # the data step, alone, first
    assert events[0]["argv"] == ["prepare-images", "--dataset", "fake", "--root", "data/images", "--offline",
                                 "--mirror", "data/raw", "--out", data]
    assert sum(e["what"] == "start" and e["out"] == data for e in events) == 1
    assert node.state()["prepare"][data]["status"] == "done"


def test_a_job_whose_data_step_fails_is_blocked(node, monkeypatch):
    data = "data/images/fake.npz"
    step = {"rule": "prepare_images", "command": "prepare-images", "outputs": [data], "log": "logs/data/fake.log",
            "argv": ["prepare-images", "--dataset", "fake", "--root", "data/images", "--out", data]}
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
    script = (f"import sys; from repens.kit import run_jobs; "
              f"sys.exit(run_jobs({str(node.dir / 'jobs.json')!r}, directory={str(node.dir)!r}, "
              f"launcher=[sys.executable, {str(tmp_path / 'fake_repens.py')!r}]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
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


def test_a_job_left_running_by_a_killed_runner_is_stopped_before_it_runs_again(node, tmp_path):
    """A command limit that kills the runner (SIGKILL) leaves its jobs running: the next call
    stops them (SIGTERM: they checkpoint) and resumes them, never running one job twice at once."""
    job = node.job("a", ticks=60)
    node.jobs([job])
    script = (f"import sys; from repens.kit import run_jobs; "
              f"sys.exit(run_jobs({str(node.dir / 'jobs.json')!r}, directory={str(node.dir)!r}, "
              f"launcher=[sys.executable, {str(tmp_path / 'fake_repens.py')!r}]))")
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
    parts = pack(node.dir / "jobs.json", tmp_path / "out2" / "r", directory=node.dir, max_bytes=128 * 1024,
                 max_files=2, stream=out)
    assert "left for a later pack (no room): 1 job(s): results/fake/b/out.json" in out.getvalue()
    manifest = read_pack(parts, tmp_path / "y")
    assert [j["id"] for j in manifest["jobs"]] == [a["id"]] and manifest["left"] == [b["id"]]
    parts = pack(node.dir / "jobs.json", tmp_path / "out3" / "r", directory=node.dir, only_new=True,
                 stream=io.StringIO())
    assert [j["id"] for j in read_pack(parts, tmp_path / "z")["jobs"]] == [b["id"]]
    # eight files of 128 KiB take both: the stream is cut into parts .00, .01, ...
    parts = pack(node.dir / "jobs.json", tmp_path / "out" / "results", directory=node.dir, max_bytes=128 * 1024,
                 stream=io.StringIO())
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


def test_pack_takes_checkpoints_of_unfinished_jobs_when_asked(node, tmp_path):
    job = node.job("a", ticks=100)
    node.jobs([job])
    assert node.run(deadline=1.5)[0] == 75
    plain = read_pack(pack(node.dir / "jobs.json", tmp_path / "p", directory=node.dir, stream=io.StringIO()),
                      tmp_path / "u1")
    assert plain["jobs"][0]["status"] == "interrupted" and plain["jobs"][0]["files"] == [job["log"]]
    with_ckpt = read_pack(pack(node.dir / "jobs.json", tmp_path / "q", directory=node.dir, checkpoints=True,
                               stream=io.StringIO()), tmp_path / "u2")
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
    result = kit.import_results(parts, directory=login, verify=False, metadata=False, prepare=False,
                                stream=io.StringIO())
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
        kit.import_results(parts, directory=login, metadata=False, prepare=False, config=["scale=paper"],
                           stream=io.StringIO())
    assert asked == [([a["id"]], ["--force"], ["scale=paper"])]
    assert not (login / a["id"]).exists()
    monkeypatch.setattr(kit, "_dry_run", dry_run(a["spec"]))
    kit.import_results(parts, directory=login, metadata=False, prepare=False, stream=io.StringIO())
    assert (login / a["id"]).read_text() == (node.dir / a["id"]).read_text()
    assert asked[-1][2] == []  # by default the export's --config


def test_a_pack_member_outside_the_directory_is_refused(tmp_path):
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, blob in (("manifest.json", json.dumps({"kit": kit.KIT_FORMAT, "jobs": []}).encode()),
                           ("../outside.txt", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(KitError, match="not a relative path inside the working directory"):
        read_pack([path], tmp_path / "in")
    assert not (tmp_path / "outside.txt").exists()


def test_the_runner_and_pack_import_neither_snakemake_nor_jsonschema_nor_torch(node, tmp_path):
    """`python -m repens run-jobs` / `pack` themselves: the standard library and repens.kit only."""
    _finished(node)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    for argv in (["run-jobs", "jobs.json"], ["pack", "jobs.json", "--out", str(tmp_path / "p")]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "repens", *argv], cwd=node.dir, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
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
"""


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
        "train", "--device", "cuda", "--out", "x"]


# -- the whole way, real jobs ----------------------------------------------------------------


BLOCKER = textwrap.dedent('''
    import os, sys

    class _NotOnTheNode:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("snakemake", "jsonschema"):
                with open(os.environ["KIT_BLOCKED_LOG"], "a") as fh:
                    fh.write(f"{os.getpid()} {name} {' '.join(sys.argv[:3])}\\n")
                raise ImportError(f"{name} is not on the GPU node")
            return None

    sys.meta_path.insert(0, _NotOnTheNode())
''')


def _snakemake(workdir: Path, *args: str, timeout: int = 300) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def _repens(cwd: Path, *args: str, env: dict | None = None, timeout: int = 300) -> tuple[int, str]:
    env = env or {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "repens", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def tiny_config(mirror: Path) -> dict:
    """Table 1 on FashionMNIST with two methods and one seed; the deep ensemble long enough
    (600 steps) to be interrupted in its loop, the other short."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    image = config["experiments"]["image"]
    image["methods"], image["seeds"] = ["de", "dle"], [38]
    image["quick"] = {"settings": {"particles": 2, "steps": 20, "log_every": 50},
                      "method_settings": {"de": {"steps": 600}}, "report_datasets": ["fashionmnist"]}
    config.update(scale="quick", image_data_mirror=str(mirror), image_data_download=False)
    return config


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "FashionMNIST" / "raw").is_dir() or not (SHARED / "MNIST" / "raw").is_dir(),
                    reason="no shared copy of FashionMNIST/MNIST")
def test_table1_on_a_node_without_snakemake_and_back(tmp_path):
    from repens.config import resolve_job

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
        assert job["spec"] == json.dumps(resolve_job(config, "image", "fashionmnist", job["wildcards"]["method"], 38),
                                         sort_keys=True)
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
    env = {**os.environ, "KIT_BLOCKED_LOG": str(blocked),
           "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    rc, out = _repens(node_dir, "run-jobs", "jobs.json", "--prepare-only", "--parallel", "2", env=env)
    assert rc == 0 and (node_dir / "data/images/fashionmnist.npz").is_file(), out
    assert "--mirror data/raw" in (node_dir / "logs/data/mnist.log").read_text()
    de_log = node_dir / "logs/image/fashionmnist/de/seed38.log"
    # a deadline that falls in the deep ensemble's training loop (startup times vary: a
    # deadline that comes before the loop kills the job with nothing to resume; try longer)
    for deadline in (6, 12, 20, 30):
        rc, out = _repens(node_dir, "run-jobs", "jobs.json", "--parallel", "2", "--deadline", str(deadline),
                          "--grace", "60", env=env)
        assert "deadline" in out or rc == 0, out
        if "checkpoint written" in de_log.read_text():
            break
        assert not (node_dir / "results/image/fashionmnist/de/seed38/metrics.json").exists(), \
            "the job finished before any deadline interrupted its loop"
    step = int(re.search(r"SIGTERM at step (\d+); checkpoint written", de_log.read_text())[1])
    assert rc == 75 and 0 < step < 600, out
    rc, out = _repens(node_dir, "run-jobs", "jobs.json", "--parallel", "2", env=env)
    assert rc == 0, out
    assert f"resumed from results/image/fashionmnist/de/seed38/metrics.json.ckpt at step {step}/600" in de_log.read_text()
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
