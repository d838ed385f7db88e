"""The Snakemake report, built and checked (the report stage of .ci/run).

    python tests/report/report_check.py WORKDIR [--shared-data DIR] [--browser chromium] [--skip-run]

1. runs the pipeline on a tiny config (config.yaml with tests/report/config.yaml over it;
   Table 1 and Table 2 only where a copy of their data is at hand, ``--shared-data``,
   default ``$REPENS_SHARED_DATA`` or ``../shared/data``: left out loudly otherwise) in
   WORKDIR, every aggregate rule as a target;
2. builds ``snakemake --report WORKDIR/report.html``;
3. checks the report holds every figure and table the run made: every output marked
   ``report(...)`` in workflow/rules/ that exists, every table HTML and figure PNG under
   results/, each with the file's exact bytes, a caption, a category and labels; and
   the workflow description page;
4. with ``--browser``, opens the report in that headless browser (Chromium, one
   process driven over its DevTools pipe) and takes a screenshot of the main page, which
   must show the workflow description, and of the report showing each result (selected
   as a click on its eye button does): each must be non-blank, and the rendered page must
   hold the result alone (an ``<img>`` or ``<iframe>`` with its data). Screenshots are
   kept in WORKDIR/screenshots/.

Exits non-zero with one line per problem. The check functions are unit-tested in
tests/report/test_report_check.py.
"""

from __future__ import annotations

import argparse
import ast
import base64
import copy
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = Path(__file__).with_name("config.yaml")
#: The run's targets, by experiment: aggregate rules (no wildcards), and the figures of
#: the plot rules (one rule, a wildcard: the figure).
RULES = {
    "synthetic": ["summarize_synthetic", "results/figures/fig2_gaussian.png", "results/figures/figF1_funnel.png"],
    "toy": ["results/figures/fig1_regression.png", "results/figures/fig3_classification.png", "summarize_toy"],
    "image": ["summarize_image"],
    "uci": ["summarize_uci"],
    # the scorecard reads the tables of the three above (and Table 2 where it is there)
    "claims": ["summarize_claims", "plot_claim_evidence", "write_claims_page", "plot_training_curves"],
}
MIME = {".png": "image/png", ".html": "text/html", ".pdf": "application/pdf", ".csv": "text/csv"}
DESCRIPTION = "Repulsive Deep Ensembles are Bayesian"


def say(message: str) -> None:
    print(f"[report-check] {message}", flush=True)


# --------------------------------------------------------------------------- the run


def merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def tiny_config(shared: Path | None) -> tuple[dict, list[str]]:
    """The run's config and its experiments (image/uci only with their data at hand)."""
    config = merge(yaml.safe_load((ROOT / "config.yaml").read_text()), yaml.safe_load(OVERLAY.read_text()))
    experiments = ["synthetic", "toy"]
    if shared is not None and (shared / "FashionMNIST" / "raw").is_dir() and (shared / "MNIST" / "raw").is_dir():
        config.update(image_data_mirror=str(shared), image_data_download=False)
        experiments.append("image")
    else:
        say(f"LEFT OUT: Table 1 (no FashionMNIST/MNIST copy under {shared})")
    if shared is not None and (shared / "uci" / "yacht" / "data" / "data.txt").is_file():
        uci = config["experiments"]["uci"]
        uci["datasets"] = {"yacht": uci["datasets"]["yacht"]}
        config["uci_data"] = str(shared / "uci")
        experiments.append("uci")
    else:
        say(f"LEFT OUT: Table 2 (no UCI yacht copy under {shared}/uci)")
    if "image" in experiments:
        experiments.append("claims")
    else:
        say("LEFT OUT: the claim scorecard (it needs Table 1)")
    return config, experiments


def snakemake(workdir: Path, *args: str, timeout: int) -> None:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args]
    say("$ " + " ".join(cmd[2:]))
    env = {**os.environ, "REPENS_OFFLINE": "1"}  # data from the copies only
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    (workdir / "snakemake.log").open("a").write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-5000:], file=sys.stderr)
        raise SystemExit(f"[report-check] FAIL: snakemake {' '.join(args[:3])} exited {proc.returncode}")
    say(f"done in {time.time() - t0:.0f} s")


def run(workdir: Path, shared: Path | None, cores: int) -> list[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    config, experiments = tiny_config(shared)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    targets = [rule for exp in experiments for rule in RULES[exp]]
    snakemake(workdir, f"--cores={cores}", *targets, timeout=900)
    (workdir / "experiments.json").write_text(json.dumps(experiments))
    return experiments


# --------------------------------------------------------------------------- the checks


def read_var(page: str, name: str) -> Any:
    """The JSON value of ``var <name> = ...;`` in the report's data scripts (the bundled
    libraries declare variables of the same names: the first that is JSON counts)."""
    for match in re.finditer(rf"\bvar {re.escape(name)} = ", page):
        try:
            return json.JSONDecoder().raw_decode(page, match.end())[0]
        except ValueError:
            continue
    raise ValueError(f"the report has no `var {name} = <JSON>`")


def report_outputs(rules_dir: Path = ROOT / "workflow" / "rules") -> list[str]:
    """Every output path marked ``report("...")`` or ``report(directory("..."), ...)`` in
    the rule files (a directory's files are in the report one by one). A marked path with
    a wildcard is expanded over the values its rule allows: ``wildcard_constraints:
    name="|".join(NAMES)`` with ``NAMES = {...}`` a one-line literal of the same file."""
    found = []
    for path in sorted(rules_dir.glob("*.smk")):
        text = path.read_text()
        for block in re.split(r"^(?=(?:rule|checkpoint) \w+:)", text, flags=re.M):
            for marked in re.findall(r"report\(\s*(?:directory\(\s*)?\"([^\"]+)\"", block):
                found += _expand(marked, block, text, path)
    return found


def _expand(pattern: str, block: str, text: str, path: Path) -> list[str]:
    """``pattern`` over the values of its wildcards that its rule (``block`` of ``text``) allows."""
    paths = [pattern]
    for name in dict.fromkeys(re.findall(r"\{(\w+)\}", pattern)):
        constraint = re.search(rf'\b{name}="\|"\.join\((\w+)\)', block)
        literal = constraint and re.search(rf"^{constraint[1]} = (\{{.*?\}})$", text, flags=re.M | re.S)
        if not literal:
            raise ValueError(f"{path.name}: cannot list the values of {{{name}}} in the marked output {pattern}")
        values = ast.literal_eval(literal[1])
        paths = [p.replace(f"{{{name}}}", value) for p in paths for value in values]
    return paths


def marked_files(workdir: Path, marked: list[str]) -> list[str]:
    """The marked outputs that exist in ``workdir``, a marked directory as its PNG files."""
    files = []
    for path in marked:
        full = workdir / path
        if full.is_dir():
            files += sorted(str(p.relative_to(workdir)) for p in full.glob("*.png"))
        elif full.exists():
            files.append(path)
    return files


def produced_outputs(workdir: Path) -> list[str]:
    """The figures and tables a run made: PNG figures and HTML tables under results/."""
    results = workdir / "results"
    files = [
        *results.glob("figures/*.png"),
        *results.glob("figures/*/*.png"),
        *results.glob("*.png"),
        *results.glob("*.html"),
        *results.glob("*/*.html"),
    ]
    return sorted(str(p.relative_to(workdir)) for p in files if "last_good" not in p.parts)


def decode(data_uri: str) -> bytes:
    head, _, data = data_uri.partition(",")
    return base64.b64decode(data) if head.endswith(";base64") else data.encode()


def check_report(page: str, workdir: Path, marked: list[str] | None = None) -> list[str]:
    """Problems of the report ``page`` (its HTML text) against the run in ``workdir``."""
    marked = report_outputs() if marked is None else marked
    problems = []
    try:
        results, categories = read_var(page, "results"), read_var(page, "categories")
        description = read_var(page, "workflow_desc")
    except ValueError as err:
        return [str(err)]
    if DESCRIPTION not in description:
        problems.append(f"no workflow description page (no {DESCRIPTION!r} in workflow_desc)")
    present = marked_files(workdir, marked)
    expected = sorted(set(present) | set(produced_outputs(workdir)))
    if not expected:
        problems.append(f"the run in {workdir} made no figure or table")
    in_category = {p for subcats in categories.values() for paths in subcats.values() for p in paths}
    for path in expected:
        if path not in present and path not in marked:
            problems.append(f"{path}: made by the run but not marked report(...) in workflow/rules/")
            continue
        entry = results.get(path)
        if entry is None:
            problems.append(f"{path}: not in the report")
            continue
        if decode(entry.get("data_uri", "")) != (workdir / path).read_bytes():
            problems.append(f"{path}: the report's copy differs from the file")
        if entry.get("mime_type") != MIME.get(Path(path).suffix):
            problems.append(f"{path}: mime type {entry.get('mime_type')!r}")
        if not (entry.get("caption") or "").strip():
            problems.append(f"{path}: no caption")
        labels = entry.get("labels") or {}
        if not {"output", "format"} <= set(labels):
            problems.append(f"{path}: labels {labels} lack output/format")
        if path not in in_category:
            problems.append(f"{path}: in no category")
    for path in sorted(set(results) - set(expected)):
        problems.append(f"{path}: in the report but not made by this run")
    return problems


# --------------------------------------------------------------------------- the browser


class Browser:
    """One headless Chromium, driven over its DevTools pipe (``--remote-debugging-pipe``:
    JSON messages ending in NUL, commands on the browser's fd 3, answers on its fd 4), with
    one page of ``width`` x ``height`` pixels. One browser shows every result of a report,
    where a browser started per screenshot took seconds each to start and parse the page."""

    def __init__(self, browser: str, width: int = 1800, height: int = 1100, timeout: float = 120.0):
        self.timeout = timeout
        flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars --mute-audio --no-first-run"
        flags += " --remote-debugging-pipe about:blank"
        # the shell gives the browser our pipes as its fds 3 and 4, and no stdin/stdout
        self.proc = subprocess.Popen(
            ["sh", "-c", f'exec "$0" {flags} 3<&0 4>&1 0</dev/null 1>/dev/null', browser],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._buffer = b""
        self._id = 0
        self._events: list[dict] = []
        try:
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            self.call("Page.enable", session=True)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
                session=True,
            )
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except BrokenPipeError:  # unflushed bytes for a browser that is gone
                pass

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise TimeoutError(f"the browser did not answer within {self.timeout:.0f} s")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError(f"the browser closed its pipe (exit {self.proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, **params: Any) -> dict:
        """Send one command (to the page's session with ``session``); its result."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\0")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"the browser closed its pipe (exit {self.proc.wait()})") from None
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error'].get('message', answer['error'])}")
                return answer.get("result", {})
            self._events.append(answer)

    def open(self, page: Path) -> None:
        """Load ``page`` and wait for its load event."""
        self._events.clear()
        self.call("Page.navigate", url=page.resolve().as_uri(), session=True)
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            self._events.append(self._read(deadline))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript ``expression`` in the page (a promise awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True, session=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}...: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, png: Path) -> str | None:
        """A screenshot of the page into ``png``: why it is blank (:func:`blank`), or None."""
        png.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png", session=True)["data"]))
        return blank(png)


#: Milliseconds a page gets to render after it loads or after a result is selected.
SETTLE_MS = 500

#: Selects one result as a click on its eye button does (the report's ``app.setView``),
#: waits :data:`SETTLE_MS`, and lists the results whose data the rendered page then holds,
#: as "<tag> <path>" for each ``<img>`` / ``<iframe>`` with a result's data as ``src``.
#: The page only reports what it holds; :func:`shown_problems` judges it.
SELECT = """new Promise(function (done) {{
  var path = {path};
  var entry = results[path];
  var kind = entry.mime_type === "text/html" ? "html" : "img";
  app.setView({{content: kind, contentPath: entry.data_uri, resultPath: path, navbarMode: "resultinfo"}});
  setTimeout(function () {{
    var byUri = {{}};
    Object.keys(results).forEach(function (p) {{ byUri[results[p].data_uri] = p; }});
    var held = [];
    document.querySelectorAll("img[src], iframe[src]").forEach(function (e) {{
      var p = byUri[e.getAttribute("src")];
      if (p !== undefined) held.push(e.tagName.toLowerCase() + " " + p);
    }});
    done(held);
  }}, {settle});
}})"""


def settle(browser: Browser) -> None:
    browser.evaluate(f"new Promise(function (done) {{ setTimeout(done, {SETTLE_MS}); }})")


def shown_problems(seen: dict[str, Any], results: dict[str, dict]) -> list[str]:
    """What the page held once each result was selected (``seen``: :data:`SELECT`'s
    lists, by path) says is wrong: a result not held as exactly one ``<img>`` (figure) or
    ``<iframe>`` (table) with its data, alone among the results; one never selected."""
    problems = []
    for path, entry in sorted(results.items()):
        tag = "iframe" if entry["mime_type"] == "text/html" else "img"
        held = seen.get(path)
        if held is None:
            problems.append(f"{path}: never selected in the rendered page")
        elif held != [f"{tag} {path}"]:
            problems.append(
                f"{path}: the report does not show it alone (one <{tag}> with its data in the rendered page; "
                f"it held {held or 'no result'})"
            )
    return problems


def blank(png: Path) -> str | None:
    """Why a screenshot is blank (None if it is not): one colour, or almost no ink."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=np.int32)
    # one integer per colour: np.unique over the pixels' rows sorts them as records, 4 s a screenshot
    colours = len(np.unique((pixels[..., 0] << 16) | (pixels[..., 1] << 8) | pixels[..., 2]))
    ink = float((np.abs(pixels - pixels[0, 0]).sum(axis=2) > 60).mean())
    if colours < 8 or ink < 0.002:
        return f"{colours} colours, {ink:.2%} of the pixels differ from the background"
    return None


def check_browser(browser: str, report: Path, workdir: Path, results: dict[str, dict]) -> list[str]:
    """Screenshots of the main page and of each result shown in the report (``results``:
    its ``results`` variable), in one browser."""
    shots = workdir / "screenshots"
    shots.mkdir(exist_ok=True)
    problems = []
    with Browser(browser) as page:
        page.open(report)
        settle(page)
        if DESCRIPTION not in (page.evaluate("document.body.innerText") or ""):
            problems.append("main page: the rendered page does not show the workflow description")
        why = page.screenshot(shots / "main.png")
        if why:
            problems.append(f"main page: screenshot blank ({why})")
        seen = {}
        for path in sorted(results):
            seen[path] = page.evaluate(SELECT.format(path=json.dumps(path), settle=SETTLE_MS))
            png = shots / (path.replace("/", "_") + ".png")
            why = page.screenshot(png)
            if why:
                problems.append(f"{path}: screenshot blank ({why})")
            say(f"shown in {browser}: {path} -> {png.relative_to(workdir)}")
    return problems + shown_problems(seen, results)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path)
    parser.add_argument(
        "--shared-data", type=Path, default=Path(os.environ.get("REPENS_SHARED_DATA", ROOT.parent / "shared" / "data"))
    )
    parser.add_argument("--browser", help="a headless Chromium (chromium); no browser check without it")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--skip-run", action="store_true", help="check the report of a run already in WORKDIR")
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    shared = args.shared_data.resolve() if args.shared_data.is_dir() else None
    if args.skip_run:
        experiments = json.loads((workdir / "experiments.json").read_text())
    else:
        experiments = run(workdir, shared, args.cores)
    say(f"experiments: {', '.join(experiments)}")
    report = workdir / "report.html"
    report.unlink(missing_ok=True)
    # the report of the run's targets (Table 2 is not in `all`)
    snakemake(workdir, "--report", str(report), *[rule for exp in experiments for rule in RULES[exp]], timeout=300)
    page = report.read_text()
    results = read_var(page, "results")
    say(f"{report} ({report.stat().st_size / 1e6:.1f} MB): {len(results)} results")
    for category, subcats in read_var(page, "categories").items():
        for subcat, paths in subcats.items():
            say(f"  {category} / {subcat}: {', '.join(paths)}")
    problems = check_report(page, workdir)
    if args.browser:
        if shutil.which(args.browser) is None:
            problems.append(f"no browser {args.browser!r} on PATH")
        else:
            problems += check_browser(args.browser, report, workdir, results)
    for problem in problems:
        print(f"[report-check] FAIL: {problem}", file=sys.stderr)
    if problems:
        return 1
    say(
        f"OK: every figure and table of the run is in the report ({len(results)})"
        + (f" and shown by {args.browser}" if args.browser else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
