"""Can the data the requested targets need be had? Checked when the workflow loads.

The workflow (workflow/rules/data_check.smk) asks this before any job runs, so that a
run that would fail on missing data stops at once with the fix, instead of failing
after an hour of other jobs. A data set counts as available when

1. its prepared file is there (``<image_data>/<dataset>.npz``; for UCI,
   ``<uci_data>/<folder>/data/data.txt``), or
2. every original file is under the data root or the mirror (an archive, or the files
   it extracts to; only existence is checked here: the data rule verifies MD5s), or
3. downloading is allowed (``image_data_download: true``; UCI always downloads) and the
   host of one of the file's URLs answers a TCP connection within a few seconds.

The probe of 3. opens one TCP connection per host (cached) and sends nothing. Set
``REPENS_OFFLINE=1`` to skip it and count no download as possible (the tests do, so they
never touch the network; so can a machine whose firewall makes connections hang).
"""

from __future__ import annotations

import functools
import os
import shlex
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from repens.data.images import IMAGE_DATASETS, RemoteFile

__all__ = [
    "OFFLINE_ENV",
    "Missing",
    "reachable",
    "image_files_lacking",
    "lacking_image_data",
    "lacking_uci_data",
    "lacking_message",
]

#: Environment variable: set (to anything but "" or "0") to count no URL as reachable.
OFFLINE_ENV = "REPENS_OFFLINE"
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Missing:
    """One file a data set lacks: where it goes, its MD5 (None: unknown) and its URL."""

    dataset: str
    path: Path
    md5: str | None
    url: str


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


@functools.cache
def _host_answers(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # no DNS, refused, unreachable, timed out
        return False


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``url``'s host accepts a TCP connection within ``timeout`` seconds
    (False at once when ``$REPENS_OFFLINE`` is set). One probe per host and port."""
    if offline():
        return False
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return _host_answers(parts.hostname, port, float(timeout))


def image_files_lacking(name: str, root: Path | str, mirror: Path | str | None = None) -> list[RemoteFile]:
    """Original files of image data set ``name`` found neither under ``root`` nor in
    ``mirror`` (as the archive or as all the files it extracts to)."""
    root = Path(root)
    places = [root] + ([Path(mirror)] if mirror else [])
    lacking = []
    for file in IMAGE_DATASETS[name].files:
        if not any(
            (place / file.folder / file.filename).is_file() or all((place / rel).is_file() for rel in file.extracted)
            for place in places
        ):
            lacking.append(file)
    return lacking


def lacking_image_data(
    datasets: Iterable[str],
    root: Path | str,
    mirror: Path | str | None,
    download: bool,
    probe: Callable[[str], bool] = reachable,
) -> list[Missing]:
    """Every file of ``datasets`` that is not there, not in the mirror and (when
    ``download``) not downloadable, in data set order. A data set whose ``.npz`` is
    prepared already lacks nothing."""
    out = []
    for name in datasets:
        if (Path(root) / f"{name}.npz").is_file():
            continue
        for file in image_files_lacking(name, root, mirror):
            if download and any(probe(url) for url in file.urls):
                continue
            out.append(Missing(name, Path(root) / file.folder / file.filename, file.md5, file.urls[0]))
    return out


def lacking_uci_data(
    datasets: Iterable[str], root: Path | str, probe: Callable[[str], bool] = reachable
) -> list[Missing]:
    """UCI data sets (config names) whose ``data.txt`` is not under ``root`` and whose
    download URL does not answer (download_uci fetches the rest of the folder)."""
    from repens.data.uci_files import UCI_FOLDERS, UCI_URL

    out = []
    for name in datasets:
        folder = UCI_FOLDERS[name]
        path = Path(root) / folder / "data" / "data.txt"
        url = f"{UCI_URL}/{folder}/data/data.txt"
        if not path.is_file() and not probe(url):
            out.append(Missing(name, path, None, url))
    return out


def lacking_message(lacking: Sequence[Missing], how_to_rerun: str, fix_key: str, why: str, skip_hint: str = "") -> str:
    """The multi-line message of a run stopped for missing data: every file with where
    to put it, and the exact commands that fix it."""
    names = sorted({m.dataset for m in lacking}, key=[m.dataset for m in lacking].index)
    lines = [
        f"data not available for {', '.join(names)} ({why}); nothing was run. Missing {len(lacking)} file(s):",
    ]
    for m in lacking:
        lines.append(f"  {m.path}" + (f"  (md5 {m.md5})" if m.md5 else "") + f"  from {m.url}")
    lines.append("Fix, either of:")
    lines.append("  1. put the files at those paths (for the MNIST family the .gz archive or the file it")
    lines.append("     unzips to), e.g. on a machine with internet, then copy them over:")
    for m in lacking:
        lines.append(f"       curl -fL --create-dirs -o {shlex.quote(str(m.path))} {shlex.quote(m.url)}")
    lines.append("  2. or use a copy that holds them in the same layout (e.g. a shared read-only folder):")
    lines.append(f"       {how_to_rerun} --config {fix_key}=/path/to/copy")
    if skip_hint:
        lines.append(skip_hint)
    return "\n".join(lines)
