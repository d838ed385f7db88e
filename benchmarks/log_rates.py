"""Training speed read back from job logs: per call of a job (a `run-jobs` segment of its
log), the steps it ran, the seconds from the step's capture (or start) to its last logged
step or SIGTERM, and steps per second. For runs on machines that are gone, whose logs came
back (`run-jobs` packs them).

    python benchmarks/log_rates.py logs/image/fashionmnist/*/seed38.log
    python benchmarks/log_rates.py logs/          # a folder: every job log under it
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path

# the training loop's progress line, a call's opening line and a log line's timestamp, as the job kit reads them
from repens.pipeline.expect import CALL_HEADER, STAMP, STEP_LINE

RESUMED = re.compile(r"resumed from .* at step (\d+)/")
SIGTERM = re.compile(r"SIGTERM at step (\d+)")


def _time(line: str) -> dt.datetime | None:
    m = STAMP.match(line)
    return dt.datetime.strptime(f"{m[1]},{m[2]}", "%Y-%m-%d %H:%M:%S,%f") if m else None


def segments(text: str) -> list[list[str]]:
    """The log split at each `== repens run-jobs` header (one call each)."""
    out: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(CALL_HEADER):
            out.append([line])
        elif out:
            out[-1].append(line)
    return out


def rate(segment: list[str]) -> dict | None:
    """Steps, seconds and steps/s of one call, timed from its first timestamped line."""
    stamped = [(t, line) for line in segment if (t := _time(line)) is not None]
    if not stamped:
        return None
    start = stamped[0][0]
    first = next((int(m[1]) for _, line in stamped if (m := RESUMED.search(line))), 0)
    last, end = None, None
    for t, line in stamped:
        m = SIGTERM.search(line) or STEP_LINE.search(line)
        if m:
            last, end = int(m[1]), t
    if last is None or end <= start:
        return None
    seconds = (end - start).total_seconds()
    kind = "train-stack" if " train-stack " in segment[0] else "train"
    return {"kind": kind, "from": first, "to": last, "seconds": seconds, "steps_per_s": (last - first) / seconds}


def job_logs(paths: list[Path]) -> list[Path]:
    """``paths`` with each folder replaced by the job logs under it (``*.log``, not the
    ``*.attempts.log`` beside each), sorted."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(p for p in path.rglob("*.log") if not p.name.endswith(".attempts.log"))
        else:
            out.append(path)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", type=Path, help="job logs, or folders holding them")
    args = p.parse_args()
    print(f"{'log':<48} {'call':<12} {'steps':>13} {'seconds':>8} {'steps/s':>8}")
    for path in job_logs(args.logs):
        for segment in segments(path.read_text()):
            r = rate(segment)
            if r:
                name = "/".join(path.parts[-2:])
                steps = f"{r['from']}-{r['to']}"
                print(f"{name:<48} {r['kind']:<12} {steps:>13} {r['seconds']:>8.1f} {r['steps_per_s']:>8.1f}")


if __name__ == "__main__":
    main()
