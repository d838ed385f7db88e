"""Which settings made a checkpoint: the key of a job spec, and setting aside stale state.

Every checkpoint and reusable intermediate result (training checkpoints, the hyper-DE
L2 search, finished UCI splits, HMC chains) stores :func:`job_key` of the job that made
it. A rerun under other settings does not resume from it: :func:`set_aside` renames it
to ``<name>.stale`` and logs one line saying so.

A checkpoint is verified when read (:func:`read_checkpoint`): its SHA-256
(:func:`repens.core.atomic.verify_torch_file`), a ``weights_only`` load that builds tensors and
plain containers and runs no code, and every tensor finite. One that fails is set aside
the same way, with one line saying why, and never resumed.

A finished training job leaves a *final record* beside its checkpoint
(:func:`write_final_record`, ``<checkpoint>.final``): its key and its output files'
bytes (zlib) with their SHA-256. Snakemake deletes the outputs of a job it considers
incomplete (say it was interrupted while the job finished) before running it again; the
rerun then restores them from the record in seconds (:func:`restore_final_outputs`)
instead of training again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "RUNTIME_FIELDS",
    "ENGINE_VERSION",
    "job_key",
    "set_aside",
    "load_keyed_json",
    "load_keyed_checkpoint",
    "read_checkpoint",
    "CheckpointError",
    "final_key",
    "final_record_path",
    "attempts_log_path",
    "write_final_record",
    "restore_final_outputs",
]

#: The training engine's version (:mod:`repens.training.train`), part of every checkpoint's key and
#: of every final key (:func:`final_key`): a checkpoint written by another version of the loop
#: (2: the optimizer maximises ``phi`` instead of minimising ``-phi``; 3: MLP likelihood
#: gradients written out, not by autograd, which rounds differently; 4: softmax of few classes
#: across a transposed copy, :func:`repens.models.posteriors.softmax_classes`; 5: large MLP stacks
#: in blocks of rows, :data:`repens.models.particles.BLOCK_BYTES`; 6: a one-output layer's bias added
#: after its product, not inside ``baddbmm``; 7: MLP activations feature-major, (n, H, B); 8:
#: denormal floats flushed to zero on the CPU, :mod:`repens.core.denormals`; 9: the image MLP on
#: the MLP path, ``StackedModel(..., input_shape=...)``, not under ``vmap``; 10: the particles'
#: repulsion as one product with ``K° - diag(K° 1)``, :func:`repens.models.kernels.kernel_grad_sum`,
#: and a small matrix times a wide one in blocks of columns on the CPU)
#: is not resumed.
ENGINE_VERSION = 10

#: spec fields that do not change results: display name, logging and checkpoint cadence,
#: where the UCI data live
RUNTIME_FIELDS = frozenset({"label", "log_every", "checkpoint_seconds", "uci_data"})


def job_key(job: Mapping[str, Any], *extra: Any) -> str:
    """SHA-256 (hex) of the canonical JSON (``sort_keys``) of ``job`` without
    :data:`RUNTIME_FIELDS`, and of ``extra`` (e.g. a split index) if given."""
    spec = {k: v for k, v in job.items() if k not in RUNTIME_FIELDS}
    payload = spec if not extra else {"job": spec, "extra": list(extra)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _short(key: Any) -> str:
    return "none" if not key else f"{str(key)[:8]}.."


def set_aside(
    path: Path,
    made: Any,
    wanted: str,
    log: logging.Logger,
    then: str = "starting from step 0",
    what: str = "checkpoint",
) -> Path:
    """Rename ``path`` (made under key ``made``) to ``<name>.stale`` and log one line."""
    stale = path.with_name(path.name + ".stale")
    os.replace(path, stale)
    log.warning(
        "%s %s was made under other settings (key %s != %s); set aside as %s, %s",
        what,
        path,
        _short(made),
        _short(wanted),
        stale.name,
        then,
    )
    return stale


def load_keyed_json(
    path: Path, key: str, log: logging.Logger, then: str, what: str, required: tuple[str, ...] = ()
) -> dict | None:
    """The JSON object at ``path`` if it was made under ``key`` (and holds ``required``);
    ``None`` if there is none, and an unreadable or stale file is set aside (one log line)."""
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:  # truncated or corrupt: one line naming it
        stale = _set_aside_as(path)
        log.warning("%s %s is unreadable (%s); set aside as %s, %s", what, path, _one_line(err), stale.name, then)
        return None
    if isinstance(saved, dict) and saved.get("key") == key and all(k in saved for k in required):
        return saved
    set_aside(path, saved.get("key") if isinstance(saved, dict) else None, key, log, then=then, what=what)
    return None


class CheckpointError(ValueError):
    """A checkpoint that must not be resumed; the message is one line saying why."""


def _set_aside_as(path: Path) -> Path:
    stale = path.with_name(path.name + ".stale")
    os.replace(path, stale)
    return stale


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    refused = re.search(r"GLOBAL ([\w.]+)", text)
    if "Weights only load failed" in text:  # torch's refusal: name the global it would not build
        return f"the global {refused.group(1) if refused else '?'}, refused by a weights_only load"
    return text[:300]


#: what a checkpoint is made of once loaded (torch.Size and OrderedDict are subclasses)
_PLAIN = (dict, list, tuple, str, bytes, int, float, bool, type(None))


def _check_contents(obj: Any, where: str = "") -> None:
    """Raise :class:`CheckpointError` naming the first entry that is not a tensor or a plain
    value, or a floating-point tensor with a NaN or an infinity."""
    import torch

    if isinstance(obj, torch.Tensor):
        if (obj.is_floating_point() or obj.is_complex()) and not bool(torch.isfinite(obj).all()):
            raise CheckpointError(f"holds non-finite values in {where or 'its tensor'}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_contents(v, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_contents(v, f"{where}[{i}]")
    elif not isinstance(obj, _PLAIN):
        raise CheckpointError(f"holds a {type(obj).__qualname__} at {where or 'its top'}, which no checkpoint holds")


def read_checkpoint(path: Path) -> Any:
    """The object saved at ``path`` by :func:`repens.core.atomic.torch_save_atomic`, verified:
    the SHA-256 it carries (a file without one has its zip CRC-32s checked), loaded with
    ``weights_only=True`` (tensors and plain containers; a pickled instance of any other
    class, or an object that would run code, is refused before anything runs), and every
    floating-point tensor finite. Raises :class:`CheckpointError` (one line) otherwise."""
    import pickle

    import torch

    from repens.core.atomic import ChecksumError, verify_torch_file

    try:
        verify_torch_file(path)
    except ChecksumError as err:
        raise CheckpointError(f"fails its checksum ({err})") from None
    except Exception as err:  # noqa: BLE001 - OSError, or whatever zipfile meets in a mangled archive
        raise CheckpointError(f"is unreadable ({_one_line(err)})") from None
    try:
        saved = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - torch raises UnpicklingError, RuntimeError, ...
        refused = "Weights only load failed" in str(err) or isinstance(err, pickle.UnpicklingError)
        what = "holds an object a checkpoint never holds" if refused else "is unreadable"
        raise CheckpointError(f"{what} ({_one_line(err)})") from None
    _check_contents(saved)
    return saved


def load_keyed_checkpoint(path: Path, key: str, log: logging.Logger, then: str = "starting from step 0") -> dict | None:
    """The checkpoint dict at ``path`` (:func:`read_checkpoint`) if it was made under
    ``key`` (its ``"key"`` entry); ``None`` if there is none, and a damaged, foreign or
    stale checkpoint is set aside (``<name>.stale``, one log line ending in ``then``)
    instead of resumed."""
    if not path.exists():
        return None
    try:
        saved = read_checkpoint(path)
    except CheckpointError as err:  # a damaged checkpoint only costs a rerun
        stale = _set_aside_as(path)
        log.warning("checkpoint %s %s; set aside as %s, %s", path, err, stale.name, then)
        return None
    made = saved.get("key") if isinstance(saved, dict) else None
    if made != key:
        set_aside(path, made, key, log, then=then)
        return None
    return saved


# ----------------------------------------------------------------------------- final records
#: first line of a final record; the second is its JSON header, then the outputs' zlib streams
FINAL_MAGIC = b"repens-final-record 1\n"


def final_record_path(checkpoint: Path) -> Path:
    """Where a finished job keeps its final record: ``<checkpoint>.final``."""
    return checkpoint.with_name(checkpoint.name + ".final")


def attempts_log_path(log: Path | str) -> Path:
    """The file beside a job's log ``<name>.log`` that keeps every attempt's log,
    ``<name>.attempts.log`` (the training commands' ``--attempts``): Snakemake deletes the
    log itself before each attempt, so after a resume it holds the last attempt only."""
    log = Path(log)
    return log.with_name(log.name.removesuffix(".log") + ".attempts.log")


def _names(record: Path, outputs: Sequence[Path]) -> list[str]:
    return [os.path.relpath(Path(p), record.parent) for p in outputs]


def _data_files(spec: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, str]:
    """A job's data files, name -> path: its ``--input`` files, and a UCI job's dataset
    folder (found as the runner finds it: ``uci_data``, ``$REPENS_UCI_DATA``, ``data/uci``; the
    folder's name from :func:`repens.core.registry.uci_folders`, as ``repens.data.uci_files.UCI_FOLDERS``)."""
    files = {str(k): str(v) for k, v in dict(runtime.get("inputs") or {}).items()}
    if spec.get("experiment") == "uci":
        from repens.core.registry import uci_folders

        root = Path(spec.get("uci_data") or os.environ.get("REPENS_UCI_DATA") or "data/uci")
        folder = root / uci_folders().get(str(spec.get("dataset")), str(spec.get("dataset"))) / "data"
        files.update({f"uci/{p.name}": str(p) for p in sorted(folder.glob("*")) if p.is_file()})
    return files


def final_key(spec: Mapping[str, Any], runtime: Mapping[str, Any]) -> str:
    """The key of a training job's final record: :func:`job_key` of ``spec`` with the
    training engine's version, the device asked for and the SHA-256 of each data file
    (``runtime["inputs"]``, name -> path; a UCI job's dataset folder), so that new data or
    another engine trains again."""
    data = {}
    for name, path in sorted(_data_files(spec, runtime).items()):
        try:
            with open(path, "rb") as f:
                data[name] = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            data[name] = "unreadable"
    return job_key(spec, "final", f"engine{ENGINE_VERSION}", runtime.get("device"), data)


def write_final_record(
    record: Path, key: str, outputs: Sequence[Path], log: logging.Logger | None = None
) -> int | None:
    """Write ``record``: ``key`` and the bytes (zlib) and SHA-256 of each of ``outputs``,
    atomically, and log one line. Returns its size in bytes; ``None`` (one warning, the
    job's outputs stay as they are) if it could not be written."""
    from repens.core.atomic import write_bytes_atomic

    log = log or logging.getLogger("repens.train")
    try:
        entries, blobs = [], []
        for name, path in zip(_names(record, outputs), outputs):
            data = Path(path).read_bytes()
            blob = zlib.compress(data, 6)
            entries.append(
                {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "stored": len(blob)}
            )
            blobs.append(blob)
        header = json.dumps({"key": key, "outputs": entries}, sort_keys=True, separators=(",", ":"))
        data = b"".join([FINAL_MAGIC, header.encode("utf-8"), b"\n", *blobs])
        write_bytes_atomic(record, data)
    except OSError as err:
        log.warning("no final record for a rerun (%s)", _one_line(err))
        return None
    log.info("kept the final record %s (%d bytes): a rerun of this job restores its outputs from it", record, len(data))
    return len(data)


def _read_final_record(record: Path, names: list[str]) -> tuple[str | None, list[bytes] | None, str]:
    """(key, outputs' bytes in the order of ``names`` or None, why not)."""
    data = record.read_bytes()
    if not data.startswith(FINAL_MAGIC):
        return None, None, "is not a final record"
    end = data.find(b"\n", len(FINAL_MAGIC))
    try:
        header = json.loads(data[len(FINAL_MAGIC) : end])
        key, entries = header["key"], header["outputs"]
        recorded = [e["name"] for e in entries]
    except (ValueError, KeyError, TypeError):
        return None, None, "has a damaged header"
    if recorded != names:
        return key, None, f"holds {recorded}, not {names}"
    outputs, offset = [], end + 1
    for entry in entries:
        try:
            blob = data[offset : offset + int(entry["stored"])]
            offset += int(entry["stored"])
            content = zlib.decompress(blob)
        except (ValueError, TypeError, KeyError, zlib.error) as err:
            return key, None, f"holds a damaged copy of {entry.get('name')} ({_one_line(err)})"
        if len(content) != entry.get("size") or hashlib.sha256(content).hexdigest() != entry.get("sha256"):
            return key, None, f"holds a copy of {entry['name']} that fails its SHA-256"
        outputs.append(content)
    if offset != len(data):
        return key, None, "has trailing or missing bytes"
    return key, outputs, ""


def _foreign_output(record: Path, outputs: Sequence[Path], contents: Sequence[bytes], spec: Mapping[str, Any]) -> str:
    """Why a final record's copies are not the job ``spec``'s results ("" if they are):
    each copy that is a result file, checked in a scratch folder beside the record."""
    import shutil
    import tempfile

    from repens.core.errors import DataFileError
    from repens.core.results import RESULT_FILES, check_result

    scratch = Path(tempfile.mkdtemp(prefix=".final-check-", dir=record.parent))
    try:
        for path, content in zip(outputs, contents):
            if Path(path).name not in RESULT_FILES:
                continue
            copy = scratch / Path(path).name
            copy.write_bytes(content)
            try:
                check_result(copy, spec)
            except DataFileError as err:
                return f"holds a copy of {Path(path).name} that is not this job's result ({err.problem})"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ""


def restore_final_outputs(
    record: Path,
    key: str,
    outputs: Sequence[Path],
    log: logging.Logger,
    then: str = "training",
    check: Mapping[str, Any] | None = None,
) -> bool:
    """Write ``outputs`` from the final record ``record`` when it was made under ``key``
    and every copy matches its SHA-256 (in the order given; put the file that marks the
    job done last); ``True`` if it did. ``check``: the job's spec, which every restored
    result must store (:func:`repens.core.results.check_result`: a record whose header
    was rewritten around another job's outputs). A record made under another key, for
    other outputs, damaged or holding another job's result is set aside (``<name>.stale``,
    one log line ending in ``then``) and nothing of it stays in place."""
    from repens.core.atomic import write_bytes_atomic

    if not record.exists():
        return False
    names = _names(record, outputs)
    try:
        made, contents, why = _read_final_record(record, names)
    except OSError as err:
        made, contents, why = None, None, f"is unreadable ({_one_line(err)})"
    if made is not None and made != key:
        set_aside(record, made, key, log, then=then, what="final record")
        return False
    if contents is None:
        stale = _set_aside_as(record)
        log.warning("final record %s %s; set aside as %s, %s", record, why, stale.name, then)
        return False
    if check is not None:
        why = _foreign_output(record, outputs, contents, check)
        if why:
            stale = _set_aside_as(record)
            log.warning("final record %s %s; set aside as %s, %s", record, why, stale.name, then)
            return False
    for path, content in zip(outputs, contents):
        write_bytes_atomic(path, content)
    log.info(
        "restored %s from the final record %s of this job (key %s); no training (delete the record to train again)",
        ", ".join(str(p) for p in outputs),
        record,
        _short(key),
    )
    return True
