"""Which code, on which machine, made a result file.

:func:`collect` gathers the provenance of the running process: git commit of the source
tree (and whether it had uncommitted changes), the repens, torch, CUDA and snakemake
versions, the device, the host, the job's scale and key (:func:`repens.core.jobkey.job_key`)
and the log file. It never raises: what cannot be found reads ``"unknown"`` (outside a
git checkout the commit is ``REPENS_GIT_COMMIT`` if set, else ``"unknown"``).

Where it is stored:

* every training and HMC result (``metrics.json``: a ``provenance`` entry; ``.npz``: a
  ``provenance`` array holding JSON), stamped by ``python -m repens train/hmc`` after the
  runner finished (:func:`stamp`; a failed stamp logs a warning and the job still succeeds);
* every table CSV: a sidecar ``<table>.csv.provenance.json`` (:func:`write_sidecar`) with
  the provenance of the table job and, per input file, its path, job and provenance.

``python -m repens where FILE [--dataset D] [--method M] [--metric KEY]`` prints where a
number came from (:func:`describe`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["collect", "git_state", "stamp", "read", "write_sidecar", "sidecar_path", "describe", "stderr_file"]

log = logging.getLogger("repens.provenance")
UNKNOWN = "unknown"
SOURCE_ROOT = Path(__file__).resolve().parents[3]  # src/repens/jobs/provenance.py -> the checkout


@functools.cache
def git_state(root: str = str(SOURCE_ROOT)) -> tuple[str, bool | None]:
    """(commit, dirty) of the checkout at ``root``; (``REPENS_GIT_COMMIT`` or "unknown", None)
    when git or the checkout is missing. Dirty ignores untracked files."""
    try:
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        if commit:
            return commit, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("REPENS_GIT_COMMIT", UNKNOWN), None


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        return UNKNOWN


def stderr_file() -> str | None:
    """The file stderr is redirected to (``> log 2>&1`` in a Snakemake rule), if it is one."""
    try:
        target = os.readlink("/proc/self/fd/2")
    except OSError:
        return None
    return target if target.startswith("/") and Path(target).is_file() else None


def _relative(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd().resolve()) else path
    except (OSError, ValueError):
        return path


def _device(device: str | None) -> str:
    if device:
        return device
    torch = sys.modules.get("torch")  # never imports torch just for this
    if torch is None:
        return f"cpu ({platform.machine()})"
    try:
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    return f"cpu ({platform.machine()})"


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or UNKNOWN


def collect(
    job: Mapping[str, Any] | None = None,
    *,
    log_file: str | None = None,
    device: str | None = None,
    scale: str | None = None,
) -> dict[str, Any]:
    """The provenance of this process (and of ``job``, if given); never raises."""
    try:
        from repens.core.version import __version__

        commit, dirty = git_state()
        torch = sys.modules.get("torch")
        cuda = UNKNOWN
        if torch is not None:
            cuda = getattr(torch.version, "cuda", None) or "none (CPU build)"
        out: dict[str, Any] = {
            "git_commit": commit,
            "git_dirty": dirty,
            "repens": __version__,
            "python": platform.python_version(),
            "torch": getattr(torch, "__version__", None) or _version("torch"),
            "cuda": cuda,
            "snakemake": _version("snakemake"),
            "device": _device(device),
            "cpu": cpu_model(),
            "host": socket.gethostname(),
            "log": _relative(log_file or stderr_file()),
        }
        if torch is not None:  # a CPU reduction's order, so its float32 bits, depend on it
            out["threads"] = torch.get_num_threads()
        if job is not None:
            from repens.core.jobkey import job_key

            out["scale"] = scale or job.get("scale") or UNKNOWN
            out["job_key"] = job_key(job)
        elif scale is not None:
            out["scale"] = scale
        if os.environ.get("SLURM_JOB_ID"):
            out["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
        return out
    except Exception as err:  # noqa: BLE001 - provenance never fails a job
        log.warning("provenance: could not collect (%s)", err)
        return {"git_commit": UNKNOWN, "error": str(err)}


def stamp(path: Path | str, provenance: Mapping[str, Any]) -> bool:
    """Add ``provenance`` to a finished result file (``.json``: a ``provenance`` key, merged
    over one already there; ``.npz``: a ``provenance`` JSON array), atomically. Returns
    whether it did; a failure logs a warning and never raises."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            from repens.core.atomic import write_json_atomic

            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                return False
            merged = {**(data.get("provenance") or {}), **{k: v for k, v in provenance.items() if v is not None}}
            data["provenance"] = merged
            write_json_atomic(path, data, indent=2, sort_keys=True)
            return True
        if path.suffix == ".npz":
            import numpy as np

            from repens.core.atomic import save_npz_atomic

            with np.load(path, allow_pickle=False) as f:
                arrays = {k: f[k] for k in f.files}
            old = json.loads(str(arrays["provenance"])) if "provenance" in arrays else {}
            merged = {**old, **{k: v for k, v in provenance.items() if v is not None}}
            arrays["provenance"] = np.array(json.dumps(merged, sort_keys=True))
            save_npz_atomic(path, **arrays)
            return True
    except Exception as err:  # noqa: BLE001 - provenance never fails a job
        log.warning("provenance: could not stamp %s (%s)", path, err)
    return False


def read(path: Path | str) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """(provenance, job, the whole record) of a result file (.json or .npz); empty
    provenance if it has none."""
    path = Path(path)
    if path.suffix == ".npz":
        import numpy as np

        with np.load(path, allow_pickle=False) as f:
            prov = json.loads(str(f["provenance"])) if "provenance" in f.files else {}
            job = json.loads(str(f["job"])) if "job" in f.files else None
            record = {k: f[k] for k in f.files if f[k].ndim == 0}
        return prov, job, record
    data = json.loads(path.read_text())
    return data.get("provenance") or {}, data.get("job"), data


def sidecar_path(table: Path | str) -> Path:
    table = Path(table)
    return table.with_name(table.name + ".provenance.json")


def write_sidecar(table: Path | str, inputs: Sequence[Path | str]) -> Path | None:
    """Write ``<table>.provenance.json``: this process's provenance and, per input result
    file, its path, job and provenance. Never raises (returns None on failure)."""
    try:
        from repens.core.atomic import write_json_atomic

        rows = []
        for item in inputs:
            try:
                prov, job, _ = read(item)
            except Exception as err:  # noqa: BLE001
                prov, job = {"error": str(err)}, None
            rows.append({"path": str(item), "job": job, "provenance": prov})
        scales = sorted({str((r["job"] or {}).get("scale")) for r in rows if r["job"]})
        commits = sorted({str(r["provenance"].get("git_commit", UNKNOWN)) for r in rows})
        out = sidecar_path(table)
        write_json_atomic(
            out,
            {
                "table": str(table),
                "provenance": collect(scale=",".join(scales) or None),
                "input_commits": commits,
                "inputs": rows,
            },
            indent=1,
            sort_keys=True,
        )
        return out
    except Exception as err:  # noqa: BLE001
        log.warning("provenance: could not write the sidecar of %s (%s)", table, err)
        return None


def _short(prov: Mapping[str, Any]) -> str:
    dirty = prov.get("git_dirty")
    flag = " (dirty tree)" if dirty else "" if dirty is False else " (tree state unknown)"
    return (
        f"commit {prov.get('git_commit', UNKNOWN)}{flag}; repens {prov.get('repens', UNKNOWN)}, "
        f"torch {prov.get('torch', UNKNOWN)}, CUDA {prov.get('cuda', UNKNOWN)}, "
        f"snakemake {prov.get('snakemake', UNKNOWN)}; device {prov.get('device', UNKNOWN)} on "
        f"{prov.get('host', UNKNOWN)}; scale {prov.get('scale', UNKNOWN)}"
    )


def _value(record: Mapping[str, Any], metric: str) -> Any:
    for place in (record.get("metrics") if isinstance(record.get("metrics"), Mapping) else None, record):
        if place is not None and metric in place:
            value = place[metric]
            return value.item() if hasattr(value, "item") else value
    return None


def describe(path: Path | str, dataset: str | None = None, method: str | None = None, metric: str | None = None) -> str:
    """Where the numbers of ``path`` came from: a result file's provenance, job spec and
    log; for a table CSV, those of every input behind the row (``dataset``, ``method``)
    and each input's value of ``metric``."""
    path = Path(path)
    lines: list[str] = []
    if path.suffix == ".csv":
        side = sidecar_path(path)
        if not side.exists():
            return f"{path}: no provenance sidecar {side.name} (the table predates provenance; rebuild it)"
        data = json.loads(side.read_text())
        lines.append(f"{path}: built by {_short(data.get('provenance', {}))}")
        chosen = [
            r
            for r in data.get("inputs", [])
            if (dataset is None or (r.get("job") or {}).get("dataset") == dataset)
            and (method is None or (r.get("job") or {}).get("method") == method)
        ]
        if not chosen:
            return "\n".join(lines + [f"no input matches dataset={dataset} method={method}"])
        lines.append(f"{len(chosen)} input file(s) behind dataset={dataset or '*'} method={method or '*'}:")
        for r in chosen:
            lines.append("")
            lines += _describe_one(Path(r["path"]), r.get("provenance") or {}, r.get("job"), metric)
        return "\n".join(lines)
    prov, job, record = read(path)
    return "\n".join(_describe_one(path, prov, job, metric, record))


def _describe_one(
    path: Path,
    prov: Mapping[str, Any],
    job: Mapping[str, Any] | None,
    metric: str | None,
    record: Mapping[str, Any] | None = None,
) -> list[str]:
    lines = [f"{path}"]
    if metric:
        if record is None:
            try:
                record = read(path)[2]
            except (OSError, ValueError, KeyError):
                record = {}
        lines.append(f"  {metric} = {_value(record, metric)}")
    lines.append(f"  {_short(prov)}" if prov else "  no provenance recorded (written before provenance existed)")
    if prov.get("job_key"):
        lines.append(f"  job key {prov['job_key']}")
    lines.append(f"  log {prov.get('log') or UNKNOWN}")
    if job is not None:
        lines.append(f"  job {json.dumps(job, sort_keys=True)}")
    return lines
