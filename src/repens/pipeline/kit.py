"""The job kit: a target's training jobs on an offline GPU node without Snakemake.

A GPU node is not the login machine: no network, no Snakemake, no jsonschema, only what
travels with the repository (64 MiB), one command at most 10 minutes, the node held at most
30 minutes in all, and at most 8 result files of up to 16 MiB each back. So the work is
cut in four steps, two on each side:

1. login: ``python -m repens export-jobs results/table1.tex --config scale=paper
   --stage-raw data/raw --out jobs.json`` asks Snakemake (dry runs) which training jobs the
   targets need and writes each with exactly the command Snakemake would run (its
   ``--spec`` string included), its outputs, log, benchmark file and input files, and the
   data preparation steps of those inputs (:func:`export_jobs`); ``--stage-raw`` copies
   the original archives those steps read into an ignored folder that travels with the
   tree (``data/`` is ignored by git).
2. node: ``python -m repens run-jobs jobs.json --parallel K --deadline SECONDS`` prepares
   missing data from the archives, then runs K jobs at a time as subprocesses; at the
   deadline (or on SIGTERM / SIGINT) it sends SIGTERM, so each job checkpoints and exits,
   and waits ``--grace`` seconds for them. The next call resumes the interrupted jobs from
   their checkpoints (first) and skips the finished ones (:func:`run_jobs`). Each job's
   output goes to its Snakemake log; a finished job gets a ``benchmark.tsv`` in Snakemake's
   format (wall and CPU time over every call, peak memory). ``--stack-seeds`` runs the
   image jobs that differ only in their seed as one ``train-stack`` process per group
   (:func:`stack_groups`), each seed still a job of its own (outputs, log, benchmark, state).
3. node: ``python -m repens pack jobs.json --out $OUT/results`` packs the finished jobs'
   files (results, predictions, logs, benchmark files) and a manifest into one tar.gz, cut
   into parts of at most 16 MiB, at most 8 of them (:func:`pack`).
4. login: ``python -m repens import-results results.tar.gz*`` checks each job's spec
   against what Snakemake would run now, prepares missing data with Snakemake, puts the
   files in place newer than their inputs and records Snakemake's metadata for them
   (``--cleanup-metadata``, then ``--touch --force``), so that ``snakemake
   results/table1.tex`` builds the table from them and trains nothing, while a later
   change of the config still reruns them (:func:`import_results`).

:func:`run_jobs` and :func:`pack` use the standard library only (this process imports no
torch, numpy, Snakemake or jsonschema; the training subprocesses import what training
imports, which is neither of the last two). :func:`export_jobs` and :func:`import_results`
run Snakemake in a subprocess on the login machine.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from repens.pipeline.expect import add_expected, by_seed_longest_first, held, remaining_seconds, scaled_seconds

__all__ = [
    "KitError",
    "KIT_FORMAT",
    "parse_dry_run",
    "repens_argv",
    "command_of",
    "export_jobs",
    "run_jobs",
    "pack",
    "import_results",
    "job_status",
    "write_json",
    "DEFAULT_STATE",
    "MIB",
    "stack_key",
    "stack_argv",
    "stack_groups",
]

#: version of jobs.json, the state file and the pack's manifest
KIT_FORMAT = 1
#: repens commands that train (the jobs a node runs)
TRAIN_COMMANDS = ("train", "hmc")
#: repens commands that make a job's input (run on the node when the input is missing)
PREP_COMMANDS = ("prepare-images", "uci-download")
#: repens' own options before the command, each with a value
_GLOBAL_OPTIONS = ("--log", "--threads", "--attempts")
#: the experiments whose ``train`` jobs ``run-jobs --stack-seeds`` stacks (``repens train-stack``)
STACK_EXPERIMENTS = ("image",)
#: where run-jobs keeps what it did, under the working directory (ignored by git with results/)
DEFAULT_STATE = "results/run-jobs.json"
MIB = 1 << 20
#: a job's exit codes after SIGTERM / SIGINT (repens train: 128 + signum; killed: -signum)
_STOPPED = {143, 130, -signal.SIGTERM, -signal.SIGINT, -signal.SIGKILL}
#: a job with an expected time (``expected_s``, :mod:`repens.pipeline.expect`) starts only
#: where this many times what is left of it fits before the deadline
EXPECT_MARGIN = 1.1
#: files beside a job's outputs that are never packed as results
_NOT_RESULTS = (".ckpt", ".tmp", ".stale")


class KitError(ValueError):
    """A mistake in the kit's input (jobs file, pack, Snakemake's answer), in one line."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, atomically (a crash leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as err:
        raise KitError(f"{path}: cannot read the {what} ({err.strerror or err})") from None
    except json.JSONDecodeError as err:
        raise KitError(f"{path}: the {what} is not JSON ({err})") from None


# -- Snakemake's dry run, read -------------------------------------------------------------

_HEADER = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\s*$")
_FIELD = re.compile(r"^\s+(\w+): (.*)$")
_REPENS = re.compile(r"\bpython[\d.]*\s+-m\s+repens\b|^\s*repens\s")


def parse_dry_run(text: str) -> list[dict[str, str]]:
    """The jobs of a ``snakemake --dry-run --printshellcmds`` output: per job its ``rule``,
    the fields Snakemake prints (``input``, ``output``, ``log``, ``benchmark``,
    ``wildcards``, ``jobid``, ...) as text, and ``shellcmd``."""
    jobs: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = {"rule": header[1]}
            jobs.append(current)
            continue
        if current is None or "shellcmd" in current:
            continue
        if line.startswith("Shell command:"):  # Snakemake 9
            current["shellcmd"] = line.split(":", 1)[1].strip()
            continue
        found = _FIELD.match(line)
        if found and found[1] in (
            "input",
            "output",
            "log",
            "benchmark",
            "wildcards",
            "jobid",
            "reason",
            "resources",
            "threads",
            "priority",
            "message",
        ):
            current[found[1]] = found[2]
        elif _REPENS.search(line):  # an older Snakemake prints the command on a line of its own
            current["shellcmd"] = line.strip()
    return jobs


def _files(text: str | None) -> list[str]:
    """Snakemake's ``a, b (ancient)`` as paths (its annotations dropped)."""
    if not text:
        return []
    return [re.sub(r"\s+\([^)]*\)$", "", item.strip()) for item in text.split(", ") if item.strip()]


def _wildcards(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    return dict(item.split("=", 1) for item in text.split(", ") if "=" in item)


def repens_argv(shellcmd: str) -> list[str] | None:
    """The arguments of ``python -m repens`` (or ``repens``) in a job's shell command, up to
    its first redirection or operator; None for any other command."""
    try:
        words = shlex.split(shellcmd)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word in ("|", "||", "&&", ";", "&", "<") or re.match(r"^\d*[>&]", word):
            words = words[:i]
            break
    if len(words) >= 3 and Path(words[0]).name.startswith("python") and words[1:3] == ["-m", "repens"]:
        return words[3:]
    if words and Path(words[0]).name == "repens":
        return words[1:]
    return None


def _command_index(argv: Sequence[str]) -> int | None:
    i = 0
    while i < len(argv):
        if argv[i] in _GLOBAL_OPTIONS:
            i += 2
        elif argv[i].startswith("--") and "=" in argv[i]:
            i += 1
        elif argv[i].startswith("-"):
            i += 1
        else:
            return i
    return None


def command_of(argv: Sequence[str]) -> str | None:
    """The repens command of ``argv`` (past the global options and their values)."""
    i = _command_index(argv)
    return None if i is None else argv[i]


def _option(argv: Sequence[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _with_option(argv: Sequence[str], name: str, value: str | None) -> list[str]:
    """``argv`` with ``name``'s value replaced (``None``: the option removed); an option it
    lacks is not added."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word == name:
            skip = True
            if value is not None:
                out += [name, value]
            continue
        if word.startswith(name + "="):
            if value is not None:
                out.append(f"{name}={value}")
            continue
        out.append(word)
    return out


# -- export (login machine) ----------------------------------------------------------------


def default_snakefile() -> Path:
    """This checkout's Snakefile (src/repens/pipeline/kit.py -> Snakefile)."""
    return Path(__file__).resolve().parents[3] / "Snakefile"


def snakemake_command(
    args: Sequence[str],
    *,
    directory: Path | str = ".",
    snakefile: Path | str | None = None,
    config: Sequence[str] = (),
    configfile: str | None = None,
) -> list[str]:
    """``python -m snakemake -s SNAKEFILE -d DIR ARGS [--configfile F] [--config K=V ...]``
    (``--config`` last: it takes every word after it)."""
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(Path(snakefile or default_snakefile()).resolve()),
        "-d",
        str(directory),
        *args,
    ]
    if configfile:
        command += ["--configfile", str(configfile)]
    if config:
        command += ["--config", *config]
    return command


def _check_configfile(configfile: str) -> None:
    """A :class:`KitError` ``<file>:<line>:<column>: YAML syntax error ...`` for a config
    file Snakemake would fail to read (:func:`repens.pipeline.checks.check_yaml_file`)."""
    from repens.pipeline.checks import CheckError, check_yaml_file

    path = Path(configfile)  # Snakemake reads it from where it runs
    if path.is_file():
        try:
            check_yaml_file(path)
        except CheckError as err:
            raise KitError(f"--configfile {err}") from None


def _snakemake(args: Sequence[str], what: str, ok: str | None = None, **kwargs: Any) -> str:
    """Run Snakemake; its output (stdout and stderr), or a KitError with its last lines
    (unless the output says ``ok``)."""
    if kwargs.get("configfile"):  # a YAML error: its file and line, not Snakemake's generic message
        _check_configfile(kwargs["configfile"])
    command = snakemake_command(args, **kwargs)
    proc = subprocess.run(command, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and not (ok and ok in out):
        tail = " | ".join(line.strip() for line in out.strip().splitlines()[-8:])
        raise KitError(f"snakemake ({what}) failed, exit {proc.returncode}: {tail}")
    return out


def _dry_run(targets: Sequence[str], extra: Sequence[str] = (), **kwargs: Any) -> list[dict[str, str]]:
    return parse_dry_run(_snakemake(["--dry-run", "--printshellcmds", *extra, *targets], "dry run", **kwargs))


def _job_record(block: dict[str, str], argv: list[str]) -> dict[str, Any]:
    outputs = _files(block.get("output"))
    logs = _files(block.get("log"))
    benchmark = _files(block.get("benchmark"))
    return {
        "id": outputs[0],
        "rule": block["rule"],
        "wildcards": _wildcards(block.get("wildcards")),
        "command": command_of(argv),
        "argv": argv,
        "spec": _option(argv, "--spec"),
        "outputs": outputs,
        "log": logs[0] if logs else None,
        "benchmark": benchmark[0] if benchmark else None,
        "inputs": _files(block.get("input")),
    }


def _archives(dataset: str | None) -> list[dict[str, str]]:
    """The original files a prepare-images step reads: path under a torchvision root, MD5."""
    if not dataset:
        return []
    try:
        from repens.data.images import IMAGE_DATASETS
    except ImportError:  # numpy missing: the list is a convenience
        return []
    entry = IMAGE_DATASETS.get(dataset)
    return [{"path": os.path.normpath(f"{f.folder}/{f.filename}"), "md5": f.md5} for f in entry.files] if entry else []


def _file_digest(path: Path, algorithm: str) -> str:
    """The hex digest of ``path``'s bytes (``md5`` for the image archives' registry, ``sha256``
    for a pack's files), read in chunks."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, algorithm).hexdigest()


def stage_raw(prepare: Sequence[dict[str, Any]], stage: Path, directory: Path = Path(".")) -> list[Path]:
    """Copy the archives of the prepare-images steps into ``stage`` (a torchvision root:
    ``stage/FashionMNIST/raw/...``), from the step's mirror or root, MD5 checked; the
    copies made (or found already there)."""
    staged, missing = [], []
    for step in prepare:
        if step["command"] != "prepare-images":
            continue
        places = [p for p in (_option(step["argv"], "--mirror"), _option(step["argv"], "--root")) if p]
        for archive in step.get("archives", []):
            dest = stage / archive["path"]
            if dest.is_file() and _file_digest(dest, "md5") == archive["md5"]:
                staged.append(dest)
                continue
            source = next(
                (directory / p / archive["path"] for p in places if (directory / p / archive["path"]).is_file()), None
            )
            if source is None:
                missing.append(f"{archive['path']} (looked in {', '.join(places) or 'no folder'})")
                continue
            if _file_digest(source, "md5") != archive["md5"]:
                raise KitError(f"{source}: wrong MD5 (want {archive['md5']}); not staged")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
            staged.append(dest)
    if missing:
        raise KitError(
            f"archives to stage not found: {'; '.join(missing)}; prepare the data on this machine first "
            "(snakemake <data file>) or name a mirror with --config image_data_mirror=DIR"
        )
    return staged


def export_jobs(
    targets: Sequence[str],
    *,
    config: Sequence[str] = (),
    configfile: str | None = None,
    snakefile: Path | str | None = None,
    directory: Path | str = ".",
    forceall: bool = False,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    stage: Path | str | None = None,
    expect_from: Path | str | None = None,
    order: str = "seed",
    skip_held: bool = True,
) -> dict[str, Any]:
    """The training jobs ``targets`` need, as Snakemake plans them now (``forceall``: all of
    them, done or not), with the steps that prepare their inputs: the content of jobs.json.

    ``include`` / ``exclude``: shell patterns on a job's first output (``results/image/
    fashionmnist/*``). ``stage``: copy the prepare-images archives there (:func:`stage_raw`).
    ``expect_from``: a reference tree; the jobs whose results it holds are left out
    (``skip_held``), each other job whose method it holds GPU runs of gets their longest time
    as ``expected_s`` (:func:`repens.pipeline.expect.add_expected`). ``order``:
    ``seed`` (:func:`repens.pipeline.expect.by_seed_longest_first`) or ``snakemake`` (its plan's).
    """
    directory = Path(directory)
    where = dict(directory=directory, snakefile=snakefile, config=config, configfile=configfile)
    blocks = _dry_run(targets, ["--forceall"] if forceall else [], **where)
    jobs_sorted, others = _train_jobs(blocks, include, exclude)
    if expect_from is not None:
        held_there = [j["id"] for j in jobs_sorted if skip_held and held(j["id"], Path(expect_from))]
        jobs_sorted = [j for j in jobs_sorted if j["id"] not in held_there]
        add_expected(jobs_sorted, Path(expect_from))
    if order == "seed":
        jobs_sorted = by_seed_longest_first(jobs_sorted)
    elif order != "snakemake":
        raise KitError(f"--order {order!r}: not one of seed, snakemake")
    inputs = sorted({p for job in jobs_sorted for p in job["inputs"]})
    prepare = _prepare_steps(inputs, where) if inputs else []
    made = {p for step in prepare for p in step["outputs"]}
    data = {
        "kit": KIT_FORMAT,
        "created": _now(),
        "snakemake": {"targets": list(targets), "config": list(config), "configfile": configfile, "forceall": forceall},
        "jobs": jobs_sorted,
        "prepare": prepare,
        # inputs no step makes: they must travel with the tree (or the job cannot run there)
        "ship": [p for p in inputs if p not in made],
        "left_to_snakemake": others,
    }
    if expect_from is not None:
        data["reference"] = {"path": str(expect_from), "held_left_out": held_there}
    if stage is not None:
        data["staged"] = [str(p) for p in stage_raw(prepare, Path(stage), directory)]
    return data


def _train_jobs(
    blocks: list[dict[str, Any]], include: Sequence[str], exclude: Sequence[str]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """:func:`export_jobs`' training jobs among a dry run's ``blocks`` (in Snakemake's job
    order, filtered by ``include`` / ``exclude``), and the count by rule of the other jobs."""
    jobs, others = [], {}
    for block in blocks:
        argv = repens_argv(block.get("shellcmd", ""))
        if argv is None or command_of(argv) not in TRAIN_COMMANDS or not block.get("output"):
            if argv is None or command_of(argv) not in PREP_COMMANDS:
                others[block["rule"]] = others.get(block["rule"], 0) + 1
            continue
        job = _job_record(block, argv)
        if include and not any(fnmatch.fnmatch(job["id"], g) for g in include):
            continue
        if any(fnmatch.fnmatch(job["id"], g) for g in exclude):
            continue
        jobs.append((int(block.get("jobid", 0) or 0), job))
    return [job for _, job in sorted(jobs, key=lambda item: item[0])], others


def _prepare_steps(inputs: list[str], where: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`export_jobs`' steps that make ``inputs`` (the data-preparing commands)."""
    prepare = []
    for block in _dry_run(inputs, ["--force"], **where):
        argv = repens_argv(block.get("shellcmd", ""))
        if argv is None or command_of(argv) not in PREP_COMMANDS:
            continue
        outputs = _files(block.get("output"))
        logs = _files(block.get("log"))
        dataset = _option(argv, "--dataset")
        prepare.append(
            {
                "rule": block["rule"],
                "command": command_of(argv),
                "argv": argv,
                "outputs": outputs,
                "log": logs[0] if logs else None,
                "wildcards": _wildcards(block.get("wildcards")),
                "dataset": dataset,
                "archives": _archives(dataset) if command_of(argv) == "prepare-images" else [],
            }
        )
    return prepare


# -- the runner (GPU node; standard library only) -----------------------------------------


def _load_jobs(path: Path | str) -> dict[str, Any]:
    data = _read_json(Path(path), "jobs file")
    if not isinstance(data, dict) or data.get("kit") != KIT_FORMAT or not isinstance(data.get("jobs"), list):
        raise KitError(f"{path}: not a jobs file of this kit (python -m repens export-jobs writes one)")
    return data


def _load_state(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"kit": KIT_FORMAT, "jobs": {}, "prepare": {}, "calls": [], "packs": []}
    state = _read_json(path, "run-jobs state")
    for key, empty in (("jobs", {}), ("prepare", {}), ("calls", []), ("packs", [])):
        state.setdefault(key, empty)
    return state


def job_status(job: dict[str, Any], record: dict[str, Any] | None, directory: Path) -> str:
    """``done`` (its outputs are there and were made under its spec), ``present`` (its
    outputs are there, not made by run-jobs), ``failed``, ``interrupted``, or ``todo``."""
    there = all((directory / p).is_file() for p in job["outputs"])
    if record is not None and record.get("spec") not in (None, _sha(job.get("spec") or "")):
        return "todo"  # another spec at the same paths: run it again
    if there:
        return "done" if record is not None and record.get("status") == "done" else "present"
    if record is None:
        return "todo"
    return {"failed": "failed", "interrupted": "interrupted", "running": "interrupted"}.get(
        record.get("status"), "todo"
    )


def stack_key(job: dict[str, Any], argv: Sequence[str] | None = None) -> str | None:
    """What ``job`` must share with the jobs it is stacked with (``repens train-stack``): its
    spec but the seed, and its command line (``argv``, by default the job's) but ``--spec``
    and ``--out``, so the stack gets the same inputs, device, threads. None for a job that
    is not stacked: not a ``train`` job of :data:`STACK_EXPERIMENTS`, no seed in its spec,
    or a ``--checkpoint`` of its own."""
    argv = list(job["argv"] if argv is None else argv)
    if command_of(argv) != "train" or _option(argv, "--checkpoint") is not None or _option(argv, "--out") is None:
        return None
    try:
        spec = json.loads(job.get("spec") or _option(argv, "--spec") or "")
    except json.JSONDecodeError:
        return None
    if not isinstance(spec, dict) or spec.get("experiment") not in STACK_EXPERIMENTS or "seed" not in spec:
        return None
    rest = {k: v for k, v in spec.items() if k != "seed"}
    return json.dumps([rest, _per_job_removed(argv)], sort_keys=True)


def _per_job_removed(argv: Sequence[str]) -> list[str]:
    """``argv`` without the options each job of a stack has its own value of."""
    for name in ("--spec", "--out", "--attempts"):
        argv = _with_option(argv, name, None)
    return list(argv)


def stack_argv(argvs: Sequence[Sequence[str]]) -> list[str]:
    """The ``train-stack`` command line of ``train`` jobs of one :func:`stack_key`: the first
    job's, its command ``train-stack``, then ``--spec S --out F`` per job, in order."""
    base = _per_job_removed(argvs[0])
    i = _command_index(base)
    assert i is not None and base[i] == "train", base
    base[i] = "train-stack"
    return base + [w for argv in argvs for w in ("--spec", _option(argv, "--spec"), "--out", _option(argv, "--out"))]


def _spec_out_pairs(argv: Sequence[str]) -> list[tuple[str, str]]:
    """The ``--spec`` / ``--out`` values of a ``train`` or ``train-stack`` command line, paired in order."""
    specs = [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--spec"]
    outs = [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--out"]
    return list(zip(specs, outs))


def side_by_side_argv(argvs: Sequence[Sequence[str]]) -> list[str]:
    """One ``train-stack --stacks SIZES`` command line that trains the stacks (``train-stack``)
    and single image jobs (``train``, a stack of one) of ``argvs`` side by side in one process,
    a thread and a CUDA stream each (:mod:`repens.experiments.streams`); they share all but
    ``--spec`` / ``--out`` (:func:`side_by_side_key`)."""
    base = _with_option(_per_job_removed(argvs[0]), "--stacks", None)
    i = _command_index(base)
    assert i is not None and base[i] in ("train", "train-stack"), base
    base[i] = "train-stack"
    pairs = [_spec_out_pairs(argv) for argv in argvs]
    sizes = ",".join(str(len(p)) for p in pairs)
    return base + ["--stacks", sizes] + [w for p in pairs for spec, out in p for w in ("--spec", spec, "--out", out)]


def side_by_side_key(argv: Sequence[str]) -> str | None:
    """What tasks trained side by side in one process share: their command line but the
    command (``train`` or ``train-stack``), ``--spec``, ``--out``, ``--stacks`` and the per-job
    ``--attempts``, and their specs' ``matmul_precision`` (process-wide: ``train-stack``
    refuses stacks that differ in it); None for a task that cannot join them (another command,
    a ``--checkpoint`` of its own, not an image job, or specs of more than one precision)."""
    if command_of(argv) not in ("train", "train-stack") or _option(argv, "--checkpoint") is not None:
        return None
    pairs = _spec_out_pairs(argv)
    try:
        specs = [json.loads(spec) for spec, _ in pairs]
        if not specs or any(spec.get("experiment") != "image" for spec in specs):
            return None
    except (json.JSONDecodeError, AttributeError):
        return None
    precisions = {spec.get("matmul_precision") for spec in specs}
    if len(precisions) > 1:
        return None
    base = _with_option(_per_job_removed(argv), "--stacks", None)
    i = _command_index(base)
    assert i is not None
    return json.dumps([*base[:i], *base[i + 1 :], "matmul_precision", *precisions])


def stack_groups(jobs: Sequence[dict[str, Any]], argvs: Sequence[Sequence[str]] | None = None) -> list[list[int]]:
    """The indices of ``jobs`` (with their command lines ``argvs``, by default their own)
    grouped for ``--stack-seeds``: jobs of one :func:`stack_key` with distinct seeds form a
    group, in their order; every other job (and a repeated seed) is a group of its own.
    Groups come in the order of their first job."""
    groups: list[list[int]] = []
    open_groups: dict[str, tuple[list[int], set]] = {}
    for i, job in enumerate(jobs):
        key = stack_key(job, None if argvs is None else argvs[i])
        seed = json.loads(job.get("spec") or _option(job["argv"], "--spec"))["seed"] if key else None
        if key is not None and key in open_groups and seed not in open_groups[key][1]:
            open_groups[key][0].append(i)
            open_groups[key][1].add(seed)
            continue
        groups.append([i])
        if key is not None and key not in open_groups:
            open_groups[key] = (groups[-1], {seed})
    return groups


@dataclass
class _Task:
    kind: str  # "job" or "prepare"
    key: str  # a job's id (a stack's: its first job's), a data step's first output
    argv: list[str]
    log: str | None
    outputs: list[str]
    needs: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)  # a seed stack's jobs (ids), in order; else empty
    #: seconds it should still take (:func:`repens.pipeline.expect.remaining_seconds`); None: unknown
    expected: float | None = None
    #: how many jobs shared the GPU when ``expected`` was measured (``expected_jobs``); None: unknown
    shared_with: float | None = None
    proc: subprocess.Popen | None = None
    started: float = 0.0
    started_at: str = ""
    log_handle: Any = None
    log_offset: int = 0

    @property
    def jobs(self) -> list[str]:
        """The ids of the jobs this task runs (none for a data step)."""
        return list(self.members) if self.members else [self.key] if self.kind == "job" else []


def _what(task: _Task) -> str:
    """A task of several jobs in words: a stack of seeds, or stacks side by side."""
    sizes = _option(task.argv, "--stacks")
    if sizes:
        return f"{len(task.members)} jobs side by side (stacks of {sizes})"
    return f"a stack of {len(task.members)} seeds"


def _gpu_name() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _benchmark_tsv(attempts: Sequence[dict[str, Any]]) -> str:
    """Snakemake's benchmark.tsv of a job run in several calls: wall and CPU seconds summed,
    the peak resident memory (MB) the largest; what a node cannot tell, NA."""
    seconds = sum(a.get("seconds", 0.0) for a in attempts)
    cpu = sum(a.get("cpu_seconds", 0.0) for a in attempts)
    rss = max((a.get("max_rss_mb") or 0.0 for a in attempts), default=0.0)
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    load = 100.0 * cpu / seconds if seconds > 0 else 0.0
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"
    return f"{header}\n{seconds:.2f}\t{h}:{m:02d}:{s:02d}\t{rss:.2f}\tNA\tNA\tNA\tNA\tNA\t{load:.2f}\t{cpu:.2f}\n"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (exists and is no zombie)."""
    try:
        return not Path(f"/proc/{pid}/stat").read_bytes().rsplit(b") ", 1)[-1].startswith(b"Z")
    except OSError:
        return False


class _Runner:
    def __init__(
        self,
        jobs_file: Path | str,
        *,
        parallel: int,
        deadline: float | None,
        grace: float,
        device: str | None,
        raw: Path | str,
        directory: Path | str,
        state: Path | str | None,
        retry_failed: bool,
        prepare_only: bool,
        min_run: float,
        only: Sequence[str],
        out: Any,
        launcher: Sequence[str] | None = None,
        stack_seeds: bool = False,
        expect_margin: float = EXPECT_MARGIN,
        then: float = 0.0,
        side_by_side: int = 1,
    ) -> None:
        _check_deadline(deadline, float(min_run), prepare_only)  # before anything is read or run
        self.data = _load_jobs(jobs_file)
        self.by_id = {job["id"]: job for job in self.data["jobs"]}
        self.stack_seeds = bool(stack_seeds)
        self.side_by_side = max(1, int(side_by_side))
        self.directory = Path(directory)
        self.state_path = Path(state) if state else self.directory / DEFAULT_STATE
        self.state = _load_state(self.state_path)
        self.parallel = max(1, int(parallel))
        self.deadline, self.grace, self.min_run = deadline, float(grace), float(min_run)
        self.expect_margin, self.then = float(expect_margin), max(0.0, float(then))
        self.held_back: set[str] = set()  # tasks said not to fit before the deadline
        self.device, self.raw = device, Path(raw)
        self.retry_failed, self.prepare_only, self.only = retry_failed, prepare_only, list(only)
        self.out = out
        self.launcher = list(launcher) if launcher else [sys.executable, "-m", "repens"]
        self.t0 = time.monotonic()
        self.stop_reason: str | None = None
        self.call: dict[str, Any] = {
            "started": _now(),
            "host": platform.node(),
            "python": platform.python_version(),
            "gpu": _gpu_name(),
            "parallel": self.parallel,
            "deadline": deadline,
            "device": device,
            "stack_seeds": self.stack_seeds,
            "side_by_side": self.side_by_side,
            "events": [],
        }
        src = str(Path(__file__).resolve().parents[2])
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
            "PYTHONUNBUFFERED": "1",
        }

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {text}", file=self.out, flush=True)

    def event(self, key: str, what: str, **extra: Any) -> None:
        self.call["events"].append({"at": round(time.monotonic() - self.t0, 1), "task": key, "what": what, **extra})

    def save(self) -> None:
        write_json(self.state_path, self.state)

    # which tasks
    def stop_leftovers(self) -> None:
        """Jobs a killed runner left running (their record says ``running`` and the process
        is still there, running the same job): SIGTERM, so they checkpoint, before anything
        runs them again; killed after ``grace``."""
        alive: list[int] = []
        for book in ("jobs", "prepare"):
            for key, record in self.state[book].items():
                pid = record.get("pid")
                if record.get("status") != "running" or not pid or pid in alive:  # a stack's jobs share one
                    continue
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if key.encode() in cmdline and _alive(pid):
                    self.say(f"{key}: still running from an earlier call (pid {pid}); SIGTERM")
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except OSError:
                        continue
                    alive.append(pid)
        until = time.monotonic() + self.grace
        while alive and time.monotonic() < until:
            time.sleep(0.2)
            alive = [pid for pid in alive if _alive(pid)]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def plan(self) -> tuple[list[_Task], dict[str, str]]:
        jobs = [j for j in self.data["jobs"] if not self.only or any(fnmatch.fnmatch(j["id"], g) for g in self.only)]
        status = {j["id"]: job_status(j, self.state["jobs"].get(j["id"]), self.directory) for j in jobs}
        todo = [
            j
            for j in jobs
            if status[j["id"]] in ("todo", "interrupted") or (status[j["id"]] == "failed" and self.retry_failed)
        ]
        makers = {p: step for step in self.data.get("prepare", []) for p in step["outputs"]}
        preps: dict[str, _Task] = {}
        tasks: list[_Task] = []
        for job in todo if not self.prepare_only else jobs:
            for path in job["inputs"]:
                if (self.directory / path).exists() or path not in makers:
                    continue
                step = makers[path]
                key = step["outputs"][0]
                if key not in preps:
                    preps[key] = _Task("prepare", key, self._prepare_argv(step), step.get("log"), step["outputs"])
        if self.prepare_only:
            return list(preps.values()), status

        def resumes(job: dict[str, Any]) -> bool:
            return any(
                p.name.endswith(".ckpt") or ".ckpt." in p.name
                for out in job["outputs"]
                for p in (self.directory / out).parent.glob("*.ckpt*")
            )

        ordered = sorted(todo, key=lambda j: not resumes(j))  # a started job first (stable sort)
        for job in ordered:
            argv = list(job["argv"])
            if self.device and _option(argv, "--device") is not None:
                argv = _with_option(argv, "--device", self.device)
            missing = [p for p in job["inputs"] if not (self.directory / p).exists()]
            needs = [makers[p]["outputs"][0] for p in missing if p in makers]
            unmade = [p for p in missing if p not in makers]
            if unmade:
                status[job["id"]] = "blocked"
                self.say(
                    f"blocked {job['id']}: no file {', '.join(unmade)} and no step makes it (ship it with the tree)"
                )
                self.event(job["id"], "blocked", missing=unmade)
                continue
            steps = json.loads(job.get("spec") or _option(job["argv"], "--spec") or "{}").get("steps")
            expected = remaining_seconds(job, steps, self.directory)
            task = _Task("job", job["id"], argv, job.get("log"), job["outputs"], needs, expected=expected)
            task.shared_with = job.get("expected_jobs")
            tasks.append(task)
        if self.stack_seeds:
            tasks = self._stack(tasks)
        if self.side_by_side > 1:
            tasks = self._side_by_side(tasks)
        return list(preps.values()) + tasks, status

    def _stack(self, tasks: list[_Task]) -> list[_Task]:
        """``tasks`` with the image jobs that differ only in seed merged into one
        ``train-stack`` task per group (:func:`stack_groups`; a group of one stays a
        ``train`` task). A group's jobs go in the jobs file's order, so that its stack
        checkpoint (``<first out>.stack.ckpt``) is found again by the next call; the group
        takes the place of its first task (one that resumes comes first).

        The image ``train`` jobs to run that differ only in their seed (the same spec
        but ``seed``, the same command line but ``--spec`` / ``--out``) run as one
        ``python -m repens train-stack`` per group (:func:`stack_groups`), a task of its
        own for ``parallel``, the deadline, SIGTERM and ``grace``. Each seed stays a
        job: its own outputs, state record and ``benchmark.tsv`` (the stack's wall and
        CPU time split evenly across its seeds, its peak memory for each), and its own
        log (the stack's output goes to its first seed's log and is copied to the
        others' when the stack ends), so the skip and resume logic, :func:`pack` and
        :func:`import_results` treat each seed as before. A group whose seeds are partly
        finished stacks only the rest. The stack checkpoints to ``<first seed's
        out>.stack.ckpt``, keyed by its seeds: a stack of another seed set (some of its
        seeds finished or failed meanwhile, ``only`` changed) starts afresh (the old
        checkpoint set aside), as does a job run once stacked and then without
        ``stack_seeds`` (its ``train`` reads ``<out>.ckpt``); one interrupted as a
        ``train`` (``<out>.ckpt``, no ``<out>.stack.ckpt``) stays out of the stacks and
        resumes alone. Other jobs, and groups of one, run as ``train`` as without it."""
        index = {job["id"]: i for i, job in enumerate(self.data["jobs"])}
        place = {t.key: n for n, t in enumerate(tasks)}
        alone = {t.key for t in tasks if self._resumes_alone(t)}
        merged: list[tuple[int, _Task]] = [(place[t.key], t) for t in tasks if t.key in alone]
        in_file = sorted((t for t in tasks if t.key not in alone), key=lambda t: index[t.key])
        groups = stack_groups([self.by_id[t.key] for t in in_file], [t.argv for t in in_file])
        for group in groups:
            members = [in_file[i] for i in group]
            if len(members) == 1:
                merged.append((place[members[0].key], members[0]))
                continue
            task = _Task(
                "job",
                members[0].key,
                stack_argv([t.argv for t in members]),
                members[0].log,
                [o for t in members for o in t.outputs],
                sorted({n for t in members for n in t.needs}),
                members=[t.key for t in members],
            )
            merged.append((min(place[t.key] for t in members), task))
        return [task for _, task in sorted(merged, key=lambda item: item[0])]

    def _side_by_side(self, tasks: list[_Task]) -> list[_Task]:
        """``tasks`` with up to ``side_by_side`` image training tasks (stacks of seeds and
        single jobs) that share their command line but ``--spec`` / ``--out``
        (:func:`side_by_side_key`) merged into one process, ``train-stack --stacks``, which
        trains them at once, a thread and a CUDA stream each (:mod:`repens.experiments.streams`).
        The merged task's jobs are its tasks' jobs, in order: each keeps its outputs, state
        record, log (copied as a stack's is) and ``benchmark.tsv`` (the process's time split
        evenly across all its jobs); each stack keeps its own checkpoint, so a job stopped
        here resumes in a process of another make-up. Tasks go in their order; the merged
        task takes the place of its first."""
        merged: list[_Task] = []
        open_groups: dict[str, list[_Task]] = {}
        order: list[list[_Task] | _Task] = []
        for task in tasks:
            key = side_by_side_key(task.argv) if task.kind == "job" else None
            if key is None:
                order.append(task)
                continue
            group = open_groups.get(key)
            if group is None or len(group) >= self.side_by_side:
                group = open_groups[key] = []
                order.append(group)
            group.append(task)
        for item in order:
            if isinstance(item, _Task):
                merged.append(item)
            elif len(item) == 1:
                merged.append(item[0])
            else:
                jobs = [job for t in item for job in t.jobs]
                merged.append(
                    _Task(
                        "job",
                        jobs[0],
                        side_by_side_argv([t.argv for t in item]),
                        item[0].log,
                        [o for t in item for o in t.outputs],
                        sorted({n for t in item for n in t.needs}),
                        members=jobs,
                    )
                )
        return merged

    def _resumes_alone(self, task: _Task) -> bool:
        """Whether ``task`` (a ``train`` job) has a checkpoint of its own, ``<out>.ckpt``, and no
        stack checkpoint ``<out>.stack.ckpt``: it then runs alone and resumes, rather than
        start afresh inside a stack (its seed's steps so far would be lost)."""
        out = _option(task.argv, "--out")
        if out is None:
            return False
        out_path = self.directory / out
        own = out_path.with_name(out_path.name + ".ckpt")
        stacked = out_path.with_name(out_path.name + ".stack.ckpt")
        return own.exists() and not stacked.exists()

    def _prepare_argv(self, step: dict[str, Any]) -> list[str]:
        argv = list(step["argv"])
        if step["command"] != "prepare-images":
            return argv
        # on the node: offline, from the shipped archives (a torchvision root) where there are any
        argv = _with_option(argv, "--mirror", None)
        argv = [a for a in argv if a != "--offline"]
        cut = argv.index("--out") if "--out" in argv else len(argv)
        extra = ["--offline"] + (["--mirror", str(self.raw)] if (self.directory / self.raw).is_dir() else [])
        return argv[:cut] + extra + argv[cut:]

    # running
    def start(self, task: _Task) -> None:
        command = [*self.launcher, *task.argv]
        log_path = self._log_path(task)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        task.log_handle = open(log_path, "ab")
        task.log_offset = log_path.stat().st_size
        task.log_handle.write(f"\n== repens run-jobs {_now()}: {shlex.join(task.argv)}\n".encode())
        if task.members:
            task.log_handle.write(
                f"== {_what(task)}, one process: this call's output is "
                f"copied to each seed's log when it ends\n".encode()
            )
        task.log_handle.flush()
        for job_id in task.jobs:
            job = self.by_id[job_id]
            sha = _sha(job.get("spec") or "")
            record = self.state["jobs"].get(job_id)
            if record is None or record.get("spec") != sha:
                # a first run, or another spec's record: what lies at its outputs is not its result
                for out in job["outputs"]:
                    if (self.directory / out).is_file():
                        (self.directory / out).unlink()
                record = self.state["jobs"][job_id] = {"spec": sha, "attempts": []}
            record["status"] = "running"
        if task.jobs:
            self.save()
        task.started, task.started_at = time.monotonic(), _now()
        task.proc = subprocess.Popen(
            command,
            cwd=self.directory,
            stdout=task.log_handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
        )
        book = self.state["jobs" if task.kind == "job" else "prepare"]
        for key in task.jobs or [task.key]:
            book.setdefault(key, {"attempts": []}).update(status="running", pid=task.proc.pid)
        self.save()
        if task.members:
            self.say(f"start {_what(task)} (train-stack): {', '.join(task.members)}")
        else:
            self.say(f"start {task.key}" + (" (data)" if task.kind == "prepare" else ""))
        for key in task.jobs or [task.key]:
            self.event(key, "start", **({"stack": task.members} if task.members else {}))

    def _log_path(self, task: _Task) -> Path:
        return self.directory / (task.log or f"logs/run-jobs/{task.key.replace('/', '_')}.log")

    def _copy_stack_log(self, task: _Task) -> None:
        """A stack's output of this call (in its first job's log) appended to its other jobs' logs."""
        source = self._log_path(task)
        try:
            with open(source, "rb") as fh:
                fh.seek(task.log_offset)
                text = fh.read()
        except OSError:
            return
        for job_id in task.members[1:]:
            log = self.by_id[job_id].get("log")
            if not log or self.directory / log == source:
                continue
            path = self.directory / log
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as fh:
                fh.write(text)

    def reap(self, task: _Task) -> bool:
        """Whether ``task`` has exited (its record updated)."""
        assert task.proc is not None
        try:
            pid, status, usage = os.wait4(task.proc.pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False
        code = os.waitstatus_to_exitcode(status)
        task.proc.returncode = code
        task.log_handle.close()
        if task.members:
            self._copy_stack_log(task)
        seconds = time.monotonic() - task.started
        cpu = usage.ru_utime + usage.ru_stime
        # A seed stack is one process for several jobs: its wall and CPU time are split
        # evenly across its seeds (each seed's benchmark.tsv shows its share, so the seeds'
        # times add up to the stack's); the peak memory is the whole process's, for each.
        share = max(1, len(task.members))
        attempt = {
            "started": task.started_at,
            "seconds": round(seconds / share, 3),
            "cpu_seconds": round(cpu / share, 3),
            "max_rss_mb": round(usage.ru_maxrss / 1024.0, 2)
            if sys.platform != "darwin"
            else round(usage.ru_maxrss / MIB, 2),
            "returncode": code,
            "stopped": self.stop_reason,
        }
        if task.members:
            attempt["stack"] = {"jobs": list(task.members), "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3)}
        book = self.state["jobs" if task.kind == "job" else "prepare"]
        for key in task.jobs or [task.key]:
            outputs = self.by_id[key]["outputs"] if task.kind == "job" else task.outputs
            if all((self.directory / p).is_file() for p in outputs):
                how = "done"
            elif self.stop_reason is not None and code in _STOPPED:
                how = "interrupted"
            else:
                how = "failed"
            record = book.setdefault(key, {"attempts": []})
            record["attempts"].append({**attempt, "status": how})
            record["status"] = how
            if task.kind == "job" and how == "done":
                job = self.by_id[key]
                if job.get("benchmark"):
                    path = self.directory / job["benchmark"]
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(_benchmark_tsv(record["attempts"]))
            self.say(
                f"{how} {key} after {seconds:.1f} s (exit {code}"
                + (f"; {_what(task)}, {seconds / share:.1f} s each" if task.members else "")
                + ")"
            )
            self.event(key, how, returncode=code, seconds=round(seconds, 1))
        self.save()
        return True

    def run(self) -> int:
        self.stop_leftovers()
        tasks, status = self.plan()
        self.announce(tasks, status)
        previous = {}
        for signum in (signal.SIGTERM, signal.SIGINT):

            def stop(num: int, frame: Any) -> None:  # noqa: ARG001
                if self.stop_reason is None:
                    self.stop_reason = signal.Signals(num).name

            previous[signum] = signal.signal(signum, stop)
        pending, running = list(tasks), []
        finished: dict[str, str] = {}
        term_sent = kill_at = None
        try:
            while pending or running:
                now = time.monotonic()
                if self.stop_reason is None and self.deadline is not None and now - self.t0 >= self.deadline:
                    self.stop_reason = "deadline"
                term_sent, kill_at = self.stop_running(running, now, term_sent, kill_at)
                self.reap_finished(running, finished)
                self.block_failed(pending, status, finished)
                left = None if self.deadline is None else self.deadline - (now - self.t0)
                self.start_ready(pending, running, finished, left)
                if self.nothing_to_wait_for(pending, running, finished, left):
                    break
                time.sleep(0.2)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.call["ended"] = _now()
            self.call["stopped"] = self.stop_reason
            self.state["calls"].append(self.call)
            self.save()
        return self.summary()

    def announce(self, tasks: list, status: dict[str, str]) -> None:
        """:meth:`run`'s first line: the jobs, their status and what is to run."""
        counts = {s: sum(1 for v in status.values() if v == s) for s in set(status.values())}
        self.say(
            f"{len(self.data['jobs'])} job(s) in the file; "
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + f"; {sum(t.kind == 'prepare' for t in tasks)} data step(s) and "
            f"{sum(len(t.jobs) for t in tasks)} job(s) to run"
            + (
                f" ({sum(len(t.members) for t in tasks)} of them in {sum(bool(t.members) for t in tasks)} seed "
                "stack(s))"
                if any(t.members for t in tasks)
                else ""
            )
            + f", {self.parallel} at a time"
            + (f", deadline {self.deadline:g} s" if self.deadline else "")
        )

    def stop_running(self, running: list, now: float, term_sent: Any, kill_at: Any) -> tuple[Any, Any]:
        """Once stopped, SIGTERM to the running tasks, and SIGKILL ``grace`` seconds later;
        the new (``term_sent``, ``kill_at``)."""
        if self.stop_reason is not None and term_sent is None:
            term_sent, kill_at = now, now + self.grace
            if running:
                self.say(
                    f"{self.stop_reason}: SIGTERM to {len(running)} running task(s); they checkpoint "
                    f"and exit (up to {self.grace:g} s)"
                )
            for task in running:
                task.proc.send_signal(signal.SIGTERM)
        if kill_at is not None and now >= kill_at:
            for task in running:
                self.say(
                    f"SIGKILL {task.key}"
                    + (f" ({_what(task)})" if task.members else "")
                    + f": no exit {self.grace:g} s after SIGTERM"
                )
                task.proc.kill()
            kill_at = float("inf")
        return term_sent, kill_at

    def reap_finished(self, running: list, finished: dict[str, str]) -> None:
        """Take the tasks that ended off ``running``, their jobs' status into ``finished``."""
        for task in list(running):
            if self.reap(task):
                running.remove(task)
                book = self.state["jobs" if task.kind == "job" else "prepare"]
                for key in task.jobs or [task.key]:
                    finished[key] = book[key]["status"]

    def block_failed(self, pending: list, status: dict[str, str], finished: dict[str, str]) -> None:
        """Drop the pending tasks whose data step failed: they cannot run."""
        for task in list(pending):  # a job whose data step failed cannot run
            failed = [n for n in task.needs if finished.get(n) in ("failed", "interrupted")]
            if failed:
                pending.remove(task)
                for key in task.jobs:
                    status[key] = "blocked"
                self.say(f"blocked {task.key}: its data step {', '.join(failed)} did not finish")

    def expected_now(self, task: _Task, jobs: int) -> float | None:
        """What is left of ``task``'s expected time with ``jobs`` jobs sharing the GPU, itself
        included (:func:`repens.pipeline.expect.scaled_seconds`); None: unknown."""
        return None if task.expected is None else scaled_seconds(task.expected, task.shared_with, jobs)

    def sharing(self, task: _Task, running: list, ready: list) -> int:
        """How many jobs would share the GPU with ``task`` started now, itself included: the
        jobs running and those ready to start after it, up to ``parallel``."""
        others = [t for t in running if t.kind == "job"] + [t for t in ready if t.kind == "job" and t is not task]
        return min(self.parallel, len(others) + 1)

    def fits(self, task: _Task, left: float | None, jobs: int = 1) -> bool:
        """Whether ``task`` may start with ``left`` seconds to the deadline: ``expect_margin``
        times what is left of its expected time (``expected_s``, written by
        :func:`export_jobs`, less the part its log says is done, scaled to ``jobs`` sharing the
        GPU: :meth:`expected_now`) fits, or, none known, more than ``min_run`` is left;
        ``then`` seconds of a next call on the same machine count as left (a job stopped at
        the deadline checkpoints and resumes there). The first pending task in order that
        fits starts."""
        if left is None:
            return True
        left += self.then
        expected = self.expected_now(task, jobs)
        if expected is None:
            return left > self.min_run
        return expected * self.expect_margin <= left

    def start_ready(self, pending: list, running: list, finished: dict[str, str], left: float | None) -> None:
        """Start the pending tasks whose data steps are done and that fit before the deadline
        (:meth:`fits`, with the jobs that would share the GPU: :meth:`sharing`; the first in
        order that does), up to ``parallel`` running."""
        while self.stop_reason is None and len(running) < self.parallel:
            ready_all = [t for t in pending if all(finished.get(n) == "done" for n in t.needs)]
            ready = next((t for t in ready_all if self.fits(t, left, self.sharing(t, running, ready_all))), None)
            for task in ready_all[: ready_all.index(ready) if ready is not None else len(ready_all)]:
                self.hold_back(task, left, self.sharing(task, running, ready_all))
            if ready is None:
                break
            pending.remove(ready)
            self.start(ready)
            running.append(ready)

    def nothing_to_wait_for(self, pending: list, running: list, finished: dict[str, str], left: float | None) -> bool:
        """Whether :meth:`run` is over: stopped and nothing running, or nothing can start."""
        if self.stop_reason is not None and not running:
            return True
        if not running and pending and not any(all(finished.get(n) == "done" for n in t.needs) for t in pending):
            return True  # nothing can start (their data steps are still missing)
        ready = [t for t in pending if all(finished.get(n) == "done" for n in t.needs)]
        fitting = any(self.fits(t, left, self.sharing(t, [], ready)) for t in ready)
        if self.stop_reason is None and not running and not fitting:
            return True  # none of what is left fits before the deadline (as start_ready judges it)
        return False

    def hold_back(self, task: _Task, left: float | None, jobs: int = 1) -> None:
        """Say once that ``task`` is not started: it would not finish before the deadline."""
        expected = self.expected_now(task, jobs)
        if task.key in self.held_back or expected is None or left is None:
            return
        self.held_back.add(task.key)
        scaled = "" if task.shared_with is None else f" with {jobs} job(s) at a time"
        self.say(
            f"not started {task.key}: expected {expected:.0f} s{scaled} (x {self.expect_margin:g}), "
            f"{left:.0f} s to the deadline" + (f" and {self.then:.0f} s of a next call" if self.then else "")
        )
        self.event(task.key, "held back", expected=round(expected, 1), left=round(left, 1), jobs=jobs)

    def summary(self) -> int:
        jobs = [j for j in self.data["jobs"] if not self.only or any(fnmatch.fnmatch(j["id"], g) for g in self.only)]
        status = {j["id"]: job_status(j, self.state["jobs"].get(j["id"]), self.directory) for j in jobs}
        counts = {
            s: sum(1 for v in status.values() if v == s) for s in ("done", "present", "interrupted", "todo", "failed")
        }
        self.say(
            "jobs: "
            + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
            + (
                "; run again to go on (interrupted jobs resume from their checkpoints)"
                if counts["interrupted"] or counts["todo"]
                else ""
            )
        )
        for job_id, s in status.items():
            if s == "failed":
                record = self.state["jobs"][job_id]
                self.say(
                    f"failed {job_id} (exit {record['attempts'][-1]['returncode']}; see its log); "
                    "--retry-failed runs it again"
                )
        if counts["failed"]:
            return 1
        if self.prepare_only:
            return 0
        return 75 if counts["interrupted"] or counts["todo"] else 0  # 75: EX_TEMPFAIL, run again


def _check_deadline(deadline: float | None, min_run: float, prepare_only: bool) -> None:
    """A :class:`KitError` when ``deadline`` leaves no job time to start (not above ``min_run``)."""
    if deadline is not None and not prepare_only and deadline <= min_run:
        raise KitError(
            f"--deadline {deadline:g} s is not above --min-run {min_run:g} s: no job could start; "
            "lower --min-run or raise --deadline"
        )


def run_jobs(
    jobs_file: Path | str,
    *,
    parallel: int = 1,
    deadline: float | None = None,
    grace: float = 60.0,
    device: str | None = None,
    raw: Path | str = "data/raw",
    directory: Path | str = ".",
    state: Path | str | None = None,
    retry_failed: bool = False,
    prepare_only: bool = False,
    min_run: float = 0.0,
    only: Sequence[str] = (),
    out: Any = None,
    launcher: Sequence[str] | None = None,
    stack_seeds: bool = False,
    expect_margin: float = EXPECT_MARGIN,
    then: float = 0.0,
    side_by_side: int = 1,
) -> int:
    """Run the jobs of ``jobs_file`` (:func:`export_jobs`) in ``directory``, ``parallel`` at a
    time, as ``python -m repens`` subprocesses; prepare their missing inputs first (image
    data from the archives under ``raw``, offline). At ``deadline`` seconds (or on SIGTERM
    or SIGINT to this process) every running job gets SIGTERM, checkpoints and exits; after
    ``grace`` seconds more it is killed. A job starts only where it should finish by then
    (:meth:`_Runner.fits`: ``expect_margin`` times its expected time left, else ``min_run``),
    or, where ``then`` seconds of a next call follow on the same machine, by then.
    A finished job is skipped on the next call; an interrupted one resumes (before the
    others); a failed one runs again only with ``retry_failed``. What was run, how long and
    how it ended is kept in ``state`` (default ``results/run-jobs.json``). ``launcher``: the
    command a task's arguments follow (default ``python -m repens``, this interpreter).

    ``stack_seeds``: the image ``train`` jobs that differ only in their seed run as one
    ``python -m repens train-stack`` per group, each seed still a job of its own
    (:meth:`_Runner._stack`); ``side_by_side`` K > 1: up to K image training tasks in one
    process, a thread and a CUDA stream each (:meth:`_Runner._side_by_side`).

    Returns 0 when every job is finished, 75 when some remain (call again), 1 when a job
    failed; a ``deadline`` not above ``min_run`` is refused first (:func:`_check_deadline`)."""
    return _Runner(
        jobs_file,
        parallel=parallel,
        deadline=deadline,
        grace=grace,
        device=device,
        raw=raw,
        directory=directory,
        state=state,
        retry_failed=retry_failed,
        prepare_only=prepare_only,
        min_run=min_run,
        only=only,
        out=out or sys.stdout,
        launcher=launcher,
        stack_seeds=stack_seeds,
        expect_margin=expect_margin,
        then=then,
        side_by_side=side_by_side,
    ).run()


# -- pack (GPU node; standard library only) -------------------------------------------------


class _SplitWriter(io.RawIOBase):
    """A write-only stream cut into files ``<prefix>.NN`` of at most ``size`` bytes."""

    def __init__(self, prefix: Path, size: int) -> None:
        super().__init__()
        self.prefix, self.size = prefix, int(size)
        self.paths: list[Path] = []
        self.handle: Any = None
        self.used = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        view = memoryview(data)
        while view:
            if self.handle is None or self.used >= self.size:
                if self.handle is not None:
                    self.handle.close()
                path = Path(f"{self.prefix}.{len(self.paths):02d}")
                self.paths.append(path)
                self.handle = open(path, "wb")
                self.used = 0
            n = min(len(view), self.size - self.used)
            self.handle.write(view[:n])
            self.used += n
            view = view[n:]
        return len(data)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        super().close()


def _result_files(job: dict[str, Any], directory: Path) -> list[str]:
    """A finished job's files: its outputs, benchmark and log, and whatever else it left
    beside its outputs (an L2 search's result, UCI's split files), checkpoints excepted."""
    files = list(job["outputs"])
    for extra in (job.get("benchmark"), job.get("log")):
        if extra and (directory / extra).is_file():
            files.append(extra)
    for folder in dict.fromkeys(str(Path(p).parent) for p in job["outputs"]):
        base = directory / folder
        for path in sorted(base.iterdir()) if base.is_dir() else []:
            rel = str(Path(folder) / path.name)
            if (
                path.is_file()
                and rel not in files
                and not any(m in path.name for m in _NOT_RESULTS)
                and not path.name.startswith(".")
            ):
                files.append(rel)
    return files


def _resume_files(job: dict[str, Any], directory: Path) -> list[str]:
    """What an unfinished job resumes from: its checkpoints (and an L2 search's result)."""
    files = []
    for folder in dict.fromkeys(str(Path(p).parent) for p in job["outputs"]):
        base = directory / folder
        for path in sorted(base.iterdir()) if base.is_dir() else []:
            if path.is_file() and (
                ".ckpt" in path.name and not path.name.endswith(".tmp") or path.name == "l2_search.json"
            ):
                files.append(str(Path(folder) / path.name))
    return files


def pack(
    jobs_file: Path | str,
    out: Path | str,
    *,
    directory: Path | str = ".",
    state: Path | str | None = None,
    max_files: int = 8,
    max_bytes: int = 16 * MIB,
    checkpoints: bool = False,
    only_new: bool = False,
    stream: Any = None,
) -> list[Path]:
    """Pack the finished jobs of ``jobs_file`` into ``<out>.tar.gz`` (or, if it is larger than
    ``max_bytes``, parts ``<out>.tar.gz.00``, ``.01``, ... of ``max_bytes`` each, at most
    ``max_files``): per job its results, benchmark.tsv and log, and the logs of unfinished
    jobs (``checkpoints``: also their checkpoints, to resume elsewhere), with a manifest.
    Jobs that would not fit (counted at their uncompressed size) are left for a later pack;
    ``only_new`` leaves out jobs an earlier pack took. Returns the files written."""
    stream = stream or sys.stdout
    data = _load_jobs(jobs_file)
    directory = Path(directory)
    state_path = Path(state) if state else directory / DEFAULT_STATE
    book = _load_state(state_path)
    out = Path(str(out).removesuffix(".tar.gz"))
    # room for the manifest (a few KiB a job) and the tar and gzip framing
    limit = int(max_files) * int(max_bytes) - 64 * 1024 - 4096 * len(data["jobs"])
    chosen, left = _choose_for_pack(data, book, directory, limit, checkpoints=checkpoints, only_new=only_new)
    manifest = _pack_manifest(data, book, jobs_file, chosen, left, directory)
    paths = _write_pack(out, manifest, chosen, directory, max_bytes)
    if len(paths) > max_files:  # cannot happen: jobs were counted at their uncompressed size
        raise KitError(f"the pack needs {len(paths)} files, more than --max-files {max_files}")
    done_ids = [job["id"] for job, status, _ in chosen if status in ("done", "present")]
    book["packs"].append({"at": _now(), "out": str(out), "files": [p.name for p in paths], "jobs": done_ids})
    write_json(state_path, book)
    size = sum(p.stat().st_size for p in paths)
    print(
        f"packed {len(done_ids)} finished job(s) ({sum(len(f) for _, _, f in chosen)} files) into "
        f"{len(paths)} file(s), {size / MIB:.1f} MiB: {', '.join(str(p) for p in paths)}",
        file=stream,
    )
    if left:
        print(
            f"left for a later pack (no room): {len(left)} job(s): {', '.join(left)}; "
            "`pack --only-new` packs them next",
            file=stream,
        )
    return paths


def _choose_for_pack(
    data: dict[str, Any], book: dict[str, Any], directory: Path, limit: int, *, checkpoints: bool, only_new: bool
) -> tuple[list[tuple[dict[str, Any], str, list[str]]], list[str]]:
    """:func:`pack`'s choice: (job, status, files) of the jobs that fit in ``limit`` bytes
    (then the logs of the data steps), and the ids of those left for a later pack."""
    packed_before = {job_id for p in book["packs"] for job_id in p.get("jobs", [])}
    chosen, left, used = [], [], 0
    for job in data["jobs"]:
        status = job_status(job, book["jobs"].get(job["id"]), directory)
        finished = status in ("done", "present")
        if only_new and finished and job["id"] in packed_before:
            continue
        files = (
            _result_files(job, directory)
            if finished
            else [f for f in [job.get("log")] if f and (directory / f).is_file()]
        )
        if not finished and checkpoints:
            files += _resume_files(job, directory)
        if not files:
            continue
        size = sum((directory / f).stat().st_size + 1536 for f in files)
        if used + size > limit:
            left.append(job["id"])
            continue
        used += size
        chosen.append((job, status, files))
    for step in data.get("prepare", []):
        if step.get("log") and (directory / step["log"]).is_file():
            chosen.append(({"id": step["outputs"][0], "kind": "prepare"}, "log", [step["log"]]))
    return chosen, left


def _pack_manifest(
    data: dict[str, Any],
    book: dict[str, Any],
    jobs_file: Path | str,
    chosen: list,
    left: list[str],
    directory: Path = Path("."),
) -> dict[str, Any]:
    """The manifest.json of a pack of ``chosen`` (each job's files with their SHA-256)."""
    return {
        "kit": KIT_FORMAT,
        "created": _now(),
        "host": platform.node(),
        "jobs_file": str(jobs_file),
        "snakemake": data.get("snakemake", {}),
        "jobs": [
            {
                **{k: job.get(k) for k in ("id", "rule", "wildcards", "spec", "outputs", "inputs", "benchmark", "log")},
                "status": status,
                "files": files,
                "sha256": {rel: _file_digest(directory / rel, "sha256") for rel in files},
                "attempts": book["jobs"].get(job["id"], {}).get("attempts", []),
            }
            for job, status, files in chosen
            if job.get("kind") != "prepare"
        ],
        "logs": [f for job, status, files in chosen if job.get("kind") == "prepare" for f in files],
        "calls": book["calls"],
        "left": left,
    }


def _write_pack(out: Path, manifest: dict[str, Any], chosen: list, directory: Path, max_bytes: int) -> list[Path]:
    """Write the manifest and the files of ``chosen`` to ``<out>.tar.gz`` (or its parts);
    the files written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for old in out.parent.glob(out.name + ".tar.gz*"):
        old.unlink()
    writer = _SplitWriter(Path(str(out) + ".tar.gz"), max_bytes)
    with tarfile.open(fileobj=writer, mode="w|gz") as tar:
        blob = json.dumps(manifest, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size, info.mtime, info.mode = len(blob), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(blob))
        for _, _, files in chosen:
            for rel in files:
                path = directory / rel
                info = tarfile.TarInfo(Path(rel).as_posix())
                st = path.stat()
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
    writer.close()
    paths = writer.paths
    if len(paths) == 1:
        single = Path(str(out) + ".tar.gz")
        os.replace(paths[0], single)
        paths = [single]
    return paths


# -- import (login machine) -----------------------------------------------------------------


class _ChainReader(io.RawIOBase):
    """The parts of a pack read as one stream."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self.paths = list(paths)
        self.handle: Any = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        while True:
            if self.handle is None:
                if not self.paths:
                    return 0
                self.handle = open(self.paths.pop(0), "rb")
            n = self.handle.readinto(buffer)
            if n:
                return n
            self.handle.close()
            self.handle = None

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        super().close()


def _order_parts(parts: Sequence[Path | str]) -> list[Path]:
    paths = [Path(p) for p in parts]
    for p in paths:
        if not p.is_file():
            raise KitError(f"{p}: no such pack file")
    numbered = [p for p in paths if re.search(r"\.tar\.gz\.\d+$", p.name)]
    if numbered and len(numbered) != len(paths):
        raise KitError("mixed pack files: give either one .tar.gz or all its parts (.tar.gz.00, .01, ...)")
    if numbered:
        paths = sorted(paths, key=lambda p: (str(p.parent), p.name.rsplit(".", 1)[0], int(p.name.rsplit(".", 1)[1])))
        numbers = [int(p.name.rsplit(".", 1)[1]) for p in paths]
        if numbers != list(range(len(paths))) or len({p.name.rsplit(".", 1)[0] for p in paths}) != 1:
            raise KitError(f"pack parts {', '.join(p.name for p in paths)}: not one complete series .00, .01, ...")
    elif len(paths) != 1:
        raise KitError("give one .tar.gz, or the parts of one pack")
    return paths


def _safe_name(name: str) -> str:
    path = Path(name)
    if path.is_absolute() or ".." in path.parts or not path.parts or name.startswith(("/", "\\")):
        raise KitError(f"pack member {name!r}: not a relative path inside the working directory")
    return path.as_posix()


#: what one call of a short lease sends back: at most this many pack files of this size
#: (a device call returns at most 8 files of 16 MiB; the logs and the printed log take two)
LEASE_PACK_FILES, LEASE_PACK_MIB = 4, 15


def lease(
    jobs_file: Path | str,
    out_dir: Path | str,
    *,
    until: float,
    only: Sequence[str] = (),
    parallel: int = 6,
    min_run: float = 170.0,
    grace: float = 20.0,
    pack_reserve: float = 30.0,
    device: str | None = "cuda",
    raw: Path | str = "data/raw",
    directory: Path | str = ".",
    stack_seeds: bool = False,
    launcher: Sequence[str] | None = None,
    stream: Any = None,
    expect_margin: float = EXPECT_MARGIN,
    then: float = 0.0,
    side_by_side: int = 1,
) -> int:
    """One call of a short device lease, over by ``until`` seconds after it starts: the jobs
    of ``jobs_file`` matching ``only`` run (:func:`run_jobs`) until a deadline that leaves
    ``grace`` seconds for the last checkpoints and ``pack_reserve`` to pack, and no job starts
    that could not finish (:meth:`_Runner.fits`; ``then``: seconds of a next call on the same
    machine). Then every finished job is packed into ``out_dir/results.tar.gz*`` (:func:`pack`, at most
    :data:`LEASE_PACK_FILES` files of :data:`LEASE_PACK_MIB` MiB), the logs and the run's state
    into ``out_dir/logs.tar.gz``. Returns :func:`run_jobs`' code (0: all done; 75: work
    remains; 1: a job failed); a ``until`` too short for any job is a :class:`KitError`."""
    stream = stream or sys.stdout
    directory, out_dir = Path(directory), Path(out_dir)
    deadline = _lease_deadline(until, grace, pack_reserve, min_run)
    rc = run_jobs(
        jobs_file,
        parallel=parallel,
        deadline=deadline,
        grace=grace,
        device=device,
        raw=raw,
        directory=directory,
        min_run=min_run,
        only=only,
        out=stream,
        launcher=launcher,
        stack_seeds=stack_seeds,
        expect_margin=expect_margin,
        then=then,
        side_by_side=side_by_side,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    pack(
        jobs_file,
        out_dir / "results",
        directory=directory,
        max_files=LEASE_PACK_FILES,
        max_bytes=LEASE_PACK_MIB * MIB,
        stream=stream,
    )
    _tar_logs(directory, out_dir / "logs.tar.gz")
    print(f"lease: run-jobs exit {rc}; packed into {out_dir}", file=stream, flush=True)
    return rc


def _lease_deadline(until: float, grace: float, pack_reserve: float, min_run: float) -> float:
    """The jobs' deadline of a lease: ``until`` less the time to checkpoint and to pack; a
    :class:`KitError` when no job could start before it."""
    deadline = float(until) - float(grace) - float(pack_reserve)
    if deadline <= min_run:
        raise KitError(
            f"--until {until:g} s leaves {deadline:g} s to run jobs (after --grace {grace:g} and --pack-reserve "
            f"{pack_reserve:g}), not above --min-run {min_run:g} s: no job could start"
        )
    return deadline


def _tar_logs(directory: Path, out: Path) -> None:
    """``directory``'s ``logs/`` and the run's state, for a look at what happened there."""
    with tarfile.open(out, "w:gz") as tar:
        for rel in ("logs", DEFAULT_STATE):
            if (directory / rel).exists():
                tar.add(directory / rel, arcname=rel)


def read_pack(parts: Sequence[Path | str], into: Path) -> dict[str, Any]:
    """Unpack the parts of a pack into the folder ``into``; its manifest."""
    manifest = None
    with _ChainReader(_order_parts(parts)) as reader:
        try:
            with tarfile.open(fileobj=io.BufferedReader(reader), mode="r|gz") as tar:
                for member in tar:
                    name = _safe_name(member.name)
                    if not member.isfile():
                        continue
                    handle = tar.extractfile(member)
                    if name == "manifest.json":
                        manifest = json.loads(handle.read())
                        continue
                    dest = into / name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with open(dest, "wb") as fh:
                        shutil.copyfileobj(handle, fh)
                    os.utime(dest, (member.mtime, member.mtime))
        except (tarfile.TarError, EOFError, OSError) as err:
            raise KitError(f"the pack is incomplete or corrupt ({err}); give all its parts") from None
    if not isinstance(manifest, dict) or manifest.get("kit") != KIT_FORMAT:
        raise KitError("not a pack of this kit (no manifest.json)")
    return manifest


def import_results(
    parts: Sequence[Path | str],
    *,
    directory: Path | str = ".",
    snakefile: Path | str | None = None,
    config: Sequence[str] | None = None,
    configfile: str | None = None,
    verify: bool = True,
    prepare: bool = True,
    metadata: bool = True,
    cores: int = 1,
    stream: Any = None,
) -> dict[str, Any]:
    """Put a pack's finished jobs in place in ``directory`` so Snakemake takes them as built.

    0. The pack is data (:func:`_check_members`, :func:`_config_words`): else nothing
       is moved and Snakemake never runs; only the finished jobs' files are written.
    1. ``verify``: each job's spec must be what Snakemake would pass now (a dry run under
       ``config`` / ``configfile``, by default those of the export), else nothing is
       imported: results of another config would otherwise pass for this one's.
    2. ``prepare``: the jobs' inputs missing here (the image data) are made by Snakemake.
    3. The files are moved into place, dated after every input (an input newer than an
       output reruns the job).
    4. ``metadata``: Snakemake's records of the outputs are dropped (``--cleanup-metadata``:
       a record of an older run with other params, or an incomplete mark) and written anew
       for these jobs (``--touch --force``), so a later change of their params reruns them.

    Returns what was imported (``jobs``, ``files``) and the Snakemake config used."""
    stream = stream or sys.stdout
    directory = Path(directory)
    staging = directory / f".repens-import-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        manifest = read_pack(parts, staging)
        exported = manifest.get("snakemake") or {}
        config = _config_words(exported.get("config") or []) if config is None else list(config)
        configfile = configfile if configfile is not None else _configfile(exported.get("configfile"))
        where = dict(directory=directory, snakefile=snakefile, config=config, configfile=configfile)
        finished = _check_members(staging, manifest)
        if verify and finished:
            _verify_pack(finished, exported, where)
        inputs = _prepare_inputs(finished, directory, where, prepare=prepare, cores=cores, stream=stream)
        moved = _move_into_place(staging, directory, manifest, finished, inputs)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if metadata and finished:
        _record_metadata(finished, [p for job in finished for p in job["outputs"]], where, cores=cores)
    print(
        f"imported {len(finished)} finished job(s), {len(moved)} file(s), into {directory}"
        + ("; Snakemake takes them as built" if metadata else ""),
        file=stream,
    )
    if manifest.get("left"):
        print(
            f"the node had more finished jobs than the pack held: {len(manifest['left'])}; pack them with "
            "`pack --only-new`",
            file=stream,
        )
    return {"jobs": [job["id"] for job in finished], "files": moved, "config": config, "configfile": configfile}


#: the folders of the working directory a pack may write into
PACK_FOLDERS = ("results/", "logs/")
#: a word of the manifest's Snakemake config: ``key=value``, never an option
_CONFIG_WORD = re.compile(r"^[A-Za-z_][\w.]*=")


def _config_words(words: Any) -> list[str]:
    """The manifest's Snakemake config, each word checked to be ``key=value`` data (a word
    that Snakemake would read as an option is refused, naming it)."""
    if not isinstance(words, list):
        raise KitError("pack manifest: snakemake.config is not a list of key=value words; nothing was imported")
    for word in words:
        if not isinstance(word, str) or not _CONFIG_WORD.match(word):
            raise KitError(f"pack manifest: snakemake.config word {word!r} is not key=value; nothing was imported")
    return list(words)


def _configfile(path: Any) -> str | None:
    """The manifest's ``--configfile``: a relative path of a file, never an option."""
    if path is None:
        return None
    if (
        not isinstance(path, str)
        or not path
        or path.startswith("-")
        or Path(path).is_absolute()
        or ".." in Path(path).parts
    ):
        raise KitError(f"pack manifest: snakemake.configfile {path!r} is not a relative path; nothing was imported")
    return path


def _pack_path(path: Any, what: str, folders: Sequence[str] = PACK_FOLDERS) -> str:
    """``path`` from a manifest: relative, inside the working directory, under ``folders``
    (empty: anywhere), not an option; else a :class:`KitError` naming it."""
    if not isinstance(path, str) or path.startswith("-"):
        raise KitError(f"pack manifest: {what} {path!r} is not a path; nothing was imported")
    name = _safe_name(path)
    if folders and not name.startswith(tuple(folders)):
        raise KitError(
            f"pack manifest: {what} {path!r} is not under {' or '.join(folders)}: a pack adds results and logs "
            "only; nothing was imported"
        )
    return name


def _check_manifest(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The finished jobs of ``manifest``, every path it names checked (:func:`_pack_path`):
    outputs, files, benchmark and log under results/ or logs/, each output and its SHA-256
    listed among the job's files."""
    jobs = manifest.get("jobs")
    if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
        raise KitError("pack manifest: 'jobs' is not a list of jobs; nothing was imported")
    for rel in manifest.get("logs") or []:
        _pack_path(rel, "log", ("logs/",))
    finished = [job for job in jobs if job.get("status") in ("done", "present")]
    for job in finished:
        job_id = job.get("id")
        files, hashes = job.get("files"), job.get("sha256")
        if not isinstance(files, list) or not isinstance(hashes, dict):
            raise KitError(
                f"pack manifest: job {job_id!r} lists no files with their SHA-256 (a pack of an older kit? pack it "
                "again); nothing was imported"
            )
        outputs = job.get("outputs") or []
        if not isinstance(outputs, list) or not outputs:
            raise KitError(f"pack manifest: job {job_id!r} lists no outputs; nothing was imported")
        for rel in [*files, *outputs]:
            _pack_path(rel, f"file of job {job_id!r}")
        for rel in job.get("inputs") or []:
            _pack_path(rel, f"input of job {job_id!r}", ())
        missing = [rel for rel in [*outputs, *files] if rel not in files or rel not in hashes]
        if missing:
            raise KitError(
                f"pack manifest: job {job_id!r} does not list {missing[0]} with its SHA-256; nothing was imported"
            )
    return finished


def _check_members(staging: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The finished jobs of the pack unpacked in ``staging`` once every path of its
    manifest is checked (:func:`_check_manifest`), every unpacked member is a file the
    manifest lists (a finished job's, with its SHA-256, or a log) and each finished job's
    results are its spec's (:func:`repens.core.results.check_result`); else a
    :class:`KitError` naming the member. A pack is data: the finished jobs' files under
    ``results/`` and ``logs/`` are all it may write."""
    finished = _check_manifest(manifest)
    listed = {rel for job in manifest["jobs"] for rel in job.get("files") or []} | set(manifest.get("logs") or [])
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        rel = path.relative_to(staging).as_posix()
        if rel not in listed:
            raise KitError(f"pack member {rel!r}: not a file its manifest lists; nothing was imported")
    for job in finished:
        for rel in job["files"]:
            if not (staging / rel).is_file():
                raise KitError(
                    f"pack member {rel!r} of job {job['id']!r}: listed but not in the pack; nothing was imported"
                )
            if _file_digest(staging / rel, "sha256") != job["sha256"][rel]:
                raise KitError(f"pack member {rel!r}: its SHA-256 is not the manifest's; nothing was imported")
        _check_results(staging, job)
    return finished


def _check_results(staging: Path, job: dict[str, Any]) -> None:
    """:func:`repens.core.results.check_result` of each of ``job``'s outputs that is a
    result file, against the job's spec."""
    from repens.core.errors import DataFileError
    from repens.core.results import RESULT_FILES, check_result

    try:
        spec = json.loads(job.get("spec") or "")
    except (TypeError, ValueError):
        raise KitError(f"pack manifest: job {job['id']!r} has no JSON spec; nothing was imported") from None
    for rel in job["outputs"]:
        if Path(rel).name in RESULT_FILES:
            try:
                check_result(staging / rel, spec)
            except DataFileError as err:
                raise KitError(f"pack member {rel!r}: {err.problem}; nothing was imported") from None


def _verify_pack(finished: list[dict[str, Any]], exported: dict[str, Any], where: dict[str, Any]) -> None:
    """:func:`import_results`' check that each job's spec is what Snakemake would pass now."""
    planned = {}
    for block in _dry_run([job["outputs"][0] for job in finished], ["--force"], **where):
        argv = repens_argv(block.get("shellcmd", ""))
        if argv is not None and block.get("output"):
            planned[_files(block["output"])[0]] = _option(argv, "--spec")
    wrong = [job["id"] for job in finished if planned.get(job["outputs"][0]) != job["spec"]]
    if wrong:
        raise KitError(
            f"{len(wrong)} job(s) of the pack are not what Snakemake would run here now (another config or "
            f"code?): {', '.join(wrong[:5])}{' ...' if len(wrong) > 5 else ''}; the export used --config "
            f"{' '.join(exported.get('config') or []) or '(none)'}; nothing was imported"
        )


def _prepare_inputs(
    finished: list[dict[str, Any]], directory: Path, where: dict[str, Any], *, prepare: bool, cores: int, stream: Any
) -> list[str]:
    """:func:`import_results`' inputs of the ``finished`` jobs, the missing ones made by
    Snakemake (``prepare``); raises if some are still missing."""
    inputs = sorted({p for job in finished for p in job.get("inputs") or []})
    missing = [p for p in inputs if not (directory / p).exists()]
    if missing and prepare:
        print(f"preparing {len(missing)} input(s) with Snakemake: {', '.join(missing)}", file=stream, flush=True)
        _snakemake([f"-c{cores}", *missing], "preparing the inputs", **where)
        missing = [p for p in missing if not (directory / p).exists()]
    if missing:
        raise KitError(
            f"inputs missing here: {', '.join(missing)}; make them first (snakemake -c1 "
            f"{' '.join(missing)}), then import again; nothing was imported"
        )
    return inputs


def _move_into_place(
    staging: Path, directory: Path, manifest: dict[str, Any], finished: list[dict[str, Any]], inputs: list[str]
) -> list[str]:
    """:func:`import_results`' move of the unpacked files into ``directory``, the results
    dated after every input; the files moved."""
    newest = max([(directory / p).stat().st_mtime for p in inputs] + [0.0])
    stamp = max(time.time(), newest + 1.0)
    moved, finished_files = [], set()
    for job in finished:
        finished_files.update(job["files"])
    node_logs = set(manifest.get("logs") or [])  # the node's data steps: a log here is this machine's
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        rel = path.relative_to(staging).as_posix()
        dest = directory / rel
        if rel not in finished_files and (rel not in node_logs or dest.exists()):
            continue  # an unfinished job's log or checkpoint, or a log this machine has
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)
        if rel in finished_files:
            os.utime(dest, (stamp, stamp))
        moved.append(rel)
    return moved


def _record_metadata(finished: list[dict[str, Any]], outputs: list[str], where: dict[str, Any], *, cores: int) -> None:
    """:func:`import_results`' Snakemake metadata of the imported outputs: old records
    dropped, new ones written."""
    # (Snakemake cleans what it has and then fails naming the files it had no record of)
    _snakemake(
        ["--cleanup-metadata", *outputs],
        "dropping old metadata",
        ok="because the metadata was not present",
        **where,
    )
    _snakemake(
        [f"-c{cores}", "--touch", "--force", *[job["outputs"][0] for job in finished]],
        "recording metadata",
        **where,
    )


def describe_export(data: dict[str, Any]) -> str:
    """What export-jobs prints: counts, data steps, what must travel with the tree."""
    rules: dict[str, int] = {}
    for job in data["jobs"]:
        rules[job["rule"]] = rules.get(job["rule"], 0) + 1
    lines = [f"{len(data['jobs'])} job(s): " + (", ".join(f"{n} {r}" for r, n in rules.items()) or "none")]
    if data["prepare"]:
        lines.append(
            f"{len(data['prepare'])} data step(s): "
            + ", ".join(f"{s['command']} {s.get('dataset') or ''}".strip() for s in data["prepare"])
        )
    archives = [a for s in data["prepare"] for a in s.get("archives", [])]
    if archives:
        lines.append(
            "the node prepares image data from the original archives in data/raw (a torchvision root, "
            "ignored by git; carry it): " + ", ".join(a["path"] for a in archives)
        )
    if data.get("staged"):
        size = sum(Path(p).stat().st_size for p in data["staged"] if Path(p).is_file())
        lines.append(f"staged {len(data['staged'])} archive(s), {size / MIB:.1f} MiB")
        if size > 64 * MIB:
            lines.append(
                "warning: more than the 64 MiB that travel with the tree to a GPU node; export fewer data "
                "sets, e.g. --include 'results/image/fashionmnist/*'"
            )
    left_out = (data.get("reference") or {}).get("held_left_out") or []
    if left_out:
        lines.append(f"left out {len(left_out)} job(s) whose results {data['reference']['path']} holds")
    times = [j["expected_s"] for j in data["jobs"] if j.get("expected_s") is not None]
    shared = [j["expected_jobs"] for j in data["jobs"] if j.get("expected_jobs") is not None]
    if data["jobs"]:
        lines.append(
            f"expected times (GPU runs of the same method in the reference tree) for {len(times)} of "
            f"{len(data['jobs'])} job(s)"
            + (f": {min(times):.0f}-{max(times):.0f} s" if times else "")
            + (f", among {min(shared):.1f}-{max(shared):.1f} jobs at a time (scaled to the jobs run)" if shared else "")
        )
    if data.get("ship"):
        lines.append("inputs no step makes (send them with the tree): " + ", ".join(data["ship"]))
    if data.get("left_to_snakemake"):
        lines.append(
            "left to Snakemake here after import: "
            + ", ".join(f"{n} {r}" for r, n in data["left_to_snakemake"].items())
        )
    return "\n".join(lines)
