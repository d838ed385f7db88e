"""Whether the runs behind each Table 1 / Table 2 row converged: a pipeline step (rule
``check_convergence``) writing ``results/convergence.csv``, which the claim scorecard
(:mod:`repens.report.claims`) reads: a comparison resting on an unconverged run is
inconclusive. The verdicts are :mod:`repens.summaries.converged`'s, from each run's
``metrics.json`` and training log.

``python -m repens.summaries.convergence convergence --out results/convergence.csv
[--results results] [--log-root reference]``
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from repens.results.files import shown_path

__all__ = ["CONVERGENCE_COLUMNS", "convergence_rows", "write_convergence", "main"]

CONVERGENCE_COLUMNS = (
    "experiment",
    "dataset",
    "method",
    "seed",
    "converged",
    "reason",
    "log",
    "row_converged",
    "row_reason",
)


def _log_under(metrics_path: Path, log_root: Path | str | None) -> Path | None:
    """``<log_root>/<provenance.log>`` of a run, where ``log_root`` is given and it exists."""
    if log_root is None:
        return None
    try:
        rel = (json.loads(metrics_path.read_text()).get("provenance") or {}).get("log")
    except (OSError, ValueError):
        return None
    path = Path(log_root) / rel if rel else None
    return path if path is not None and path.is_file() else None


def unconverged_image_rows(metrics: Sequence[Path | str], log_root: Path | str | None = None) -> set[tuple[str, str]]:
    """The (dataset, method) Table 1 rows whose runs (``metrics``, the image runs'
    ``metrics.json``) did not converge, by the row verdict ``convergence.csv`` gives them
    (:func:`repens.summaries.converged.row_verdict`); an unknown verdict is not counted."""
    from repens.summaries.converged import check_image_run, row_verdict

    runs: dict[tuple[str, str], list] = {}
    for path in map(Path, metrics):
        verdict = check_image_run(path, log=_log_under(path, log_root))
        runs.setdefault((path.parts[-4], path.parts[-3]), []).append((path.parts[-2], verdict))
    return {key for key, row in runs.items() if row_verdict(row).converged is False}


def convergence_rows(results: Path | str = "results", log_root: Path | str | None = None) -> list[dict[str, str]]:
    """The convergence verdict (:mod:`repens.summaries.converged`) of every Table 1 and Table 2 run
    present under ``results`` (``<results>/{image,uci}/<dataset>/<method>/seed<N>/metrics.json``).

    Each run's log is ``<log_root>/<provenance.log>`` when ``log_root`` is given and that
    file exists (a rebuild from the reference tree: its logs stay in ``reference/logs/``,
    never restored), else the one :mod:`repens.summaries.converged` finds beside ``results``
    (``logs/...``). A UCI run's fit check reads the deep ensemble's log the same way."""
    from repens.summaries.converged import check_image_run, check_uci_run, row_verdict

    results = Path(results)

    def log_of(metrics_path: Path) -> Path | None:
        return _log_under(metrics_path, log_root)

    rows = []
    verdicts: dict[tuple[str, str, str], list] = {}
    for experiment in ("image", "uci"):
        for path in sorted((results / experiment).glob("*/*/seed*/metrics.json")):
            dataset, method, seed = path.parts[-4], path.parts[-3], path.parts[-2].removeprefix("seed")
            log = log_of(path)
            if experiment == "image":
                verdict = check_image_run(path, log=log)
            else:
                de = path.parent.parent.parent / "de" / path.parent.name / "metrics.json"
                verdict = check_uci_run(path, log=log, de_log=log_of(de) if de.is_file() else None)
            logs = [s for s in verdict.sources if s.endswith(".log")]
            verdicts.setdefault((experiment, dataset, method), []).append((f"seed{seed}", verdict))
            rows.append(
                {
                    "experiment": experiment,
                    "dataset": dataset,
                    "method": method,
                    "seed": seed,
                    "converged": "" if verdict.converged is None else str(verdict.converged),
                    "reason": " ".join(verdict.reason.split()),
                    "log": shown_path(logs[0]) if logs else "",
                }
            )
    rows_of = {key: row_verdict(runs) for key, runs in verdicts.items()}
    for r in rows:
        v = rows_of[(r["experiment"], r["dataset"], r["method"])]
        r["row_converged"] = "" if v.converged is None else str(v.converged)
        r["row_reason"] = " ".join(v.reason.split())
    return rows


def write_convergence(
    out_csv: Path | str, results: Path | str = "results", log_root: Path | str | None = None
) -> list[dict[str, str]]:
    """``results/convergence.csv``: :func:`convergence_rows`, one row per run (``converged``
    True / False / empty for unknown) with the verdict of its table row (``row_converged``,
    ``row_reason``: :func:`repens.summaries.converged.row_verdict`), which the scorecard
    reads (:meth:`repens.report.evidence.Evidence.convergence`)."""
    import io

    from repens.core.atomic import write_text_atomic

    rows = convergence_rows(results, log_root)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CONVERGENCE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(Path(out_csv), buffer.getvalue())
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m repens.summaries.convergence convergence --out F [--results D] [--log-root D]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m repens.summaries.convergence")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "convergence", help="results/convergence.csv: the convergence verdict of each Table 1 / Table 2 run present"
    )
    p.add_argument("--out", required=True)
    p.add_argument("--results", default="results")
    p.add_argument(
        "--log-root",
        help="read each run's log (provenance.log) under this folder (the reference tree's, in a rebuild from it)",
    )
    args = parser.parse_args(argv)
    rows = write_convergence(args.out, args.results, args.log_root)
    counts = {
        label: sum(r["converged"] == value for r in rows)
        for label, value in (("converged", "True"), ("not converged", "False"), ("unknown", ""))
    }
    print(f"{len(rows)} runs: " + ", ".join(f"{n} {label}" for label, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
