"""The environment variables the package reads, and how: :data:`ENVIRONMENT` and
:func:`env_setting` (a setting, or :class:`EnvError` naming the variable and its value).

A low module (it imports nothing of the project, nor torch, Snakemake or YAML), so that a
training job reads its environment without importing the workflow's checks;
:mod:`repens.pipeline.checks` re-exports everything here and checks every variable at load
(:func:`repens.pipeline.checks.check_environment`). :class:`CheckError` (the checks' one-line
error) lives here as the base of :class:`EnvError`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CheckError", "EnvError", "EnvSetting", "ENVIRONMENT", "env_setting"]


class CheckError(ValueError):
    """A setting that would fail a job later; the message is one line naming it."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class EnvError(CheckError):
    """An environment variable the package reads holds a value it cannot use."""


@dataclass(frozen=True)
class EnvSetting:
    """An environment variable the package reads: how, and what it accepts."""

    #: where it is read, for the message
    read_by: str
    #: value -> setting; raises ValueError with the reason for a value it cannot use
    parse: Callable[[str], Any]
    #: the setting when the variable is unset
    default: Any
    #: what it accepts, for the message
    accepts: str


def _seconds(value: str) -> float:
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError("not a finite number >= 0")
    return seconds


def _flag(off: Iterable[str], on: Iterable[str], strip: bool = False) -> Callable[[str], bool]:
    """A yes/no variable: only the spellings its reader takes as meant (``REPENS_UCI_VERIFY=False``
    would read as on, so it is refused rather than obeyed the wrong way)."""
    off, on = frozenset(off), frozenset(on)

    def parse(value: str) -> bool:
        value = value.strip() if strip else value
        if value in off:
            return False
        if value in on:
            return True
        raise ValueError("not a recognised value")

    return parse


def _folder(value: str) -> str:
    if value and not Path(value).is_dir():
        raise ValueError("no such folder")
    return value


def _commit(value: str) -> str:
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError("not one word (a commit id)")
    return value


#: every environment variable the package reads (``grep os.environ src/repens``), besides
#: SLURM's own (SLURM_JOB_ID & co., set by the cluster, only recorded)
ENVIRONMENT: dict[str, EnvSetting] = {
    "REPENS_CHECKPOINT_SECONDS": EnvSetting(
        "repens.training.train (TrainSettings), repens.experiments.hmc",
        _seconds,
        300.0,
        "seconds between checkpoints, a number >= 0 (0: after every step)",
    ),
    "REPENS_CUDA_GRAPHS": EnvSetting(
        "repens.training.train (TrainSettings.cuda_graphs)", _flag({"0"}, {"1", ""}), True, "0 (off) or 1 (on)"
    ),
    "REPENS_UCI_VERIFY": EnvSetting(
        "repens.data.uci_files",
        _flag({"0", "false", "no"}, {"1", "true", "yes", ""}, strip=True),
        True,
        "0, false or no (off); 1, true or yes (on)",
    ),
    "REPENS_OFFLINE": EnvSetting(
        "repens.data.availability",
        _flag({"", "0"}, {"1", "true", "yes"}),
        False,
        "1, true or yes (offline); 0 or empty (online)",
    ),
    "REPENS_UCI_DATA": EnvSetting(
        "repens.experiments.uci, workflow/rules/uci_common.smk", _folder, "", "an existing folder of UCI data sets"
    ),
    "REPENS_GIT_COMMIT": EnvSetting(
        "repens.jobs.provenance (outside a git checkout)", _commit, "unknown", "a commit id, one word"
    ),
}


def _env_message(name: str, value: str, reason: str) -> str:
    spec = ENVIRONMENT[name]
    return (
        f"environment variable {name}={value!r}: {reason} (read by {spec.read_by} as "
        f"{spec.accepts}; unset: {spec.default!r})"
    )


def env_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The setting environment variable ``name`` (a key of :data:`ENVIRONMENT`) gives: its
    default when unset, else its parsed value; :class:`EnvError` (one line naming the
    variable and its value) when the value is not one it accepts."""
    environ = os.environ if environ is None else environ
    spec = ENVIRONMENT[name]
    if name not in environ:
        return spec.default
    value = environ[name]
    try:
        return spec.parse(value)
    except ValueError as err:
        reason = str(err) if str(err).startswith(("not ", "no ")) else "not a number"
        raise EnvError(_env_message(name, value, reason)) from None
