"""``python -m repens.report <command>``: the tables and figures of the synthetic targets and
the toys, from the files the pipeline steps of :mod:`repens.summaries` wrote.

* ``synthetic-table --summary results/synthetic/sample_quality.json --out-csv ... RUN...``
* ``synthetic-figure --target gaussian --data <npz> --out-png ... --out-pdf ... RUN...``
* ``toy-table --summary results/toy/distances.json --out-csv ... INPUT...``
* ``toy-figure --dataset regression --data <npz> --out-png ... --out-pdf ...``

The runs (``RUN``, ``INPUT``) are the result files the step read: a table names them in its
provenance sidecar (:func:`repens.jobs.provenance.write_sidecar`), a synthetic figure draws
their particles. ``--labels``: ``config.yaml``'s display names as JSON. A malformed or
missing file is one line, ``error: <path>: ...``, exit 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from repens.core.errors import DataError, one_line


def _table_args(sub, name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text)
    p.add_argument("--summary", required=True, help="the step's file of numbers (JSON)")
    p.add_argument("--out-csv", required=True)
    p.add_argument("--out-tex", required=True)
    p.add_argument("--out-html")
    return p


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m repens.report", description=__doc__.split("\n")[0])
    parser.add_argument("--labels", default="{}", help="method key -> display name (JSON)")
    sub = parser.add_subparsers(dest="command", required=True)
    _table_args(sub, "synthetic-table", "metrics of the synthetic runs as CSV, LaTeX and HTML").add_argument(
        "inputs", nargs="*", help="the runs (named in the provenance sidecar)"
    )
    _table_args(sub, "toy-table", "distance of each method's predictive to HMC's").add_argument(
        "inputs", nargs="*", help="the prediction files (named in the provenance sidecar)"
    )
    figure = sub.add_parser("synthetic-figure", help="Figure 2 (gaussian) or Figure F.1 (funnel)")
    figure.add_argument("--target", required=True)
    figure.add_argument("--data", required=True, help="the step's figure file (npz)")
    figure.add_argument("--out-png", required=True)
    figure.add_argument("--out-pdf", required=True)
    figure.add_argument("inputs", nargs="+", help="the runs, one panel each")
    toy = sub.add_parser("toy-figure", help="Figure 1 (regression) or Figure 3 (classification)")
    toy.add_argument("--dataset", required=True, choices=("regression", "classification"))
    toy.add_argument("--data", required=True, help="the step's figure file (npz)")
    toy.add_argument("--out-png", required=True)
    toy.add_argument("--out-pdf", required=True)
    return parser


def _run(args: argparse.Namespace) -> None:
    labels = json.loads(args.labels)
    html = Path(args.out_html) if getattr(args, "out_html", None) else None
    if args.command == "synthetic-table":
        from repens.report.synthetic import write_metrics_table_from as write
    elif args.command == "toy-table":
        from repens.report.toy import write_distance_table_from as write
    elif args.command == "synthetic-figure":
        from repens.report.synthetic_figures import plot_target_panels_from

        plot_target_panels_from(
            args.target,
            args.data,
            [Path(p) for p in args.inputs],
            Path(args.out_png),
            Path(args.out_pdf),
            labels=labels,
        )
        return
    else:
        from repens.report.toy_figures import plot_classification_panels_from, plot_regression_panels_from

        plot = {"regression": plot_regression_panels_from, "classification": plot_classification_panels_from}
        plot[args.dataset](args.data, Path(args.out_png), Path(args.out_pdf), labels=labels)
        return
    write(args.summary, Path(args.out_csv), Path(args.out_tex), labels=labels, out_html=html)
    from repens.jobs.provenance import write_sidecar

    write_sidecar(args.out_csv, args.inputs)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        _run(args)
    except DataError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
