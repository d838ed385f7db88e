"""One attempt at a job: a lock so that no two attempts train one job at once, a log
kept across attempts, and a check that a GPU the scheduler granted is usable.

**The lock** is a lease, ``<out>.lock`` beside the job's result file, created with
``O_CREAT | O_EXCL`` (atomic on local filesystems and on NFS v3 and later) and holding
the holder's host, pid and SLURM job id. A thread refreshes its modification time every
:data:`REFRESH_SECONDS` while the job runs. A second attempt at the same job (a
duplicate submitted after the controlling Snakemake was lost and rerun with
``--unlock``) finds the lock and stops with one line naming the holder, instead of
training over it from the holder's checkpoint. A lock is taken over only when its holder
is gone, and the log line says why: it has not been refreshed for :data:`STALE_SECONDS`
(ten refresh periods), whatever its pid (a pid alive again on the same host is another
process); on the same host, its pid is no longer alive; or its content is not a holder's
JSON (read as bytes, never raised on; an empty lock younger than a refresh period is being
written). So the nodes' clocks, or the file server's, must agree to within a few minutes;
a job killed with SIGKILL leaves a lock that blocks its rerun on another node for at most
that long.

**The attempt log**: Snakemake deletes a job's ``log:`` before each attempt, so the line
saying why an attempt ended would be lost; :func:`keep_attempt_log` appends every
attempt's log lines, under a header naming the host, pid and SLURM job, to a second
file that nothing deletes.

**The GPU check**: :func:`check_granted_gpu` refuses to train on the CPU a job to which
SLURM granted a GPU that torch cannot see (a CPU build of torch, a driver mismatch).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "REFRESH_SECONDS",
    "STALE_SECONDS",
    "JobBusy",
    "GpuUnusable",
    "job_lock",
    "keep_attempt_log",
    "check_granted_gpu",
    "granted_gpus",
]

#: seconds between refreshes of a held lock's modification time
REFRESH_SECONDS = 30.0
#: a lock of another host not refreshed for this long belongs to an attempt that is gone
STALE_SECONDS = 300.0

#: environment variables through which SLURM tells a job its GPUs
SLURM_GPU_VARIABLES = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")


class JobBusy(RuntimeError):
    """Another attempt holds the job's lock."""


class GpuUnusable(RuntimeError):
    """The scheduler granted a GPU that torch cannot use."""


def _holder_text(holder: Mapping) -> str:
    slurm = f", SLURM job {holder['slurm_job_id']}" if holder.get("slurm_job_id") else ""
    return f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}{slurm}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _gone_why(holder: Mapping | None, age: float, stale_seconds: float) -> str | None:
    """Why the holder of a lock refreshed ``age`` seconds ago is gone (None: it may be
    alive). ``holder`` None: the lock's bytes are not a holder's JSON."""
    if age >= stale_seconds:  # its holder refreshes it every refresh_seconds: whatever the pid, it is gone
        return f"not refreshed for {age:.0f} s, over {stale_seconds:.0f} s"
    if holder is None:
        return "unreadable (not a holder's JSON)"
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        if not _pid_alive(holder["pid"]):
            return f"its pid {holder['pid']} is not alive on this host"
    return None


def _read_holder(path: Path, refresh_seconds: float = REFRESH_SECONDS) -> tuple[dict | None, float] | None:
    """The lock's holder (None: unreadable) and its age in seconds; None if the lock is
    gone. Read as bytes: any content (not UTF-8, not JSON) is judged, never raised on; an
    empty lock younger than a refresh period is being written (judged by its age alone)."""
    try:
        age = time.time() - path.stat().st_mtime
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data.strip() and age < refresh_seconds:
        return {}, age
    try:
        holder = json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError
        return None, age
    return (holder if isinstance(holder, dict) else None), age


def _take_lock(
    path: Path, me: dict, log: logging.Logger, stale_seconds: float, refresh_seconds: float = REFRESH_SECONDS
) -> None:
    """:func:`job_lock`'s taking of the lock file ``path`` for ``me`` (a gone holder's taken
    over); raises :class:`JobBusy` where another attempt holds it or keeps taking it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            found = _read_holder(path, refresh_seconds)
            if found is None:
                continue  # released meanwhile
            holder, age = found
            why = _gone_why(holder, age, stale_seconds)
            if why is None:
                raise JobBusy(
                    f"another attempt is running this job ({_holder_text(holder or {})}; lock {path} "
                    f"refreshed {age:.0f} s ago): not training over it; wait for it, or stop it "
                    f"(scancel --signal=TERM) and rerun"
                ) from None
            log.warning(
                "lock %s of an attempt that is gone (%s, refreshed %.0f s ago) taken over: %s",
                path,
                _holder_text(holder or {}),
                age,
                why,
            )
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(me, handle)
        break
    else:
        raise JobBusy(f"could not take the lock {path}: other attempts keep taking it")


@contextmanager
def job_lock(
    out: Path | str,
    log: logging.Logger,
    *,
    refresh_seconds: float = REFRESH_SECONDS,
    stale_seconds: float = STALE_SECONDS,
) -> Iterator[Path]:
    """Hold ``<out>.lock`` while the block runs (see the module docstring).

    Raises:
        JobBusy: another attempt that is still alive holds the lock (one line naming it).
    """
    out = Path(out)
    path = out.with_name(out.name + ".lock")
    me = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _take_lock(path, me, log, stale_seconds, refresh_seconds)

    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(refresh_seconds):
            try:
                os.utime(path)
            except OSError:
                return

    thread = threading.Thread(target=refresh, name="repens-job-lock", daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
        found = _read_holder(path)
        if found is not None and found[0] and found[0].get("pid") == me["pid"] and found[0].get("host") == me["host"]:
            path.unlink(missing_ok=True)


def keep_attempt_log(path: Path | str, command: str) -> logging.Handler:
    """Append this process's log records to ``path`` under a header line naming the
    attempt; returns the handler (already added to the root logger)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.getLogger().addHandler(handler)
    slurm = os.environ.get("SLURM_JOB_ID")
    logging.getLogger("repens").info(
        "attempt: %s on host %s, pid %d%s",
        command,
        socket.gethostname(),
        os.getpid(),
        f", SLURM job {slurm}" if slurm else "",
    )
    return handler


def granted_gpus(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(variable, value)`` of the first SLURM variable that grants this job a GPU, else None."""
    env = os.environ if env is None else env
    for name in SLURM_GPU_VARIABLES:
        value = (env.get(name) or "").strip()
        if not value or value in ("(null)", "N/A"):
            continue
        if name == "SLURM_GPUS_ON_NODE" and value == "0":  # a count there; an index list in the others
            continue
        return name, value
    return None


def check_granted_gpu(device: str | None, env: Mapping[str, str] | None = None) -> None:
    """Raise :class:`GpuUnusable` (one line) when SLURM granted this job a GPU, the job
    may use one (``device`` auto or cuda) and torch sees no CUDA device."""
    if device == "cpu":
        return
    granted = granted_gpus(env)
    if granted is None:
        return
    import torch

    if torch.cuda.is_available():
        return
    name, value = granted
    raise GpuUnusable(
        f"SLURM granted this job a GPU ({name}={value}) but torch {torch.__version__} sees no CUDA "
        f"device (CUDA build: {torch.version.cuda or 'none, a CPU build'}); not training on the CPU: "
        f"install a CUDA build of torch on the node, or set device: cpu"
    )
