"""Command-line entry point: ``python -m repens <command>``.

The Snakemake rules call these commands; everything also runs without Snakemake.

* ``train --spec JSON --out FILE``: one training job (spec from ``repens.pipeline.config.resolve_job``).
* ``train-stack --spec JSON --out FILE [--spec JSON --out FILE ...] [--stacks 5,5]``: one image
  method's seeds trained as one stack, each seed's files as ``train`` writes them
  (:func:`repens.experiments.image.run_image_stack`); ``--stacks``: several stacks side by side
  in one process, a thread and a CUDA stream each (:mod:`repens.experiments.streams`).
* ``hmc --spec JSON --out FILE``: the HMC reference of a toy problem (``resolve_hmc_job``).
* ``prepare-images --dataset D --root DIR [--mirror DIR] --out NPZ``: an image data set, verified.
* ``image-table ... METRICS...``: Table 1 and its comparison with the paper.
* ``synthetic-table --out-csv F --out-tex F [--out-html F] NPZ...``: metrics table of the synthetic runs.
* ``synthetic-figure --target T --out-png F --out-pdf F NPZ...``: Figure 2 / Figure F.1.
* ``toy-figure --dataset D ...`` and ``toy-table ...``: Figures 1 and 3, distance to HMC.
* ``training-curves --convergence F --out PNG [--repulsion-png P --repulsion-csv C]``: Table 1's
  training curves and the repulsion diagnostic.
* ``uci-download --root DIR --name NAME``: fetch one UCI dataset with its standard splits.
* ``uci-table ... METRICS.json...``: Table 2 (UCI regression) and its comparison with the seeds.
* ``claims --out-csv F --out-md F [--synthetic F --toy F --table1 F --uci F ...]``: the claim
  scorecard over the result tables (a missing table makes its claims "not run").
* ``claim-figures --comparisons F --out-dir D``: one evidence figure per claim, from the
  scorecard's ``claims_comparisons.csv`` (:mod:`repens.report.claim_figures`).
* ``claims-page --claims F --figures D --out F``: the scorecard's HTML from its CSVs, each
  claim's evidence figure embedded.
* ``budget [--scale paper] [--timings F | --save-timings F]``: device-hours of Table 1's
  jobs per dataset x method on this device (step times timed here or read), before any
  run (:mod:`repens.pipeline.budget`).
* ``restore-result REF_FILE OUT --spec JSON``: a run of the reference tree copied into results/
  after :func:`repens.core.results.check_result` and its SHA-256 in ``runs.json`` (rule ``restore_result``).
* ``where FILE [--dataset D --method M --metric KEY]``: where a result or a table row came
  from (commit, versions, device, job spec, log; :mod:`repens.jobs.provenance`).
* ``export-jobs TARGETS --out jobs.json``, ``run-jobs jobs.json --parallel K --deadline S``,
  ``lease jobs.json --until S --out DIR`` (run-jobs and pack sized to one device call),
  ``pack jobs.json --out PREFIX``, ``import-results PREFIX.tar.gz*``: a target's training jobs
  on an offline GPU node without Snakemake (:mod:`repens.pipeline.kit`).

``train`` and ``hmc`` stamp their result files with the provenance; every table command
writes ``<csv>.provenance.json`` beside its CSV. Every table is written through
:func:`repens.report.tables.write_table` (LaTeX, HTML, CSV; Table 1 also PNG).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["main"]


def _setup_logging(path: str | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(path, mode="a"))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", handlers=handlers, force=True
    )


def _train(args: argparse.Namespace) -> int:
    from repens.jobs.job import Job, SpecError

    try:  # an unknown experiment or setting, or a value of the wrong type: one line naming it
        job = Job.from_spec({**json.loads(args.spec), **_runtime_fields(args.runtime)})
    except (SpecError, json.JSONDecodeError) as err:
        raise SystemExit(f"error: --spec: {err}") from None
    out = Path(args.out)
    checkpoint = Path(args.checkpoint) if args.checkpoint else out.with_name(out.name + ".ckpt")
    runtime = _runtime(args)
    from repens.training.attempt import GpuUnusable, JobBusy, check_granted_gpu, job_lock

    try:  # a duplicate of a running attempt, or a GPU granted but not usable: one line, nothing touched
        with job_lock(out, logging.getLogger("repens.train")):
            check_granted_gpu(args.device if job.experiment == "image" else "cpu")
            return _train_locked(job, out, checkpoint, runtime, args.log)
    except (JobBusy, GpuUnusable) as err:  # logged: the attempts log keeps the line too
        logging.getLogger("repens").error("%s", err)
        return 75 if isinstance(err, JobBusy) else 2  # 75: EX_TEMPFAIL, try again later


def _train_locked(job, out: Path, checkpoint: Path, runtime: dict, log_file: str | None) -> int:
    """``train`` while holding the job's lock: restore a finished job, else train it."""
    from repens.core.jobkey import final_key, final_record_path, restore_final_outputs, write_final_record
    from repens.experiments import RUNNERS
    from repens.training.train import Interrupted, NonFiniteError

    # a job that finished before (Snakemake may delete outputs it took as incomplete): restored, not retrained
    outputs = [out.with_name("predictions.npz"), out] if job.experiment == "image" else [out]  # out: last
    record, key = final_record_path(checkpoint), final_key(job.spec, runtime)
    if restore_final_outputs(record, key, outputs, logging.getLogger("repens.train"), check=job.spec):
        return 0
    try:
        RUNNERS[job.experiment](job, out, checkpoint, **runtime)
    except NonFiniteError as err:
        logging.getLogger("repens").error("%s", err)
        return 3
    except Interrupted as err:
        logging.getLogger("repens").warning("%s", err)
        return 128 + err.signum  # 143 for SIGTERM, 130 for SIGINT
    _stamp(outputs, job.spec, log_file)
    write_final_record(record, key, outputs)
    return 0


def _runtime_fields(text: str | None) -> dict:
    """``--runtime JSON``: the fields of a job that do not change its result
    (:data:`repens.core.jobkey.RUNTIME_FIELDS`), given apart from ``--spec`` so that the
    workflow does not track them; any other field is refused in one line."""
    from repens.core.jobkey import RUNTIME_FIELDS

    if not text:
        return {}
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as err:
        raise SystemExit(f"error: --runtime: not JSON ({err})") from None
    if not isinstance(fields, dict):
        raise SystemExit("error: --runtime: a JSON object of runtime fields is expected")
    other = sorted(set(fields) - RUNTIME_FIELDS)
    if other:
        raise SystemExit(
            f"error: --runtime: {other[0]!r} changes a result and belongs in --spec "
            f"(runtime fields: {', '.join(sorted(RUNTIME_FIELDS))})"
        )
    return fields


def _runtime(args: argparse.Namespace) -> dict:
    """The runner's keyword arguments from ``--input KEY=PATH`` and ``--device``."""
    runtime: dict = {}
    if args.input:
        bad = [item for item in args.input if "=" not in item]
        if bad:
            raise SystemExit(f"error: --input takes KEY=PATH, got {bad}")
        runtime["inputs"] = dict(item.split("=", 1) for item in args.input)
    if args.device:
        runtime["device"] = args.device
    return runtime


def _train_stack(args: argparse.Namespace) -> int:
    """``train-stack``: one method's seeds of one image data set trained as one stack
    (:func:`repens.experiments.image.run_image_stack`), each seed's files stamped as ``train``
    stamps them; with ``--stacks``, several such stacks side by side in this process, each on
    a thread and a CUDA stream of its own (:func:`repens.experiments.streams.run_image_stacks`)."""
    from repens.experiments.image import run_image_stack
    from repens.experiments.streams import check_stacks
    from repens.jobs.job import ImageJob, Job, SpecError

    try:  # jobs that are not one image method's seeds: one line naming the difference
        runtime_fields = _runtime_fields(args.runtime)
        jobs = [Job.from_spec({**json.loads(spec), **runtime_fields}) for spec in args.spec]
        other = [job.experiment for job in jobs if not isinstance(job, ImageJob)]
        if other:
            raise SpecError(f"train-stack takes image jobs, got experiment {other[0]!r}")
        if len(args.out) != len(jobs):
            raise SpecError(f"{len(jobs)} --spec but {len(args.out)} --out; give one --out per --spec, in order")
        outs = [Path(out) for out in args.out]
        sizes = _stack_sizes(args.stacks, len(jobs))
        if len(sizes) > 1 and args.checkpoint:
            raise SpecError("--checkpoint names one stack's checkpoint; with several --stacks each has its own")
        cuts = [sum(sizes[:k]) for k in range(len(sizes) + 1)]
        stacks = [(jobs[a:b], outs[a:b]) for a, b in zip(cuts, cuts[1:])]
        check_stacks(stacks)
    except (SpecError, json.JSONDecodeError) as err:
        raise SystemExit(f"error: --spec: {err}") from None
    runtime = _runtime(args)
    from contextlib import ExitStack

    from repens.training.attempt import GpuUnusable, JobBusy, check_granted_gpu, job_lock

    try:
        with ExitStack() as locks:  # each seed's lock, as its own train job would hold it
            for out in outs:
                locks.enter_context(job_lock(out, logging.getLogger("repens.train")))
            check_granted_gpu(args.device)
            if len(stacks) == 1:
                outcomes = [_outcome(lambda: run_image_stack(jobs, outs, _path(args.checkpoint), **runtime))]
            else:
                from repens.experiments.streams import run_image_stacks

                whose = logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
                for handler in logging.getLogger().handlers:  # each line names its stack
                    handler.setFormatter(whose)
                outcomes = run_image_stacks(stacks, **runtime)
    except (JobBusy, GpuUnusable) as err:
        logging.getLogger("repens").error("%s", err)
        return 75 if isinstance(err, JobBusy) else 2
    for (stack_jobs, stack_outs), outcome in zip(stacks, outcomes):
        if outcome is None:
            for job, out in zip(stack_jobs, stack_outs):
                _stamp([out, out.with_name("predictions.npz")], job.spec, args.log)
    return _exit_code(outcomes)


def _stack_sizes(text: str | None, count: int) -> list[int]:
    """``--stacks 5,5,1``: the sizes of the stacks the --spec/--out pairs form, in order
    (default: one stack of all), positive and adding up to the pairs' count."""
    from repens.jobs.job import SpecError

    if not text:
        return [count]
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise SpecError(f"--stacks: {text!r} is not a list of stack sizes such as 5,5,1") from None
    if any(size < 1 for size in sizes) or sum(sizes) != count:
        raise SpecError(f"--stacks {text}: sizes of at least 1 adding up to the {count} --spec/--out pairs")
    return sizes


def _outcome(run: Callable[[], None]) -> BaseException | None:
    try:
        run()
    except Exception as err:  # noqa: BLE001 (reported by _exit_code)
        return err
    return None


def _exit_code(outcomes: list[BaseException | None]) -> int:
    """The process's exit status from its stacks' outcomes (each failure logged in one line):
    a stop signal's 128 + signum first (the runner then takes the others for interrupted), a
    non-finite update's 3, any other error re-raised (its traceback) after the others ended."""
    from repens.training.train import Interrupted, NonFiniteError

    failed = [err for err in outcomes if err is not None]
    for err in failed:
        if isinstance(err, Interrupted):
            logging.getLogger("repens").warning("%s", err)
        elif isinstance(err, NonFiniteError):
            logging.getLogger("repens").error("%s", err)
    stopped = [err for err in failed if isinstance(err, Interrupted)]
    if stopped:
        return 128 + stopped[0].signum  # 143 for SIGTERM, 130 for SIGINT
    other = [err for err in failed if not isinstance(err, NonFiniteError)]
    if other:
        for err in other[1:]:
            logging.getLogger("repens").error("another stack failed too", exc_info=err)
        raise other[0]
    return 3 if failed else 0


def _stamp(paths: list[Path], job: dict, log_file: str | None) -> None:
    """Record the provenance in a finished job's result files (never fails the job)."""
    from repens.jobs.provenance import collect, stamp

    prov = collect(job, log_file=log_file)
    for path in paths:
        if path.exists():
            stamp(path, prov)


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _sidecar(out_csv: str, inputs: list[str]) -> None:
    from repens.jobs.provenance import write_sidecar

    write_sidecar(out_csv, inputs)


def _where(args: argparse.Namespace) -> int:
    from repens.jobs.provenance import describe

    print(describe(args.file, dataset=args.dataset, method=args.method, metric=args.metric))
    return 0


def _hmc(args: argparse.Namespace) -> int:
    from repens.experiments.hmc import run_hmc
    from repens.training.attempt import JobBusy, job_lock
    from repens.training.hmc import HMCDiagnosticsError
    from repens.training.train import Interrupted

    try:
        out = Path(args.out)
        job = json.loads(args.spec)
        with job_lock(out, logging.getLogger("repens.hmc")):  # a duplicate stops here, in one line
            run_hmc(job, out, out.with_name(out.name + ".ckpt"))
    except JobBusy as err:
        logging.getLogger("repens").error("%s", err)
        return 75
    except HMCDiagnosticsError as err:
        logging.getLogger("repens").error("%s", err)
        return 4
    except Interrupted as err:  # SIGTERM / SIGINT: the sampler state is checkpointed
        logging.getLogger("repens").warning("%s", err)
        return 128 + err.signum
    _stamp([out], job, args.log)
    return 0


def _prepare_images(args: argparse.Namespace) -> int:
    from repens.data.images import prepare_arrays

    # a missing or malformed file raises a DataError: main prints it as one line, exit 2;
    # under one lock of the data folder, so runs sharing it wait for each other
    if prepare_arrays(
        args.dataset,
        Path(args.root),
        Path(args.out),
        Path(args.mirror) if args.mirror else None,
        download=not args.offline,
    ):
        logging.getLogger("repens").info("wrote %s", args.out)
    return 0


def _image_table(args: argparse.Namespace) -> int:
    from repens.report.image import load_records, write_table1
    from repens.summaries.convergence import unconverged_image_rows

    records = load_records(args.inputs)  # a bad result file stops here, named, before the logs are read
    write_table1(
        [Path(p) for p in args.inputs],
        Path(args.reference),
        json.loads(args.labels),
        args.datasets.split(","),
        args.methods.split(","),
        Path(args.out_tex),
        Path(args.out_png),
        Path(args.out_csv),
        Path(args.out_vs_paper),
        out_html=_path(args.out_html),
        out_vs_paper_html=_path(args.out_vs_paper_html),
        paper_rows=json.loads(args.paper_rows),
        groups=json.loads(args.groups),
        unconverged=set(unconverged_image_rows(args.inputs, args.log_root)),
        records=records,
    )
    for table in (args.out_csv, args.out_vs_paper):
        _sidecar(table, args.inputs)
    return 0


def _synthetic_table(args: argparse.Namespace) -> int:
    from repens.pipeline.from_runs import write_metrics_table

    write_metrics_table(
        [Path(p) for p in args.inputs],
        Path(args.out_csv),
        Path(args.out_tex),
        labels=json.loads(args.labels),
        out_html=_path(args.out_html),
    )
    _sidecar(args.out_csv, args.inputs)
    return 0


def _synthetic_figure(args: argparse.Namespace) -> int:
    from repens.pipeline.from_runs import plot_target_panels

    plot_target_panels(
        args.target,
        [Path(p) for p in args.inputs],
        Path(args.out_png),
        Path(args.out_pdf),
        labels=json.loads(args.labels),
    )
    return 0


def _toy_figure(args: argparse.Namespace) -> int:
    from repens.pipeline.from_runs import plot_classification_panels, plot_regression_panels

    plot = {"regression": plot_regression_panels, "classification": plot_classification_panels}[args.dataset]
    plot([Path(p) for p in args.inputs], Path(args.out_png), Path(args.out_pdf), labels=json.loads(args.labels))
    return 0


def _training_curves(args: argparse.Namespace) -> int:
    from repens.pipeline.from_runs import training_curves

    lines = training_curves(
        Path(args.convergence), Path(args.out), args.dataset, _path(args.repulsion_png), _path(args.repulsion_csv)
    )
    print("\n".join(lines))
    return 0


def _training_curves_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--convergence", required=True, help="results/convergence.csv (its log column)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--dataset", default="fashionmnist")
    p.add_argument("--repulsion-png", help="also draw the repulsion diagnostic here")
    p.add_argument("--repulsion-csv", help="also write its summary per method here")


def _toy_table(args: argparse.Namespace) -> int:
    from repens.pipeline.from_runs import write_distance_table

    def pair(hmc: list[str] | None, methods: list[str] | None):
        return None if not hmc else ([Path(h) for h in hmc], [Path(m) for m in methods or []])

    write_distance_table(
        pair(args.regression_hmc, args.regression),
        pair(args.classification_hmc, args.classification),
        Path(args.out_csv),
        Path(args.out_tex),
        labels=json.loads(args.labels),
        out_html=_path(args.out_html),
    )
    _sidecar(
        args.out_csv,
        [
            *(args.regression_hmc or []),
            *(args.regression or []),
            *(args.classification_hmc or []),
            *(args.classification or []),
        ],
    )
    return 0


def _uci_download(args: argparse.Namespace) -> int:
    from repens.data.uci import UCI_URL, download_dataset

    download_dataset(args.root, args.name, args.url or UCI_URL)
    return 0


def _uci_table(args: argparse.Namespace) -> int:
    from repens.report.uci import write_uci_tables

    write_uci_tables(
        [Path(p) for p in args.inputs],
        args.datasets,
        args.methods,
        json.loads(args.labels),
        Path(args.seeds),
        Path(args.out_tex),
        Path(args.out_csv),
        _path(args.out_html),
        Path(args.out_seeds),
        out_seeds_html=_path(args.out_seeds_html),
        out_vs_de=_path(args.out_vs_de),
        out_vs_de_html=_path(args.out_vs_de_html),
        out_md=_path(args.out_md),
        out_seeds_md=_path(args.out_seeds_md),
    )
    for table in (args.out_csv, args.out_seeds, args.out_vs_de):
        if table:
            _sidecar(table, args.inputs)
    return 0


def _restore_result(args: argparse.Namespace) -> int:
    """``restore-result``: a run of the reference tree copied into results/ for the job it
    is taken for, after :func:`repens.core.results.check_result` and the SHA-256 that
    ``runs.json`` lists for it; any failure is one line naming the file, nothing copied."""
    from repens.core.atomic import write_bytes_atomic
    from repens.core.results import ResultMismatch, check_result
    from repens.report.results_page import changed_runs

    source, out = Path(args.input), Path(args.out)
    try:
        spec = json.loads(args.spec)
    except json.JSONDecodeError as err:
        raise SystemExit(f"error: --spec: not JSON ({err})") from None
    rel = os.path.relpath(source, args.reference)
    for _, why in changed_runs(args.reference, [Path(rel).as_posix()]):
        raise ResultMismatch(source, why)
    data = source.read_bytes()
    check_result(source, spec)
    write_bytes_atomic(out, data)
    return 0


def _restore_result_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="the run's file in the reference tree")
    p.add_argument("out", help="where it goes under results/")
    p.add_argument("--spec", required=True, help="the job the file is taken for (JSON, as train's --spec)")
    p.add_argument("--reference", default="reference", help="the reference tree (its results/runs.json)")


def _reference(args: argparse.Namespace) -> int:
    from repens.report import results_page

    if args.action == "publish":
        try:
            copied = results_page.publish(args.results, args.reference, allow_drop=args.allow_drop)
        except (FileNotFoundError, FileExistsError) as err:  # an empty or partial rebuild: nothing changed
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"kept {len(copied)} files in {Path(args.reference) / 'results'}")
        return 0
    if args.action == "check":
        problems = results_page.check(args.results, args.reference)
        for line in problems:
            print(f"differs: {line}", file=sys.stderr)
        kept = sorted((Path(args.reference) / "results").rglob("*.csv"))
        if problems:
            print(
                f"error: {len(problems)} differences between {args.results} and {args.reference}/results",
                file=sys.stderr,
            )
            return 1
        print(
            f"{len(kept)} tables in {args.results} equal those kept in {args.reference}/results "
            f"(rtol {results_page.RTOL})"
        )
        return 0
    import yaml

    config = yaml.safe_load(Path(args.configfile).read_text())
    from repens.core.variants import expand_variants
    from repens.pipeline.config import paper_seeds

    expand_variants(config)
    results_page.write_page(args.reference, config, paper_seeds(config), args.out)
    print(f"wrote {args.out}")
    return 0


def _claims(args: argparse.Namespace) -> int:
    from repens.jobs.provenance import sidecar_path
    from repens.report.claims import write_scorecard

    files = {
        "synthetic": args.synthetic,
        "toy": args.toy,
        "table1": args.table1,
        "uci": args.uci,
        "table1_paper": args.table1_paper,
        "uci_seeds": args.uci_seeds,
        "convergence": args.convergence,
    }
    write_scorecard(
        files,
        Path(args.out_csv),
        Path(args.out_md),
        _path(args.out_html),
        json.loads(args.labels),
        groups=json.loads(args.groups) if args.groups else None,
        variant=args.variant,
        paper_protocol=args.paper_protocol,
    )
    _sidecar(args.out_csv, [str(sidecar_path(p)) for p in files.values() if p and sidecar_path(p).exists()])
    return 0


def _claim_figures(args: argparse.Namespace) -> int:
    from repens.report.claim_figures import write_claim_figures

    written = write_claim_figures(args.comparisons, args.out_dir)
    print(f"wrote {len(written)} figures in {args.out_dir}")
    return 0


def _claims_page(args: argparse.Namespace) -> int:
    from repens.report.claims import write_scorecard_html

    write_scorecard_html(args.claims, args.out, args.figures)
    print(f"wrote {args.out}")
    return 0


def _budget(args: argparse.Namespace) -> int:
    from repens.pipeline.budget import BudgetError, format_budget, load_config, plan, timing_rows, write_timings

    def names(value: str | None) -> list[str] | None:
        return [v for v in value.split(",") if v] if value else None

    try:
        config = load_config(args.configfile, args.scale)
        cells = plan(config, names(args.datasets), names(args.methods))
        seeds = cells[0].seeds if cells else ()
        header = [
            f"Table 1 budget at scale={config['scale']} ({args.configfile}): "
            f"{len({c.dataset for c in cells})} dataset(s) x {len({c.method for c in cells})} method(s) x "
            f"{len(seeds)} seed(s) {list(seeds)} = {sum(len(c.seeds) for c in cells)} jobs"
        ]
        steps_timed: dict[tuple, int] = {}
        timing, device, unit, how = _budget_timing(args, steps_timed)
        header.append(how)
        rows = _budget_rows(cells, timing)
        print(format_budget(rows, device, unit, header))
        if args.save_timings:
            write_timings(args.save_timings, {**timing_rows(rows, cells, device, steps_timed), "unit": unit})
    except BudgetError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    return 0


def _budget_timing(args: argparse.Namespace, steps_timed: dict[tuple, int]) -> tuple[Callable, str, str, str]:
    """``budget``'s step times: read from ``--timings`` or measured here (the steps each
    measurement ran go into ``steps_timed``); (timing, device, unit, the header line)."""
    from repens.pipeline.budget import device_name, read_timings, time_stage

    if args.timings:
        timing, device = read_timings(args.timings)
        unit = "CPU-hours" if device.lower().startswith("cpu") else "GPU-hours"
        return (
            timing,
            device,
            unit,
            "step times: read from the file; counted: training steps only (not start-up, data loading or evaluation)",
        )
    device, unit = device_name(args.device)
    how = (
        f"step times: measured here, the marginal step ({args.warmup} warm-up step(s), then a "
        "short run and one "
        + (f"{args.steps} step(s)" if args.steps else f"about {args.seconds:g} s")
        + " longer: each run's set-up, eager warm-up steps and graph capture cancel)"
        + " per (dataset, method, stage), one job on the device; counted: training steps only "
        "(not start-up, data loading or evaluation)"
    )

    def timing(dataset, method, stage):
        print(
            f"timing {dataset}/{method} ({stage.name}: {stage.members} members, batch "
            f"{stage.spec.get('batch_size')}) ...",
            file=sys.stderr,
            flush=True,
        )
        seconds, steps = time_stage(stage, args.device, args.steps, args.warmup, args.seconds)
        steps_timed[(dataset, method, stage.name)] = steps
        return seconds

    return timing, device, unit, how


def _budget_rows(cells: list, timing: Callable) -> list:
    """``budget``'s rows, the ``repens`` log quiet meanwhile."""
    from repens.pipeline.budget import budget

    # the timed loops' progress lines and warnings are not the budget's output; the level
    # comes back afterwards (main() may run again in this process, e.g. in the tests)
    repens_log = logging.getLogger("repens")
    level = repens_log.level
    repens_log.setLevel(logging.ERROR)
    try:
        return budget(cells, timing)
    finally:
        repens_log.setLevel(level)


def _kit(run):
    """A kit command (:mod:`repens.pipeline.kit`): its KitError as one line, exit 2."""

    def handler(args: argparse.Namespace) -> int:
        from repens.pipeline.kit import KitError

        try:
            return run(args)
        except KitError as err:
            print(f"error: {err}", file=sys.stderr, flush=True)
            return 2

    return handler


@_kit
def _export_jobs(args: argparse.Namespace) -> int:
    from repens.pipeline.kit import describe_export, export_jobs, write_json

    data = export_jobs(
        args.targets,
        config=args.config,
        configfile=args.configfile,
        snakefile=args.snakefile,
        directory=args.directory,
        forceall=args.forceall,
        include=args.include,
        exclude=args.exclude,
        stage=args.stage_raw,
        expect_from=_expect_from(args),
        order=args.order,
        skip_held=not args.keep_held,
    )
    write_json(Path(args.out), data)
    print(describe_export(data))
    print(f"wrote {args.out}")
    return 0


def _expect_from(args: argparse.Namespace) -> Path | None:
    """export-jobs' reference tree for expected times: --expect-from, else reference/ under
    the working directory where there is one; None with --no-expect."""
    if args.no_expect:
        return None
    if args.expect_from:
        if not Path(args.expect_from).is_dir():
            raise SystemExit(f"error: --expect-from {args.expect_from}: no such folder")
        return Path(args.expect_from)
    default = Path(args.directory) / "reference"
    return default if default.is_dir() else None


@_kit
def _run_jobs(args: argparse.Namespace) -> int:
    from repens.pipeline.kit import run_jobs

    return run_jobs(
        args.jobs,
        parallel=args.parallel,
        deadline=args.deadline,
        grace=args.grace,
        device=args.device,
        raw=args.raw,
        directory=args.directory,
        state=args.state,
        retry_failed=args.retry_failed,
        prepare_only=args.prepare_only,
        min_run=args.min_run,
        only=args.only or (),
        stack_seeds=args.stack_seeds,
        expect_margin=args.expect_margin,
        then=args.then,
        side_by_side=args.side_by_side,
    )


@_kit
def _lease(args: argparse.Namespace) -> int:
    from repens.pipeline.kit import lease

    return lease(
        args.jobs,
        args.out,
        until=args.until,
        only=args.only or (),
        parallel=args.parallel,
        min_run=args.min_run,
        grace=args.grace,
        pack_reserve=args.pack_reserve,
        device=args.device,
        raw=args.raw,
        directory=args.directory,
        stack_seeds=args.stack_seeds,
        expect_margin=args.expect_margin,
        then=args.then,
        side_by_side=args.side_by_side,
    )


@_kit
def _pack(args: argparse.Namespace) -> int:
    from repens.pipeline.kit import MIB, pack

    pack(
        args.jobs,
        args.out,
        directory=args.directory,
        state=args.state,
        max_files=args.max_files,
        max_bytes=int(args.max_mib * MIB),
        checkpoints=args.checkpoints,
        only_new=args.only_new,
    )
    return 0


@_kit
def _import_results(args: argparse.Namespace) -> int:
    from repens.pipeline.kit import import_results

    import_results(
        args.parts,
        directory=args.directory,
        snakefile=args.snakefile,
        config=args.config,
        configfile=args.configfile,
        verify=not args.no_verify,
        prepare=not args.no_prepare,
        metadata=not args.no_metadata,
        cores=args.cores,
    )
    return 0


# ----------------------------------------------------------------------------- the commands' options
#: the help of an optional ``--out-html`` of a table command
TABLE_HTML = ("html", "the table as HTML (the Snakemake report's)")


def _outputs(p: argparse.ArgumentParser, *outputs: str | tuple[str, str]) -> None:
    """A command's ``--out-NAME`` files, in order: a name is a required file, a (name, help)
    pair an optional one."""
    for out in outputs:
        if isinstance(out, str):
            p.add_argument(f"--out-{out}", required=True)
        else:
            p.add_argument(f"--out-{out[0]}", help=out[1])


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", required=True, help="the job as JSON (see repens.pipeline.config.resolve_job)")
    p.add_argument(
        "--runtime",
        help="the job's fields that do not change its result, as JSON "
        "(repens.core.jobkey.RUNTIME_FIELDS: log_every, checkpoint_seconds, uci_data)",
    )
    p.add_argument("--out", required=True, help="results file to write")
    p.add_argument("--checkpoint", help="checkpoint file (default: OUT.ckpt)")
    p.add_argument(
        "--input",
        action="append",
        metavar="KEY=PATH",
        help="an input file of the job (image jobs: train=DATA.npz, ood=OOD.npz)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to train (image jobs)")


def _train_stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spec",
        action="append",
        required=True,
        help="a seed's job as JSON (repeat once per seed; the jobs differ only in seed)",
    )
    p.add_argument("--out", action="append", required=True, help="that seed's metrics file (repeat, in --spec order)")
    p.add_argument("--runtime", help="the jobs' fields that do not change a result, as JSON (as train's)")
    p.add_argument("--checkpoint", help="the stack's checkpoint (default: the first OUT.stack.ckpt)")
    p.add_argument(
        "--stacks",
        metavar="SIZES",
        help="several stacks side by side, one thread and CUDA stream each: the --spec/--out pairs "
        "in stacks of these sizes, in order (e.g. 5,5,1; default: one stack of all)",
    )
    p.add_argument("--input", action="append", metavar="KEY=PATH", help="train=DATA.npz, ood=OOD.npz")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to train")


def _hmc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", required=True, help="the job as JSON (see repens.pipeline.config.resolve_hmc_job)")
    p.add_argument("--out", required=True, help="predictions file to write (.npz)")


def _prepare_images_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="fashionmnist, mnist, cifar10 or svhn")
    p.add_argument("--root", required=True, help="data folder (a torchvision root)")
    p.add_argument("--mirror", help="folder with the original files, laid out as a torchvision root")
    p.add_argument("--offline", action="store_true", help="never download")
    p.add_argument("--out", required=True, help=".npz to write")


def _image_table_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", required=True, help="the paper's values (CSV)")
    p.add_argument("--labels", default="{}", help="JSON: method key -> display name")
    p.add_argument(
        "--paper-rows", default="{}", help="JSON: method key -> the paper's row it is set beside (config paper_row)"
    )
    p.add_argument("--datasets", required=True, help="comma-separated, in block order")
    p.add_argument("--methods", required=True, help="comma-separated, in row order")
    p.add_argument(
        "--groups",
        default="{}",
        help="JSON: method key -> its protocol, in block order (a protocol named 'controls...' is never bold)",
    )
    p.add_argument("--log-root", default=None, help="where the runs' logs are (a rebuild: the reference tree)")
    _outputs(p, "tex", "png", "csv", TABLE_HTML, "vs-paper", ("vs-paper-html", "the comparison as HTML"))
    p.add_argument("inputs", nargs="+", help="metrics.json files written by image training jobs")


def _synthetic_table_args(p: argparse.ArgumentParser) -> None:
    _outputs(p, "csv", "tex", TABLE_HTML)
    p.add_argument("--labels", default="{}", help="JSON: method key -> display name")
    p.add_argument("inputs", nargs="+", help="particle files (.npz) written by 'train'")


def _synthetic_figure_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True)
    _outputs(p, "png", "pdf")
    p.add_argument("--labels", default="{}", help="JSON: method key -> display name")
    p.add_argument("inputs", nargs="+", help="particle files (.npz), one per method, in panel order")


def _toy_figure_args(p: argparse.ArgumentParser) -> None:
    from repens.core import registry

    p.add_argument("--dataset", required=True, choices=registry.datasets_of("toy"))
    _outputs(p, "png", "pdf")
    p.add_argument("--labels", default="{}", help="JSON: method key -> display name")
    p.add_argument("inputs", nargs="+", help="prediction files (.npz), one per panel, in order")


def _toy_table_args(p: argparse.ArgumentParser) -> None:
    _outputs(p, "csv", "tex", TABLE_HTML)
    p.add_argument("--labels", default="{}", help="JSON: method key -> display name")
    p.add_argument("--regression-hmc", nargs="+", help="the HMC reference of each seed")
    p.add_argument("--regression", nargs="+", help="the methods' files of those seeds")
    p.add_argument("--classification-hmc", nargs="+")
    p.add_argument("--classification", nargs="+")


def _uci_download_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", required=True, help="data root; files go to ROOT/NAME/data/")
    p.add_argument("--name", required=True, help="folder name, e.g. bostonHousing")
    p.add_argument("--url", help="base URL (default: repens.data.uci.UCI_URL)")


def _uci_table_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--datasets", nargs="+", required=True, help="block order")
    p.add_argument("--methods", nargs="+", required=True, help="row order")
    p.add_argument("--labels", default="{}", help="JSON: method key -> display name")
    p.add_argument("--seeds", required=True, help="the transcribed seed values (CSV)")
    _outputs(
        p,
        "tex",
        "csv",
        TABLE_HTML,
        "seeds",
        ("seeds-html", "the comparison as HTML"),
        ("vs-de", "each method minus the deep ensemble, split by split (CSV)"),
        ("vs-de-html", "the same as HTML"),
        ("md", "Table 2 as Markdown (the results page's)"),
        ("seeds-md", "the comparison with the seeds as Markdown"),
    )
    p.add_argument("inputs", nargs="+", help="metrics.json of the UCI jobs")


def _claims_args(p: argparse.ArgumentParser) -> None:
    _outputs(p, "csv", "md", ("html", "the scorecard as HTML (the Snakemake report's)"))
    p.add_argument("--labels", default="{}", help="JSON: method key -> display name")
    p.add_argument(
        "--groups",
        help="JSON: the method groups the claims compare (repens.pipeline.config.method_groups of "
        "the config; default: the repository config's)",
    )
    p.add_argument(
        "--variant",
        metavar="NAME",
        help="Table 1's claims alone, each method m read as the variant's method m-NAME (experiments.image.variants)",
    )
    p.add_argument(
        "--paper-protocol",
        metavar="NAME",
        help="the variant whose Table 1 block follows the protocol that produced the paper's numbers "
        "(experiments.image.paper_protocol): Table 1's claims scored on it with the code's metrics, "
        "the image experiment's own methods shown as another protocol",
    )
    for name, what in (
        ("synthetic", "results/synthetic/metrics.csv"),
        ("toy", "results/toy/distance_to_hmc.csv"),
        ("table1", "results/table1.csv"),
        ("uci", "results/table2_uci.csv"),
        ("table1-paper", "workflow/resources/table1_paper.csv"),
        ("uci-seeds", "workflow/resources/table2_seeds.csv"),
    ):
        p.add_argument(f"--{name}", help=f"{what} (absent or missing: its claims are 'not run')")
    p.add_argument(
        "--convergence",
        help="results/convergence.csv (python -m repens.summaries.convergence convergence): a "
        "comparison resting on an unconverged run is inconclusive",
    )


def _claim_figures_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--comparisons", required=True, help="results/claims_comparisons.csv (written by `claims`)")
    p.add_argument("--out-dir", required=True, help="where <claim id>.png go")


def _claims_page_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--claims", required=True, help="results/claims.csv (its _diagnostics.csv is read beside it)")
    p.add_argument("--figures", help="the folder of the evidence figures (claim-figures --out-dir)")
    p.add_argument("--out", required=True)


def _reference_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=["publish", "check", "page"],
        help="publish: copy results/'s tables and figures into REFERENCE/results; check: compare "
        "results/'s tables with those; page: write the results page from REFERENCE",
    )
    p.add_argument("--reference", default="reference", help="the reference tree (default: reference)")
    p.add_argument("--results", default="results", help="where the rebuild wrote (default: results)")
    p.add_argument("--configfile", default="config.yaml", help="the pipeline's config (page: the grid at paper scale)")
    p.add_argument("--out", default="docs/results.md", help="page: where to write it (default: docs/results.md)")
    p.add_argument(
        "--allow-drop", action="store_true", help="publish: drop kept files the rebuild did not write (else refused)"
    )


def _budget_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--configfile", default="config.yaml", help="the pipeline's config (default: config.yaml)")
    p.add_argument("--scale", choices=["quick", "paper"], help="override the config's scale (as --config scale=)")
    p.add_argument("--datasets", help="comma-separated (default: the datasets Table 1 shows at that scale)")
    p.add_argument("--methods", help="comma-separated (default: experiments.image.methods)")
    p.add_argument("--timings", help="read step times from this file (--save-timings, or bench_image.py --json)")
    p.add_argument("--save-timings", help="write the step times measured here to this file (JSON)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to time the steps")
    p.add_argument("--steps", type=int, help="timed steps per (dataset, method, stage) (default: --seconds' worth)")
    p.add_argument("--seconds", type=float, default=3.0, help="time this long per stage when --steps is unset")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")


def _where_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a result file (metrics.json, .npz) or a table CSV (reads its .provenance.json)")
    p.add_argument("--dataset", help="table rows: the dataset (block) of the row")
    p.add_argument("--method", help="table rows: the method of the row")
    p.add_argument("--metric", help="also print each input's value of this metric key (e.g. accuracy)")


def _export_jobs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="+", help="Snakemake targets, e.g. results/table1.tex")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE", help="as snakemake --config")
    p.add_argument("--configfile", help="as snakemake --configfile")
    p.add_argument("--snakefile", help="default: this checkout's Snakefile")
    p.add_argument("--directory", "-d", default=".", help="Snakemake's working directory (default: here)")
    p.add_argument("--forceall", action="store_true", help="every job of the targets, also those already built here")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="only jobs whose first output matches (e.g. 'results/image/fashionmnist/*'); repeatable",
    )
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="leave out matching jobs")
    p.add_argument(
        "--stage-raw",
        metavar="DIR",
        help="copy the original image archives the data steps read into DIR (e.g. data/raw, ignored by "
        "git) to send with the tree",
    )
    p.add_argument(
        "--expect-from",
        metavar="DIR",
        help="a reference tree: the jobs whose results it holds are left out, each other job gets the longest "
        "GPU run of its method there as its expected time, so run-jobs starts only what fits before its "
        "deadline (default: reference/, if there)",
    )
    p.add_argument("--no-expect", action="store_true", help="no reference tree: no expected times, none left out")
    p.add_argument("--keep-held", action="store_true", help="keep the jobs whose results the reference tree holds")
    p.add_argument(
        "--order",
        choices=["seed", "snakemake"],
        default="seed",
        help="the jobs' order, which run-jobs follows: seed by seed, the longest expected first (default), "
        "or Snakemake's plan",
    )
    p.add_argument("--out", required=True, help="the jobs file to write (JSON)")


def _run_jobs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", help="the jobs file (export-jobs)")
    p.add_argument("--parallel", "-k", type=int, default=1, help="jobs at a time (default 1)")
    p.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="send SIGTERM to the running jobs this long after the start (they checkpoint and exit)",
    )
    p.add_argument("--grace", type=float, default=60.0, help="seconds a job has to exit after SIGTERM (default 60)")
    p.add_argument(
        "--min-run",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="start no job with less than this left before the deadline",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="override the jobs' --device")
    p.add_argument(
        "--raw", default="data/raw", help="the original image archives, a torchvision root (default data/raw)"
    )
    p.add_argument("--directory", "-d", default=".", help="where the jobs' paths are (default: here)")
    p.add_argument("--state", help="what was run and how it ended (default results/run-jobs.json)")
    p.add_argument("--only", action="append", metavar="GLOB", help="only jobs whose first output matches; repeatable")
    p.add_argument("--retry-failed", action="store_true", help="run failed jobs again")
    p.add_argument("--prepare-only", action="store_true", help="prepare the missing data, run no job")
    p.add_argument(
        "--stack-seeds",
        action="store_true",
        help="run the image jobs that differ only in seed as one train-stack per group (each seed keeps "
        "its outputs, log, state; benchmark.tsv: the stack's time split evenly across its seeds)",
    )
    _side_by_side_arg(p)
    _expect_margin_arg(p)


def _side_by_side_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--side-by-side",
        type=int,
        default=1,
        metavar="K",
        help="up to K image training tasks (seed stacks, single jobs) in one process, a thread and a CUDA "
        "stream each (train-stack --stacks); --parallel then counts processes (default 1: a process each)",
    )


def _expect_margin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--expect-margin",
        type=float,
        default=1.1,
        metavar="X",
        help="start a job with an expected time (export-jobs) only where X times what is left of it "
        "fits before the deadline (default 1.1)",
    )
    p.add_argument(
        "--then",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="a next call of this long follows on the same machine: start a job where it finishes by the "
        "deadline plus this (stopped at the deadline, it checkpoints and the next call resumes it; default 0: "
        "the last call)",
    )


def _lease_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", help="the jobs file (export-jobs)")
    p.add_argument("--until", type=float, required=True, metavar="SECONDS", help="be done this long after the start")
    p.add_argument("--out", required=True, help="folder for results.tar.gz* and logs.tar.gz (on a device: $OUT)")
    p.add_argument("--only", action="append", metavar="GLOB", help="only jobs whose first output matches; repeatable")
    p.add_argument("--parallel", "-k", type=int, default=6, help="jobs at a time (default 6)")
    p.add_argument(
        "--min-run", type=float, default=170.0, metavar="SECONDS", help="start no job with less left (default 170)"
    )
    p.add_argument("--grace", type=float, default=20.0, help="seconds a job has to checkpoint after SIGTERM")
    p.add_argument("--pack-reserve", type=float, default=30.0, help="seconds kept for packing (default 30)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cuda", help="the jobs' device (cuda)")
    p.add_argument("--raw", default="data/raw", help="the original image archives (default data/raw)")
    p.add_argument("--directory", "-d", default=".", help="where the jobs' paths are (default: here)")
    p.add_argument("--stack-seeds", action="store_true", help="as run-jobs --stack-seeds")
    _side_by_side_arg(p)
    _expect_margin_arg(p)


def _pack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", help="the jobs file (export-jobs)")
    p.add_argument("--out", required=True, help="file prefix: writes PREFIX.tar.gz, or PREFIX.tar.gz.00, .01, ...")
    p.add_argument("--directory", "-d", default=".", help="where the jobs' paths are (default: here)")
    p.add_argument("--state", help="run-jobs' state file (default results/run-jobs.json)")
    p.add_argument("--max-files", type=int, default=8, help="at most this many files (default 8)")
    p.add_argument("--max-mib", type=float, default=16.0, help="MiB per file (default 16)")
    p.add_argument(
        "--checkpoints", action="store_true", help="also the unfinished jobs' checkpoints (resume elsewhere)"
    )
    p.add_argument("--only-new", action="store_true", help="leave out the jobs an earlier pack took")


def _import_results_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("parts", nargs="+", help="the pack: PREFIX.tar.gz, or all of PREFIX.tar.gz.NN")
    p.add_argument("--directory", "-d", default=".", help="Snakemake's working directory (default: here)")
    p.add_argument("--snakefile", help="default: this checkout's Snakefile")
    p.add_argument("--config", nargs="+", metavar="KEY=VALUE", help="default: the export's --config")
    p.add_argument("--configfile", help="default: the export's --configfile")
    p.add_argument("--cores", type=int, default=1, help="Snakemake's cores for preparing missing inputs")
    p.add_argument("--no-verify", action="store_true", help="skip checking the specs against Snakemake's")
    p.add_argument("--no-prepare", action="store_true", help="do not make missing inputs (fail instead)")
    p.add_argument("--no-metadata", action="store_true", help="leave Snakemake's metadata alone")


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and help, what adds its options, and its handler (args -> exit code)."""

    name: str
    help: str
    setup: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    #: it trains or samples: denormals are flushed before it starts (:func:`_start`); the
    #: others (tables, the GPU kit's runner) never import torch for it
    computes: bool = False


COMMANDS: tuple[Command, ...] = (
    Command("train", "run one training job", _train_args, _train, computes=True),
    Command(
        "train-stack",
        "train one method's seeds of one image data set as one stack "
        "(each seed's own outputs, equal to its train job's)",
        _train_stack_args,
        _train_stack,
        computes=True,
    ),
    Command("hmc", "sample the HMC reference posterior of a toy problem", _hmc_args, _hmc, computes=True),
    Command(
        "prepare-images",
        "fetch/verify an image data set and save it as one .npz",
        _prepare_images_args,
        _prepare_images,
    ),
    Command(
        "image-table",
        "Table 1 (LaTeX, PNG, CSV, HTML) and its comparison with the paper",
        _image_table_args,
        _image_table,
    ),
    Command(
        "synthetic-table",
        "metrics of the synthetic runs as CSV, LaTeX and HTML",
        _synthetic_table_args,
        _synthetic_table,
    ),
    Command(
        "synthetic-figure", "Figure 2 (gaussian) or Figure F.1 (funnel)", _synthetic_figure_args, _synthetic_figure
    ),
    Command("toy-figure", "Figure 1 (regression) or Figure 3 (classification)", _toy_figure_args, _toy_figure),
    Command("toy-table", "distance of each method's predictive to HMC's", _toy_table_args, _toy_table),
    Command(
        "training-curves",
        "Table 1's training curves and repulsion diagnostic from the logs convergence.csv names",
        _training_curves_args,
        _training_curves,
    ),
    Command("uci-download", "fetch one UCI dataset with the standard splits", _uci_download_args, _uci_download),
    Command("uci-table", "Table 2 (UCI regression) and the comparison with the seeds", _uci_table_args, _uci_table),
    Command(
        "claims", "the claim scorecard: each claim of the papers checked on the result tables", _claims_args, _claims
    ),
    Command(
        "claim-figures",
        "one evidence figure per claim, from the scorecard's comparisons CSV",
        _claim_figures_args,
        _claim_figures,
    ),
    Command(
        "claims-page",
        "the scorecard's HTML from its CSVs, with each claim's evidence figure",
        _claims_page_args,
        _claims_page,
    ),
    Command(
        "reference",
        "the reference tree: keep a rebuild's tables, check a rebuild, write the results page",
        _reference_args,
        _reference,
    ),
    Command(
        "budget", "device-hours of Table 1's jobs on this device, before any run", _budget_args, _budget, computes=True
    ),
    Command("where", "where the numbers of a result file or table row came from", _where_args, _where),
    Command(
        "export-jobs",
        "login machine: write the training jobs of targets (as Snakemake "
        "would run them) and their data steps to a jobs file",
        _export_jobs_args,
        _export_jobs,
    ),
    Command(
        "run-jobs",
        "GPU node: run a jobs file's jobs K at a time until a deadline; "
        "resumes and skips finished jobs on the next call",
        _run_jobs_args,
        _run_jobs,
    ),
    Command("pack", "GPU node: pack the finished jobs' files into at most 8 files of 16 MiB", _pack_args, _pack),
    Command(
        "lease",
        "GPU node, one call of a short lease: run-jobs until a deadline that leaves time to pack, then pack",
        _lease_args,
        _lease,
    ),
    Command(
        "restore-result",
        "a run of the reference tree into results/, checked against its job and runs.json",
        _restore_result_args,
        _restore_result,
    ),
    Command(
        "import-results",
        "login machine: put a pack's results in place so Snakemake takes them as built (no retraining)",
        _import_results_args,
        _import_results,
    ),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="repens", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--log", help="also append the log to this file")
    parser.add_argument(
        "--attempts",
        help="also append the log, under a header naming this attempt, to this file "
        "(kept across attempts: Snakemake deletes a job's log before each)",
    )
    parser.add_argument("--threads", type=int, help="torch CPU threads (the rule's threads; default: torch's)")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        command.setup(p)
        p.set_defaults(func=command.run, computes=command.computes)
    return parser


def _start(args: argparse.Namespace) -> None:
    """For a command that computes, denormals flushed (first: before torch starts a
    thread, so that every thread inherits it); logging, the attempts log, where a cluster
    job ran, torch's threads."""
    if args.computes:
        from repens.core.denormals import flush_denormals

        flush_denormals()
    _setup_logging(args.log)
    if args.attempts:
        from repens.training.attempt import keep_attempt_log

        keep_attempt_log(args.attempts, args.command)
    if os.environ.get("SLURM_JOB_ID"):  # a cluster job: record where it ran
        logging.getLogger("repens").info(
            "SLURM_JOB_ID=%s SLURM_ARRAY_JOB_ID=%s SLURM_ARRAY_TASK_ID=%s host=%s CUDA_VISIBLE_DEVICES=%s",
            *(
                os.environ.get(k, "-")
                for k in (
                    "SLURM_JOB_ID",
                    "SLURM_ARRAY_JOB_ID",
                    "SLURM_ARRAY_TASK_ID",
                    "SLURMD_NODENAME",
                    "CUDA_VISIBLE_DEVICES",
                )
            ),
        )
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command's handler. A missing or malformed data file (2) or a write that
    failed, e.g. disk full (74, EX_IOERR): one line naming the file, no traceback."""
    from repens.core.atomic import WriteError
    from repens.data.errors import DataError, one_line
    from repens.pipeline.checks import EnvError

    try:
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (which checkpoints and exits 130 itself)
        line = "interrupted (SIGINT); finished checkpoints are kept and a rerun resumes from them"
        logging.getLogger("repens").warning(line)
        return 130
    except (DataError, WriteError, EnvError) as err:
        line = f"error: {one_line(err)}"
        print(line, file=sys.stderr, flush=True)
        for kept in (args.log, args.attempts):
            if kept:
                with open(kept, "a") as f:
                    f.write(line + "\n")
        return 74 if isinstance(err, WriteError) else 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _start(args)
    return _dispatch(args)
