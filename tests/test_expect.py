"""Expected job times from the reference tree (repens.pipeline.expect)."""

import json

import pytest

from repens.pipeline.expect import (
    add_expected,
    by_seed_longest_first,
    calls,
    done_fraction,
    expected_seconds,
    held,
    mean_jobs,
    remaining_seconds,
    scaled_seconds,
)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"


def _run(reference, method, seed, device, seconds, log=None):
    folder = reference / "image" / "fashionmnist" / method / f"seed{seed}"
    folder.mkdir(parents=True)
    record = {"device": device, "metrics": {}, "provenance": {"device": device}}  # as the runners write it
    (folder / "metrics.json").write_text(json.dumps(record))
    (folder / "benchmark.tsv").write_text(f"{HEADER}\n{seconds}\t0:00:00\t1\tNA\tNA\tNA\tNA\tNA\t100\t1\n")
    if log is not None:
        path = reference / "logs" / "image" / "fashionmnist" / method / f"seed{seed}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(log)


def _log(*spans, header="2026-11-26T10:00:00+00:00: train"):
    """A job log of one call per (start, end) span, in seconds after 10:00:00.000, each
    opened by a run-jobs line that ends in ``header`` (a process's: a stack writes the
    same line into each seed's log)."""
    lines = []
    for n, (start, end) in enumerate(spans):
        lines.append(f"== repens run-jobs {header} #{n}")
        for t in (start, (start + end) / 2, end):
            minutes, seconds = divmod(t, 60)
            lines.append(f"2026-11-26 10:{int(minutes):02d}:{seconds:06.3f}".replace(".", ",") + " repens INFO x")
    return "\n".join(lines) + "\n"


JOB = "results/image/fashionmnist/svgd/seed41/metrics.json"


def test_the_longest_gpu_run_of_the_method_and_not_a_cpu_run(tmp_path):
    _run(tmp_path, "svgd", 38, "cpu", 9000.0)
    _run(tmp_path, "svgd", 39, "NVIDIA H200", 256.7)
    _run(tmp_path, "svgd", 40, "NVIDIA H100 80GB HBM3", 315.3)
    _run(tmp_path, "de", 39, "NVIDIA H200", 170.0)
    seconds, jobs, source = expected_seconds(JOB, tmp_path)
    assert seconds == 315.3 and jobs is None  # no logs
    assert "2 run(s)" in source and "NVIDIA H200" in source and "H100" in source


@pytest.mark.parametrize("device", ["cpu", "cpu (x86_64)"])
def test_no_expectation_from_cpu_runs_or_other_paths(tmp_path, device):
    _run(tmp_path, "svgd", 38, device, 9000.0)
    assert expected_seconds(JOB, tmp_path) is None
    assert expected_seconds("results/uci/boston/de/metrics.json", tmp_path) is None
    assert expected_seconds("data/images/fashionmnist.npz", tmp_path) is None


def test_calls_are_timed_from_their_first_to_their_last_stamped_line():
    text = "a line before any call\n" + _log((0.0, 30.5), (100.0, 160.0)) + "== repens run-jobs 3: no stamps\n"
    spans = [(round(end - start, 3), start) for _, start, end in calls(text)]
    assert [s for s, _ in spans] == [30.5, 60.0]
    assert spans[1][1] - spans[0][1] == pytest.approx(100.0)


def test_mean_jobs_counts_the_overlap_of_every_call_with_the_jobs_own():
    own = calls(_log((0.0, 100.0), header="own"))
    other = calls(_log((50.0, 150.0), header="other"))  # half of own's time
    stack = calls(_log((0.0, 100.0), header="stack"))  # one process, its line in five seeds' logs
    every = set(own + other + stack * 5)
    assert mean_jobs(own, every) == pytest.approx(2.5)
    assert mean_jobs(own, set(own)) == pytest.approx(1.0)
    assert mean_jobs([], every) is None


@pytest.mark.parametrize(
    ("then", "now", "expected"),
    [(6.0, 2, 100.0), (6.0, 6, 300.0), (2.0, 7, 1050.0), (1.0, 1, 300.0), (1.0, 4, 600.0), (None, 6, 300.0)],
)
def test_scaled_seconds_splits_a_fixed_total_from_two_jobs_on(then, now, expected):
    assert scaled_seconds(300.0, then, now) == pytest.approx(expected)


def test_expected_seconds_says_how_many_jobs_shared_the_gpu_with_the_longest_run(tmp_path):
    _run(tmp_path, "svgd", 39, "NVIDIA H200", 300.0, log=_log((0.0, 300.0), header="svgd39"))
    _run(tmp_path, "svgd", 40, "NVIDIA H200", 100.0, log=_log((600.0, 700.0), header="svgd40"))
    _run(tmp_path, "de", 39, "NVIDIA H200", 150.0, log=_log((0.0, 150.0), header="de39"))
    _run(tmp_path, "de", 38, "cpu", 9000.0, log=_log((0.0, 300.0), header="de38"))  # a CPU run shares no GPU
    seconds, jobs, source = expected_seconds(JOB, tmp_path)
    assert seconds == 300.0 and jobs == pytest.approx(1.5) and "1.5 jobs at a time" in source
    jobs_file = [{"id": JOB}]
    add_expected(jobs_file, tmp_path)
    assert jobs_file[0]["expected_jobs"] == 1.5


def test_add_expected_sets_the_jobs_it_knows_and_counts_them(tmp_path):
    _run(tmp_path, "svgd", 39, "NVIDIA H200", 256.7)
    jobs = [{"id": JOB}, {"id": "results/image/fashionmnist/de/seed41/metrics.json"}]
    assert add_expected(jobs, tmp_path) == 1
    assert jobs[0]["expected_s"] == 256.7 and "expected_s" not in jobs[1]
    assert "expected_jobs" not in jobs[0]  # its log is not in the tree


def test_done_fraction_reads_the_last_step_of_the_jobs_own_run(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(
        "x INFO step 10000/10000  370 steps/s\n"  # a search of 10,000 steps before the run: not the run
        "x INFO step 2500/50000  290 steps/s\n"
        "x INFO step 30000/50000  290 steps/s\n"
        "SIGTERM at step 30120\n"
    )
    assert done_fraction(log, 50000) == pytest.approx(0.6)
    assert done_fraction(log, 10000) == 1.0
    assert done_fraction(tmp_path / "missing.log", 50000) == 0.0
    assert done_fraction(log, None) == 0.0


def test_remaining_seconds_is_the_expected_time_less_what_the_log_says_is_done(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("x INFO step 45000/50000\n")
    job = {"id": JOB, "log": "logs/a.log", "expected_s": 300.0}
    assert remaining_seconds(job, 50000, tmp_path) == pytest.approx(30.0)
    assert remaining_seconds(job, 10000, tmp_path) == 300.0  # the log's steps are another run's
    job["log"] = "logs/none.log"
    assert remaining_seconds(job, 50000, tmp_path) == 300.0
    assert remaining_seconds({"id": JOB}, 50000, tmp_path) is None


def test_jobs_go_seed_by_seed_the_longest_expected_first():
    def job(method, seed, expected=None):
        out = {"id": f"results/image/f/{method}/seed{seed}/metrics.json", "wildcards": {"seed": str(seed)}}
        return out | ({"expected_s": expected} if expected is not None else {})

    jobs = [job("de", 41, 180), job("drle", 40, 400), job("de", 40, 180), job("svgd", 40, 300), job("new", 40)]
    jobs.append({"id": "results/toy/table.csv", "wildcards": {}})
    order = [
        j["id"].split("/")[3] + j["id"].split("/")[4][4:] if "seed" in j["id"] else j["id"]
        for j in by_seed_longest_first(jobs)
    ]
    assert order == ["drle40", "svgd40", "de40", "new40", "de41", "results/toy/table.csv"]


def test_held_names_the_results_a_reference_tree_holds(tmp_path):
    _run(tmp_path, "svgd", 39, "NVIDIA H200", 256.7)
    assert held("results/image/fashionmnist/svgd/seed39/metrics.json", tmp_path)
    assert not held("results/image/fashionmnist/svgd/seed40/metrics.json", tmp_path)
    assert not held("data/image/fashionmnist/svgd/seed39/metrics.json", tmp_path)


def test_add_expected_reads_each_data_sets_gpu_logs_once(tmp_path, monkeypatch):
    from repens.pipeline import expect

    for seed, start in ((39, 0.0), (40, 400.0)):
        for method in ("svgd", "de"):
            _run(
                tmp_path, method, seed, "NVIDIA H200", 100.0, log=_log((start, start + 100.0), header=f"{method}{seed}")
            )
    reads = []
    real = expect._gpu_calls
    monkeypatch.setattr(expect, "_gpu_calls", lambda ref, folder: reads.append(folder) or real(ref, folder))
    jobs = [{"id": f"results/image/fashionmnist/{m}/seed{s}/metrics.json"} for m in ("svgd", "de") for s in (41, 42)]
    assert add_expected(jobs, tmp_path) == 4
    assert reads == [tmp_path / "image" / "fashionmnist"]
    assert [j["expected_jobs"] for j in jobs] == pytest.approx([2.0] * 4)  # each run beside the other method's
    assert expected_seconds(jobs[0]["id"], tmp_path)[1] == pytest.approx(2.0)  # the same without a cache
