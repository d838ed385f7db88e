"""Every command in README.md and docs/*.md runs as written.

The shell commands of the fenced code blocks (```bash, ```sh, ```shell, ```console and
untagged blocks whose lines start with a known command) are extracted: ``\\`` continuations
joined, ``&&`` / ``||`` / ``;`` / ``|`` chains split, comments stripped. Each is checked
in a throwaway copy of the repository (the tracked files of the working tree), in the
order the page gives them:

- ``snakemake ...``: dry-run as written (``--dry-run`` added, every other word kept:
  ``--profile slurm``, ``--config ...``), with no SLURM client on PATH; it must plan.
  All of them share one Python process (Snakemake imported once, a fork per command):
  each Snakemake start costs seconds.
- ``python -m repens ...`` / ``repens ...`` / ``python <script>.py ...``: the command line
  is parsed by the program's own argparse parser (subcommand, options, choices, required
  arguments), which is stopped before it runs anything.
- ``pip install``, ``python3 -m venv``, ``. .venv/bin/activate``, ``pytest``, ``bash``,
  ``cd``, ``git``: not run; what is cheap is checked (extras and packages named exist in
  pyproject.toml, ``pytest -m`` markers are declared, files named exist, the activated
  venv is one the docs create).
- ``printf``/``echo`` into a file and ``mkdir``: run in the copy (later commands of the
  page read what they write).
- Placeholders: a word like ``<target>`` or ``N`` makes a command a template (skipped, the
  reason recorded); a folder ``/path/to/<name>`` is replaced by an empty folder.

A command no rule here knows fails the test: add a check for it. The checker is tested on
a synthetic page with broken commands (test_checker_*).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

SHELL_LANGUAGES = {"bash", "sh", "shell", "zsh", "console", "shell-session", "terminal"}
# first words that make an untagged block a shell block
COMMAND_WORDS = {
    "snakemake",
    "python",
    "python3",
    "pip",
    "pip3",
    "pytest",
    "repens",
    "bash",
    "sh",
    "cd",
    "git",
    ".",
    "source",
    "export",
    "printf",
    "echo",
    "mkdir",
    "$",
}
SLURM_CLIENTS = (
    "sacct sacctmgr salloc sattach sbatch sbcast scancel scontrol scrontab sdiag seff sinfo "
    "sprio squeue sreport srun sshare sstat strigger sview"
).split()
# a template's word: <name> (read as ‹name›, so that the shell does not take it for a
# redirection), or N, K, ... alone or as an option's value
ANGLE = re.compile(r"<([A-Za-z][\w.-]*)>")
PLACEHOLDER = re.compile(r"‹[^›]*›|^(N|K|M|X|\.\.\.|…)$|[=:]N$|^-[a-zA-Z]N$")
PATH_PLACEHOLDER = re.compile(r"/path/to/[\w.-]+")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTEST_BUILTIN_MARKERS = {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings"}

# Commands of the docs known not to work as written: (page, start of the command) -> why.
# Each is an expected failure, strict: once the page is fixed, the entry must go.
KNOWN_BROKEN: dict[tuple[str, str], str] = {}


def known_broken(cmd: Command) -> str | None:
    page = cmd.source.split(":")[0]
    return next(
        (why for (where, start), why in KNOWN_BROKEN.items() if where == page and cmd.text.startswith(start)), None
    )


# --------------------------------------------------------------------------- extraction


@dataclass
class Command:
    source: str  # "docs/gpu.md:80"
    words: list[str]  # the command's words, env assignments and redirection removed
    env: dict[str, str] = field(default_factory=dict)
    redirect: str | None = None  # a file the command's output is written to (> or >>)

    @property
    def text(self) -> str:
        """The command as the page has it (quoting normalised, comments dropped)."""
        env = [f"{name}={shlex.quote(value)}" for name, value in self.env.items()]
        out = [">", shlex.quote(self.redirect)] if self.redirect is not None else []
        return " ".join([*env, shlex.join(self.words), *out]).strip()


def _fences(markdown: str):
    """(language, first body line number, body lines) of each fenced code block."""
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^([ \t]*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, language = len(m[1]), m[2], m[3].lower()
        body, start = [], i + 2
        i += 1
        while i < len(lines) and not re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        i += 1
        yield language, start, body


def _looks_like_shell(body: list[str]) -> bool:
    lines = [line.strip() for line in body if line.strip() and not line.strip().startswith("#")]
    return bool(lines) and all(
        line.split()[0] in COMMAND_WORDS or ENV_ASSIGNMENT.match(line.split()[0]) for line in lines
    )


def _logical_lines(language: str, start: int, body: list[str]):
    """(line number, text) of each command line: ``\\`` continuations joined; in a console
    block only the lines after a ``$ `` prompt."""
    pending, first = "", None
    for offset, line in enumerate(body):
        if language in ("console", "shell-session", "terminal") and not pending:
            if not line.lstrip().startswith("$ "):
                continue
            line = line.lstrip()[2:]
        stripped = line.rstrip()
        if first is None:
            first = start + offset
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        yield first, pending + stripped
        pending, first = "", None
    if pending.strip():
        yield first, pending


def _split(line: str) -> list[list[str]]:
    """The simple commands of a line: words split at && || ; | (comments dropped)."""
    lexer = shlex.shlex(ANGLE.sub(r"‹\1›", line), posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands, words = [], []
    for token in lexer:
        if token in ("&&", "||", ";", "|", "&"):
            commands.append(words)
            words = []
        else:
            words.append(token)
    commands.append(words)
    return [c for c in commands if c]


def _simple_command(source: str, words: list[str]) -> Command:
    env = {}
    while words and ENV_ASSIGNMENT.match(words[0]):
        name, _, value = words[0].partition("=")
        env[name] = value
        words = words[1:]
    redirect = None
    for op in (">", ">>"):
        if op in words:
            at = words.index(op)
            redirect = words[at + 1] if at + 1 < len(words) else ""
            words = words[:at] + words[at + 2 :]
    return Command(source, words, env, redirect)


def extract(markdown: str, name: str) -> list[Command]:
    """The shell commands of the page ``markdown`` (``name``: its path, for the sources)."""
    found = []
    for language, start, body in _fences(markdown):
        if language not in SHELL_LANGUAGES and not (language == "" and _looks_like_shell(body)):
            continue
        for number, line in _logical_lines(language, start, body):
            found += [_simple_command(f"{name}:{number}", words) for words in _split(line)]
    return found


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def doc_commands() -> list[Command]:
    return [cmd for page in doc_pages() for cmd in extract(page.read_text(), str(page.relative_to(ROOT)))]


# --------------------------------------------------------------------------- checks


@dataclass
class Outcome:
    status: str  # "ok", "fail" or "skip"
    detail: str


class _Parsed(Exception):
    pass


def _parse_only(run) -> str | None:
    """Run ``run()`` until its argparse parser has parsed the command line; None if it
    parsed, else argparse's message."""
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        real(self, args, namespace)
        raise _Parsed

    err = io.StringIO()
    with (
        mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            run()
        except _Parsed:
            return None
        except SystemExit as exit_:
            if exit_.code in (0, None):  # --help, --version
                return None
            return (err.getvalue().strip().splitlines() or [f"exit {exit_.code}"])[-1]
    return "the program finished without parsing a command line"


def _build_requires() -> set[str]:
    """The build backend's requirements (pyproject.toml [build-system] requires), by name."""
    return {re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower() for r in PYPROJECT["build-system"]["requires"]}


def _dependencies() -> set[str]:
    project = PYPROJECT["project"]
    specs = project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra]
    return {re.split(r"[\s<>=!~\[;]", spec, maxsplit=1)[0].lower() for spec in specs}


def _declared_markers() -> set[str]:
    markers = PYPROJECT["tool"]["pytest"]["ini_options"].get("markers", [])
    return {m.split(":")[0].split("(")[0].strip() for m in markers} | PYTEST_BUILTIN_MARKERS


class Checker:
    """Checks commands in order in a copy of the repository (``copy``); the snakemake
    ones are collected and dry-run together by :meth:`dry_run`."""

    def __init__(self, copy: Path, scratch: Path):
        self.copy, self.scratch = copy, scratch
        self.venvs: set[str] = set()
        self.outcomes: dict[object, Outcome] = {}
        # (key, command, snakemake's arguments, env, folders put first on PATH)
        self.queued: list[tuple[object, Command, list[str], dict[str, str], list[str]]] = []

    # each check returns an Outcome, or None when the command was queued for the dry run
    def check(self, key: object, cmd: Command) -> None:
        outcome = self._check(key, cmd)
        if outcome is not None:
            self.outcomes[key] = outcome

    def _check(self, key: object, cmd: Command) -> Outcome | None:
        if not cmd.words:
            return Outcome("ok", "not run (sets environment variables)")
        placeholders = [w for w in cmd.words if PLACEHOLDER.search(w)]
        if placeholders:
            return Outcome("skip", f"a template (placeholder {placeholders[0]!r})")
        words = [self._fill_path_placeholder(w) for w in cmd.words]
        problems = [
            f"{name}={value}: {part} does not exist"
            for name, value in cmd.env.items()
            if name == "PYTHONPATH"
            for part in value.split(":")
            if not (self.copy / part).exists()
        ]
        if problems:
            return Outcome("fail", "; ".join(problems))
        program, args = words[0], words[1:]
        if program == "snakemake":
            first_on_path = []
            if "--use-conda" in args or "--sdm=conda" in args or ("conda" in args and "--sdm" in args):
                if shutil.which("conda") is None:
                    first_on_path.append(str(self._conda_stand_in()))
            self.queued.append((key, cmd, ["--dry-run", *args], dict(cmd.env), first_on_path))
            return None
        if (program in ("python", "python3") and args[:2] == ["-m", "repens"]) or program == "repens":
            return self._check_repens(args[2:] if program != "repens" else args, program == "repens")
        if program in ("python", "python3") and args[:2] == ["-m", "venv"]:
            self.venvs.add([a for a in args[2:] if not a.startswith("-")][-1].rstrip("/"))
            return Outcome("ok", "not run (makes a virtual environment)")
        if program in ("python", "python3") and args and args[0].endswith(".py"):
            return self._check_script(args[0], args[1:])
        if program in (".", "source"):
            venv = args[0].removesuffix("/bin/activate").rstrip("/") if args[0].endswith("/bin/activate") else None
            if venv not in self.venvs:
                return Outcome("fail", f"activates {args[0]}, which no command of the docs before it creates")
            return Outcome("ok", "not run (activates the venv made above)")
        if program in ("pip", "pip3") or (program in ("python", "python3") and args[:2] == ["-m", "pip"]):
            return self._check_pip(args[2:] if program.startswith("python") else args)
        if program == "pytest" or (program in ("python", "python3") and args[:2] == ["-m", "pytest"]):
            return self._check_pytest(args[2:] if program.startswith("python") else args)
        if program in ("bash", "sh") or program.startswith(("./", ".ci/")):
            script = args[0] if program in ("bash", "sh") else program
            if not (self.copy / script).is_file():
                return Outcome("fail", f"{script} does not exist")
            return Outcome("ok", f"not run ({script} exists)")
        if program == "ruff":
            return self._check_ruff(args)
        if program in ("cd", "git", "export"):
            return Outcome("ok", f"not run ({program})")
        if program in ("printf", "echo", "mkdir"):
            return self._run_in_copy(cmd, words)
        return Outcome("fail", f"no check for {program!r} commands: add one to tests/test_doc_commands.py")

    def _fill_path_placeholder(self, word: str) -> str:
        def folder(m: re.Match) -> str:
            path = self.scratch / m[0].lstrip("/")
            path.mkdir(parents=True, exist_ok=True)
            return str(path)

        return PATH_PLACEHOLDER.sub(folder, word)

    def _conda_stand_in(self) -> Path:
        """A `conda` that answers what Snakemake asks before it plans (where no conda is)."""
        folder = self.scratch / "conda-stand-in"
        if not folder.is_dir():
            folder.mkdir(parents=True)
            script = folder / "conda"
            script.write_text(
                textwrap.dedent("""\
                #!/bin/sh
                case "$*" in
                  "info --json") echo '{"conda_prefix": "/nonexistent/conda", "platform": "linux-64"}';;
                  "--version") echo "conda 24.11.0";;
                  "config --get channel_priority --json") echo '{"get": {"channel_priority": "strict"}}';;
                  *) echo "conda stand-in (tests/test_doc_commands.py): $*" >&2; exit 1;;
                esac
                """)
            )
            script.chmod(0o755)
        return folder

    def _check_repens(self, argv: list[str], console_script: bool) -> Outcome:
        if console_script and "repens" not in PYPROJECT["project"].get("scripts", {}):
            return Outcome("fail", "pyproject.toml installs no `repens` command")
        from repens.cli import main

        why = _parse_only(lambda: main(argv))
        return Outcome("fail", why) if why else Outcome("ok", "parsed by repens' own parser (not run)")

    def _check_script(self, script: str, argv: list[str]) -> Outcome:
        path = self.copy / script
        if not path.is_file():
            return Outcome("fail", f"{script} does not exist")
        if "argparse" not in path.read_text():
            return Outcome("fail", f"{script} has no argparse parser to check the command line with")

        def run():
            with mock.patch.object(sys, "argv", [str(path), *argv]):
                runpy.run_path(str(path), run_name="__main__")

        why = _parse_only(run)
        return Outcome("fail", why) if why else Outcome("ok", f"parsed by {script}'s own parser (not run)")

    def _check_pip(self, args: list[str]) -> Outcome:
        """``pip install`` / ``pip download``: the extras, packages and folders it names exist
        (packages: dependencies or the build backend of pyproject.toml)."""
        if not args or args[0] not in ("install", "download"):
            return Outcome("fail", f"pip {' '.join(args[:1])}: no check for it")
        problems, skip_next = [], False
        for arg in args[1:]:
            if skip_next:
                skip_next = False
                continue
            if arg in (
                *("--index-url", "--extra-index-url", "-i", "-r", "--requirement", "-c", "--constraint"),
                *("-d", "--dest", "-f", "--find-links"),
            ):
                skip_next = True
                continue
            if arg.startswith("-"):
                continue
            m = re.match(r"^(?P<path>\.{1,2}(/[^\[]*)?)(\[(?P<extras>[^\]]*)\])?$", arg)
            if m:
                if not (self.copy / m["path"] / "pyproject.toml").is_file():
                    problems.append(f"{m['path']} holds no pyproject.toml")
                for extra in filter(None, (m["extras"] or "").split(",")):
                    if extra.strip() not in PYPROJECT["project"].get("optional-dependencies", {}):
                        problems.append(f"pyproject.toml has no extra {extra.strip()!r}")
            elif re.split(r"[<>=!~\[]", arg, maxsplit=1)[0].lower() not in _dependencies() | _build_requires():
                problems.append(f"{arg} is not a dependency (or the build backend) in pyproject.toml")
        return Outcome("fail", "; ".join(problems)) if problems else Outcome("ok", "not run (what it names exists)")

    def _check_pytest(self, args: list[str]) -> Outcome:
        problems, i = [], 0
        while i < len(args):
            arg = args[i]
            if arg == "-m" and i + 1 < len(args):
                names = set(re.findall(r"[A-Za-z_]\w*", args[i + 1])) - {"and", "or", "not"}
                problems += [
                    f"marker {n!r} is not declared in pyproject.toml" for n in sorted(names - _declared_markers())
                ]
                i += 1
            elif arg in ("-k", "-p", "--maxfail", "-n", "--durations"):
                i += 1
            elif not arg.startswith("-") and not (self.copy / arg.split("::")[0]).exists():
                problems.append(f"{arg} does not exist")
            i += 1
        return Outcome("fail", "; ".join(problems)) if problems else Outcome("ok", "not run (markers and paths exist)")

    def _check_ruff(self, args: list[str]) -> Outcome:
        """ruff (the lint stage of .ci/run): run in the copy with this environment's ruff."""
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", *args], cwd=self.copy, capture_output=True, text=True, timeout=120
        )
        if proc.returncode != 0:
            return Outcome("fail", f"exit {proc.returncode} in a fresh checkout: {(proc.stdout + proc.stderr).strip()}")
        return Outcome("ok", "run in the copy")

    def _run_in_copy(self, cmd: Command, words: list[str]) -> Outcome:
        """printf/echo into a file, mkdir: run in the copy, as the page has it."""
        line = shlex.join(words) + (f" > {shlex.quote(cmd.redirect)}" if cmd.redirect else "")
        proc = subprocess.run(["bash", "-c", line], cwd=self.copy, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            if cmd.redirect:  # so that the commands after it, which read the file, can be checked
                (self.copy / cmd.redirect).parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(["bash", "-c", line], cwd=self.copy, capture_output=True, timeout=30)
            return Outcome("fail", f"exit {proc.returncode} in a fresh checkout: {proc.stderr.strip()}")
        return Outcome("ok", "run in the copy")

    def dry_run(self, timeout: int = 900) -> None:
        """Dry-run every queued snakemake command: one Python process, Snakemake imported
        once, each command in a forked child (its own state, working directory, env)."""
        if not self.queued:
            return
        logs = self.scratch / "dry-runs"
        logs.mkdir(parents=True, exist_ok=True)
        spec = {
            "src": str(self.copy / "src"),
            "logs": str(logs),
            "commands": [
                {"argv": argv, "env": env, "path": path, "cwd": str(self.copy)} for _, _, argv, env, path in self.queued
            ],
        }
        (logs / "spec.json").write_text(json.dumps(spec))
        (logs / "runner.py").write_text(RUNNER)
        proc = subprocess.run(
            [sys.executable, str(logs / "runner.py"), str(logs / "spec.json"), str(logs / "out.json")],
            cwd=self.copy,
            env=no_slurm_env(self.scratch),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        for (key, _cmd, argv, _env, path), result in zip(self.queued, json.loads((logs / "out.json").read_text())):
            log = Path(result["log"]).read_text()
            shown = " ".join(["snakemake", *argv])
            if result["rc"] == 0:
                extra = " (conda: a stand-in answering Snakemake's checks)" if path else ""
                self.outcomes[key] = Outcome("ok", f"`{shown}` planned in {result['seconds']:.1f} s{extra}")
            else:
                self.outcomes[key] = Outcome("fail", f"`{shown}` exited {result['rc']}:\n{log[-2500:]}")
        self.queued = []


RUNNER = r"""
import json, os, sys, time, traceback

spec = json.load(open(sys.argv[1]))
sys.path.insert(0, spec["src"])  # the copy's package, as common.smk puts it first
import snakemake.cli
for name in ("repens.pipeline.config", "repens.report.results_page", "repens.data.availability",
             "repens.data.uci", "repens.pipeline.cost", "repens.pipeline.last_good"):
    try:
        __import__(name)
    except Exception:
        pass
results = []
for i, cmd in enumerate(spec["commands"]):
    log = os.path.join(spec["logs"], f"{i}.log")
    start = time.time()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(cmd["cwd"])
            os.environ.update(cmd["env"])
            os.environ["PATH"] = os.pathsep.join([*cmd["path"], os.environ["PATH"]])
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.argv = ["snakemake", *cmd["argv"]]
            snakemake.cli.main(cmd["argv"])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    results.append({"rc": os.waitstatus_to_exitcode(status), "seconds": time.time() - start, "log": log})
json.dump(results, open(sys.argv[2], "w"))
"""


def no_slurm_env(scratch: Path) -> dict[str, str]:
    """The environment with every PATH folder that holds a SLURM client replaced by a copy
    (symlinks) of it without them, as .ci/run does."""
    folders = []
    for i, folder in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if folder and any((Path(folder) / client).exists() for client in SLURM_CLIENTS):
            shadow = scratch / "no-slurm" / str(i)
            if not shadow.is_dir():
                shadow.mkdir(parents=True)
                for entry in Path(folder).iterdir():
                    if entry.name not in SLURM_CLIENTS:
                        (shadow / entry.name).symlink_to(entry)
            folder = str(shadow)
        folders.append(folder)
    env = {**os.environ, "PATH": os.pathsep.join(folders), "REPENS_OFFLINE": "1"}
    env.pop("SLURM_JOB_ID", None)
    return env


def copy_checkout(dest: Path) -> Path:
    """The tracked files of the working tree (as they are now, links kept as links)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest


def check_all(commands: list[Command], copy: Path, scratch: Path, dry_run: bool = True) -> dict[object, Outcome]:
    """Outcome of each command (by index), checked in order; the dry runs last, together."""
    checker = Checker(copy, scratch)
    for key, cmd in enumerate(commands):
        checker.check(key, cmd)
    if dry_run:
        checker.dry_run()
    return checker.outcomes


# --------------------------------------------------------------------------- the docs

DOC_COMMANDS = doc_commands()
SNAKEMAKE = {i for i, cmd in enumerate(DOC_COMMANDS) if cmd.words[:1] == ["snakemake"]}


def _params(keys):
    params = []
    for i in sorted(keys):
        cmd = DOC_COMMANDS[i]
        why = known_broken(cmd)
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        params.append(pytest.param(i, id=f"{cmd.source} {cmd.text[:60]}", marks=marks))
    return params


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the copy is made of the tracked files")
    return copy_checkout(tmp_path_factory.mktemp("checkout")), tmp_path_factory.mktemp("scratch")


@pytest.fixture(scope="module")
def doc_checker(checkout):
    """Every command of the docs checked in their order (printf and mkdir run in the copy:
    the snakemake commands after them read what they wrote), the snakemake ones queued,
    and after them the snakemake commands of the checker's own test page (SYNTHETIC)."""
    copy, scratch = checkout
    checker = Checker(copy, scratch)
    for key, cmd in enumerate(DOC_COMMANDS):
        checker.check(key, cmd)
    for key, cmd in enumerate(extract(SYNTHETIC, "synthetic.md")):
        if cmd.words[:1] == ["snakemake"]:
            checker.check(("synthetic", key), cmd)
    return checker


@pytest.fixture(scope="module")
def dry_runs(doc_checker):
    """All the snakemake commands dry-run, in one Python process."""
    doc_checker.dry_run()
    return doc_checker.outcomes


def _assert_works(outcome: Outcome, cmd: Command) -> None:
    assert outcome.status != "fail", f"{cmd.source}: `{cmd.text}` does not work as written: {outcome.detail}"


def test_the_docs_have_commands_to_check():
    pages = {cmd.source.split(":")[0] for cmd in DOC_COMMANDS}
    assert "README.md" in pages and len(SNAKEMAKE) >= 5, [c.source for c in DOC_COMMANDS]
    assert any(cmd.words[:3] == ["python", "-m", "repens"] for cmd in DOC_COMMANDS)
    gone = [key for key, why in KNOWN_BROKEN.items() if not any(known_broken(c) == why for c in DOC_COMMANDS)]
    assert not gone, f"KNOWN_BROKEN names commands the docs no longer have: {gone}"


@pytest.mark.parametrize("key", _params(set(range(len(DOC_COMMANDS))) - SNAKEMAKE))
def test_doc_command(key, doc_checker):
    _assert_works(doc_checker.outcomes[key], DOC_COMMANDS[key])


@pytest.mark.parametrize("key", _params(SNAKEMAKE))
def test_doc_snakemake_command_plans(key, dry_runs):
    _assert_works(dry_runs[key], DOC_COMMANDS[key])


# --------------------------------------------------------------------------- the checker

SYNTHETIC = """\
Some prose with `snakemake inline` (not a block).

```
python3 -m venv .venv
```

```bash
. .venv/bin/activate && snakemake -c2 \\
    rebuild --config scale=paper   # a comment
python -m repens frobnicate --fast          # no such subcommand
python -m repens budget --scale huge; python -m repens budget --scale paper
PYTHONPATH=src python -m repens where results/table1.csv --no-such-option
pip install -e ".[dev,nosuchextra]"
pytest -q -m "not slow and nosuchmarker"
snakemake <target> -c N
bash .ci/no-such-script
frobnicate --all
```

```yaml
methods: {snakemake: not a command}
```

```
device: CPU
snakemake -n  (an output block: not every line a command)
```

```console
$ snakemake results/no_such_table.tex
Building DAG of jobs...
$ snakemake -c2 --no-such-option
```
"""

SYNTHETIC_EXPECTED = [  # (words, status, part of the detail), in the page's order
    (["python3", "-m", "venv", ".venv"], "ok", "not run"),
    ([".", ".venv/bin/activate"], "ok", "activates"),
    (["snakemake", "-c2", "rebuild", "--config", "scale=paper"], "ok", "planned"),
    (["python", "-m", "repens", "frobnicate", "--fast"], "fail", "invalid choice: 'frobnicate'"),
    (["python", "-m", "repens", "budget", "--scale", "huge"], "fail", "invalid choice: 'huge'"),
    (["python", "-m", "repens", "budget", "--scale", "paper"], "ok", "parsed"),
    (
        ["python", "-m", "repens", "where", "results/table1.csv", "--no-such-option"],
        "fail",
        "unrecognized arguments: --no-such-option",
    ),
    (["pip", "install", "-e", ".[dev,nosuchextra]"], "fail", "no extra 'nosuchextra'"),
    (["pytest", "-q", "-m", "not slow and nosuchmarker"], "fail", "marker 'nosuchmarker'"),
    (["snakemake", "‹target›", "-c", "N"], "skip", "template"),
    (["bash", ".ci/no-such-script"], "fail", "does not exist"),
    (["frobnicate", "--all"], "fail", "no check"),
    (["snakemake", "results/no_such_table.tex"], "fail", "No rule to produce results/no_such_table.tex"),
    (["snakemake", "-c2", "--no-such-option"], "fail", "unrecognized arguments: --no-such-option"),
]


def test_extractor_reads_blocks_chains_continuations_and_prompts():
    commands = extract(SYNTHETIC, "synthetic.md")
    # in the page's order; the untagged venv block is a shell block, the output block not
    assert [cmd.words for cmd in commands] == [words for words, _, _ in SYNTHETIC_EXPECTED]
    assert commands[0].source == "synthetic.md:4"
    assert commands[1].source == commands[2].source == "synthetic.md:8"
    assert commands[2].text == "snakemake -c2 rebuild --config scale=paper"
    assert commands[4].source == commands[5].source == "synthetic.md:11"
    assert commands[6].env == {"PYTHONPATH": "src"}
    assert [c.source for c in commands[-2:]] == ["synthetic.md:30", "synthetic.md:32"]


def test_checker_finds_broken_commands(checkout, tmp_path):
    """Every command of the test page but the snakemake ones (their dry runs: below)."""
    commands = extract(SYNTHETIC, "synthetic.md")
    checker = Checker(checkout[0], tmp_path)
    for key, cmd in enumerate(commands):
        checker.check(key, cmd)
    queued = {key for key, *_ in checker.queued}
    assert queued == {key for key, cmd in enumerate(commands) if cmd.words[0] == "snakemake"} - {9}
    for key, (words, status, detail) in enumerate(SYNTHETIC_EXPECTED):
        if key not in queued:
            outcome = checker.outcomes[key]
            assert outcome.status == status and detail in outcome.detail, (words, outcome)


def test_checker_dry_runs_find_a_target_no_rule_makes_and_an_unknown_option(dry_runs):
    commands = extract(SYNTHETIC, "synthetic.md")
    checked = 0
    for key, (words, status, detail) in enumerate(SYNTHETIC_EXPECTED):
        if ("synthetic", key) in dry_runs:
            outcome = dry_runs[("synthetic", key)]
            assert commands[key].words == words
            assert outcome.status == status and detail in outcome.detail, (words, outcome)
            checked += 1
    assert checked == 4  # three dry runs and the template


def test_checker_printf_into_a_missing_folder_fails_and_the_file_is_there_for_the_next(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    page = "```bash\nprintf 'a: 1\\n' > data/x.yaml\nmkdir -p data && printf 'a: 1\\n' > data/y.yaml\n```\n"
    outcomes = check_all(extract(page, "p.md"), copy, tmp_path / "scratch", dry_run=False)
    assert outcomes[0].status == "fail" and "No such file or directory" in outcomes[0].detail
    assert (copy / "data" / "x.yaml").read_text() == "a: 1\n"
    assert outcomes[1].status == outcomes[2].status == "ok"


def test_checker_runs_ruff_in_the_copy(checkout, tmp_path):
    """`ruff` (the lint of .ci/run) is run in the fresh checkout: clean there, a missing path fails."""
    pytest.importorskip("ruff")
    commands = extract("```bash\nruff check src tests\nruff check no-such-folder\n```\n", "lint.md")
    checker = Checker(checkout[0], tmp_path)
    for key, cmd in enumerate(commands):
        checker.check(key, cmd)
    assert checker.outcomes[0].status == "ok", checker.outcomes[0]
    assert checker.outcomes[1].status == "fail" and "no-such-folder" in checker.outcomes[1].detail, checker.outcomes[1]
