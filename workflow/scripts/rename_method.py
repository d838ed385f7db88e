"""Rename a method's runs in the reference tree, when the config renames the method and
nothing else about its jobs changes (e.g. the variant code-init became code-protocol).

    python workflow/scripts/rename_method.py image fashionmnist de-code-init de-code-protocol

Moves ``reference/<experiment>/<dataset>/<old>/`` and its logs to ``<new>``, and in each
``metrics.json`` sets the job's ``method`` and the provenance's ``log`` and ``job_key`` to the
new name's, keeping the old ones as ``provenance.renamed_from`` (the log itself is left as it
was written: its ``job`` line names the old method). Refuses a run whose stored key is not
the key of its stored spec (it would not be the job it claims to be) and an existing target.
Then rebuild and publish (``python -m repens reference publish``) to refresh ``runs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from repens.core.jobkey import job_key


def rename(reference: Path, experiment: str, dataset: str, old: str, new: str) -> list[Path]:
    src, dst = reference / experiment / dataset / old, reference / experiment / dataset / new
    logs_src, logs_dst = reference / "logs" / experiment / dataset / old, reference / "logs" / experiment / dataset / new
    if not src.is_dir():
        raise SystemExit(f"error: {src} is not a directory")
    if dst.exists() or logs_dst.exists():
        raise SystemExit(f"error: {dst} or {logs_dst} exists already")
    files = sorted(src.glob("seed*/metrics.json"))
    updated = {}
    for path in files:
        data = json.loads(path.read_text())
        job, prov = data["job"], data["provenance"]
        if job.get("method") != old or prov.get("job_key") != job_key(job):
            raise SystemExit(f"error: {path}: its stored spec is not the job {old!r} it claims to be")
        renamed = {"method": old, "job_key": prov["job_key"], "log": prov.get("log")}
        job = {**job, "method": new}
        data["job"] = job
        data["provenance"] = {
            **prov,
            "job_key": job_key(job),
            "log": prov["log"].replace(f"/{old}/", f"/{new}/") if prov.get("log") else prov.get("log"),
            "renamed_from": renamed,
        }
        updated[path.relative_to(src)] = json.dumps(data, indent=2, sort_keys=True) + "\n"
    os.replace(src, dst)
    if logs_src.is_dir():
        os.replace(logs_src, logs_dst)
    for rel, text in updated.items():
        (dst / rel).write_text(text)
    return [dst / rel for rel in updated]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment")
    parser.add_argument("dataset")
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--reference", type=Path, default=Path("reference"))
    args = parser.parse_args(argv)
    for path in rename(args.reference, args.experiment, args.dataset, args.old, args.new):
        print(f"renamed {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
