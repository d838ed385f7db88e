"""Last-good copies of the aggregate outputs (tables, figures).

Snakemake deletes a job's outputs before it runs and again when it fails, and a rule
cannot opt out. So one corrupted result file would make a table or figure rule fail
and leave no table or figure at all. The aggregate rules therefore end with
:func:`shell` around their command: after a success, every output is copied to
``results/last_good/<same path below results/>``; after a failure, the log names the
last good copies (Snakemake never touches them) and the job still fails.

``python -m repens.pipeline.last_good save|failed OUTPUT...``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from repens.core.atomic import write_bytes_atomic

__all__ = ["last_good_path", "save", "report_failure", "shell", "main"]

DIRNAME = "last_good"


def last_good_path(output: Path | str) -> Path:
    """``results/x/y.csv`` -> ``results/last_good/x/y.csv`` (others: ``last_good/<path>``)."""
    output = Path(output)
    parts = output.parts
    if parts and parts[0] == "results":
        return Path("results", DIRNAME, *parts[1:])
    return Path(DIRNAME, *parts)


def save(outputs: list[str]) -> None:
    """Copy every output (they exist: the command succeeded) to its last-good path."""
    for output in outputs:
        target = last_good_path(output)
        write_bytes_atomic(target, Path(output).read_bytes())
        print(f"last good copy: {target}")


def report_failure(outputs: list[str]) -> None:
    """Name the last good copy of each output of a failed job (one line each)."""
    for output in outputs:
        copy = last_good_path(output)
        if copy.exists():
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(copy.stat().st_mtime))
            print(f"failed; {output} is not rebuilt; the last good one (from {stamp}) is kept at {copy}")
        else:
            print(f"failed; {output} is not rebuilt and has no last good copy")


def shell(command: str) -> str:
    """A rule's shell ``command`` (which logs to ``{log}``) that keeps last-good copies."""
    helper = "python -m repens.pipeline.last_good"
    return (
        f"{command} && {helper} save {{output:q}} >> {{log:q}} 2>&1"
        f" || {{{{ {helper} failed {{output:q}} >> {{log:q}} 2>&1; exit 1; }}}}"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] not in ("save", "failed"):
        print("usage: python -m repens.pipeline.last_good save|failed OUTPUT...", file=sys.stderr)
        return 2
    (save if args[0] == "save" else report_failure)(args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
