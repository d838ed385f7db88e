"""The results page's first screen: what held (the claim scorecard by verdict, one line per
claim with the protocol it was scored at), why Table 1 differs from the paper (its two
protocols, with their numbers) and what the repulsion does (its share of the step, and the
controls that remove or scale it). Read from the kept tables alone: ``claims.csv``,
``table1_vs_paper.csv``, ``table1_runs.csv`` and ``table1_repulsion.csv`` of ``reference/results``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from repens.report.claims import CLAIM_VERDICTS, DIFFERS, FALSE_ON_PAPER, NOT_TESTABLE, TOO_FEW_SEEDS
from repens.report.tables import mean_se
from repens.results.statistics import no_spread, quantile

#: the page's order of the verdict classes: what held, what did not, then what is not a
#: verdict on the paper at its protocol
VERDICT_ORDER = (
    "reproduced",
    "contradicted",
    FALSE_ON_PAPER,
    DIFFERS,
    "inconclusive",
    NOT_TESTABLE,
    TOO_FEW_SEEDS,
    "not run",
)
assert set(VERDICT_ORDER) == set(CLAIM_VERDICTS)

#: what a verdict class means, where its name alone does not say it
GLOSS = {
    FALSE_ON_PAPER: "the same check on the values the paper itself prints contradicts them",
    DIFFERS: "not decided at the protocol that produced the paper's numbers (seeds still to run); at "
    "another protocol our runs contradict them",
    "inconclusive": "the error bars cannot tell",
    NOT_TESTABLE: "the source does not say what it measured",
    TOO_FEW_SEEDS: "their runs are in the tree, but some at one seed only: no error bar yet, so no verdict",
    "not run": "the runs they need are not in the tree yet",
}

#: the metrics of the protocol comparison: accuracy, and NLL as the authors' code computes
#: it (the definition that produced the paper's column)
PROTOCOL_METRICS = (("Accuracy (%)", "accuracy (%)", 2), ("NLL (code: -log mean p)", "NLL, the code's", 3))

#: the controls of the repulsion: (control, the rows it is compared with, what it isolates)
CONTROLS = (
    ("de-wgd-lr", ("kde-wgd", "sge-wgd", "ssge-wgd"), "DE at WGD's learning rate: the WGD rows less their repulsion"),
    (
        "de-code-wgd-lr",
        ("kde-wgd-code-protocol", "sge-wgd-code-protocol", "ssge-wgd-code-protocol"),
        "the same at the authors' code's protocol",
    ),
    ("svgd-code-num-train", ("svgd-code-protocol",), "SVGD with its repulsion x N, as the code's --num_train"),
    ("fsvgd-code-num-train", ("fsvgd-code-protocol",), "f-SVGD with its repulsion x N"),
)

#: how a control's difference is taken (both control tables)
PAIRED_NOTE = (
    "The difference is the compared row less the control over the seeds both have, paired by seed "
    "(runs of one seed on the same kind of device start from the same particles, so what they share "
    "cancels; a CPU run and a GPU run of a seed draw differently and pair as independent runs, which "
    "the paired test also allows), ± its s.e.; with fewer than two seeds in common, the difference of "
    "the means, with no s.e."
)

#: the controls of the protocol: a code-protocol row trained again with one of its settings
#: changed, (control, the rows it is compared with, what it changes)
PROTOCOL_CONTROLS = (
    (
        "fsvgd-code-logits",
        ("fsvgd-code-protocol",),
        "f-SVGD on the logits (the code's --logit_soft 1) where the block runs it on the softmax outputs",
    ),
    (
        "hyper-de-code-search-accuracy",
        ("hyper-de-code-protocol",),
        "hyper-DE's L2 search ranked by validation accuracy where the block ranks by validation NLL",
    ),
)


def short_protocol(protocol: str) -> str:
    """A protocol's name without its parenthesised details."""
    return str(protocol).split(" (")[0] if isinstance(protocol, str) and protocol else "-"


def scorecard_lines(claims_csv: Path, link: Path) -> list[str]:
    """The claims by verdict class, one line each: its title (linked to its evidence figure
    where kept) and the protocol it was scored at."""
    rows = pd.read_csv(claims_csv, keep_default_na=False)
    rows = rows[rows.get("kind", "claim") != "diagnostic"]
    figures = claims_csv.parent / "figures" / "claims"
    lines = [
        f"{len(rows)} claims of the three papers, compound ones split, each scored at the protocol named after "
        "it; Table 1's at the authors' released code's, which produced the paper's numbers. How a verdict "
        "is reached: [claim scorecard](#claim-scorecard).",
        "",
    ]
    for verdict in VERDICT_ORDER:
        group = rows[rows.verdict == verdict]
        if group.empty:
            continue
        gloss = f": {GLOSS[verdict]}" if verdict in GLOSS else ""
        lines.append(f"**{verdict[0].upper() + verdict[1:]} ({len(group)})**{gloss}")
        lines.append("")
        for _, r in group.iterrows():
            title = r.get("title") or r["claim"]
            figure = figures / f"{r['id']}.png"
            claim = f"[{title}]({link / 'figures' / 'claims' / figure.name})" if figure.is_file() else title
            family = f" · {r['familywise']}" if r.get("familywise") else ""
            lines.append(f"- {claim} · *{short_protocol(r['protocol'])}*{family}")
        lines.append("")
    return lines


def _cell(row: Any) -> str:
    """``mean (n seeds; z)``: ours against the paper, z in the table's error units."""
    if row is None or not row["ours_seeds"]:
        return "not run"
    z = row["difference_in_errors"]
    zt = f"; {z:+.1f}" if isinstance(z, float) and math.isfinite(z) else ""
    return f"{row['ours_mean']:.4g} ({int(row['ours_seeds'])}{zt})"


def protocol_lines(vs_paper: pd.DataFrame, paper_protocol: str, runs: pd.DataFrame | None = None) -> list[str]:
    """Each paper row at the released code's protocol and at Appendix G.4's text, beside
    the paper's value, with the count of rows within 3 error units at each; then the
    controls of the protocol (``runs``: ``table1_runs.csv``, for their paired differences)."""
    table = vs_paper[(vs_paper.dataset == "fashionmnist") & vs_paper.paper_mean.notna()]
    suffix = f"-{paper_protocol}"
    base = [m for m in dict.fromkeys(table.method) if (m + suffix) in set(table.method)]
    if not base:
        return []
    cells = {(r.method, r.metric): r for r in table.itertuples(index=False)}

    def get(method: str, metric: str):
        r = cells.get((method, metric))
        return None if r is None else r._asdict()

    header = ["method"]
    for _, name, _ in PROTOCOL_METRICS:
        header += [f"{name}: paper", "authors' code", "G.4's text"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    within = {"code": 0, "text": 0}
    for method in base:
        cols = [method]
        for metric, _, digits in PROTOCOL_METRICS:
            paper = get(method, metric)
            code, text = get(method + suffix, metric), get(method, metric)
            cols += [f"{paper['paper_mean']:.{digits}f}" if paper else "-", _cell(code), _cell(text)]
        lines.append("| " + " | ".join(cols) + " |")
        for key, r in (("code", get(method + suffix, "Accuracy (%)")), ("text", get(method, "Accuracy (%)"))):
            z = r["difference_in_errors"] if r else float("nan")
            within[key] += bool(isinstance(z, float) and math.isfinite(z) and abs(z) <= 3)
    acc = [get(m, "Accuracy (%)") for m in base]
    short = [r["paper_mean"] - r["ours_mean"] for r in acc if r and r["ours_seeds"]]
    intro = (
        "The paper's Table 1 came from the authors' released code, not from Appendix G.4's text: the code "
        "starts the particles at PyTorch's default initialisation (G.4: from the prior), runs the "
        "function-space rules on softmax outputs and computes NLL as -log of the mean predictive. Both "
        f"protocols were run on FashionMNIST. In accuracy, {within['code']} of {len(base)} paper rows are "
        f"within 3 errors of the paper at the code's protocol, {within['text']} at G.4's text"
        + (
            f", where every row falls {min(short):.1f}-{max(short):.1f} points short"
            if short and min(short) > 0
            else ""
        )
        + ". Each cell: our mean (seeds; difference in errors: the paper's s.e., with ours where we have "
        "two or more seeds). The full comparison, every metric: "
        "[Table 1](#table-1-bnn-image-classification-fashionmnist-ood-mnist)."
    )
    return [intro, "", *lines, *_protocol_control_lines(vs_paper, runs)]


def _protocol_control_lines(vs_paper: pd.DataFrame, runs: pd.DataFrame | None) -> list[str]:
    """The table of :data:`PROTOCOL_CONTROLS` that have run (none: no lines)."""
    rows, _ = control_rows(_accuracy_rows(vs_paper), PROTOCOL_CONTROLS, seed_accuracies(runs), vs_paper=True)
    if not rows:
        return []
    return [
        "",
        "A control of the protocol, FashionMNIST accuracy (%): a row of the code's protocol trained again "
        "with one setting changed. Its accuracy: mean (seeds; difference from the paper's row in errors). "
        + PAIRED_NOTE,
        "",
        "| control | what it changes | its accuracy | compared rows: accuracy (seeds): difference |",
        "| --- | --- | --- | --- |",
        *rows,
    ]


def _acc(table: Mapping[str, Mapping[str, Any]], method: str) -> tuple[float, int] | None:
    """A method's mean accuracy and its seeds (None: not run)."""
    r = table.get(method)
    if r is None or not r["ours_seeds"]:
        return None
    return float(r["ours_mean"]), int(r["ours_seeds"])


def _repulsion_size_lines(repulsion_csv: Path, vs_paper: pd.DataFrame, paper_protocol: str, link: Path) -> list[str]:
    """The repulsion's size against the drift, before and after Adam, at each protocol: over
    the paper's own rows (G.4's text: ``method`` is its ``paper_method``; the code's:
    ``<paper_method>-<paper_protocol>``), never a control's, with the rules at each end."""
    if not repulsion_csv.is_file():
        return []
    rep = pd.read_csv(repulsion_csv)
    rows = vs_paper[vs_paper.method == vs_paper.paper_method]
    labels = dict(zip(rows.method, rows.label))  # the paper's rows and their labels
    rules = {
        "at the authors' code's protocol": {f"{m}-{paper_protocol}": m for m in labels},
        "at G.4's text": {m: m for m in labels},
    }
    parts = []
    for where, names in rules.items():
        for ratio in ("before Adam", "after Adam's scaling"):
            sel = rep[rep.method.isin(list(names)) & (rep.ratio == ratio)].sort_values("mean")
            if sel.empty:
                parts.append(f"{ratio} not logged by the runs {where}")
                continue
            ends = [f"{r['mean']:.1e} ({labels[names[r['method']]]})" for _, r in sel.iloc[[0, -1]].iterrows()]
            span = ends[0] if len(sel) == 1 else f"{ends[0]} to {ends[1]}"
            parts.append(f"{ratio} {span} over {len(sel)} rule{'s' * (len(sel) > 1)} {where}")
    return [
        "The repulsion's size against the likelihood's drift in each step (the mean over a run's logged "
        "points of |repulsion| / |drift|, the paper's repulsive rules, controls aside): " + "; ".join(parts) + ". "
        "Adam divides each coordinate by its own gradient scale, so a repulsion negligible in the raw step can "
        "still move the weights; whether it changes the results is what the controls ask. Per method: "
        f"[`table1_repulsion.csv`]({link / repulsion_csv.name}).",
        "",
    ]


def _accuracy_rows(vs_paper: pd.DataFrame) -> dict[str, Mapping[str, Any]]:
    """FashionMNIST's accuracy rows of ``table1_vs_paper.csv`` by method."""
    rows = vs_paper[(vs_paper.metric == "Accuracy (%)") & (vs_paper.dataset == "fashionmnist")]
    return {r["method"]: r for r in rows.to_dict("records")}


def seed_accuracies(runs: pd.DataFrame | None) -> dict[str, dict[int, float]]:
    """FashionMNIST accuracy (%) per method and seed, from ``table1_runs.csv``'s rows."""
    if runs is None or runs.empty:
        return {}
    rows = runs[runs.dataset == "fashionmnist"]
    return {m: dict(zip(g.seed.astype(int), g.accuracy.astype(float))) for m, g in rows.groupby("method")}


def paired_difference(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[float, float, int] | None:
    """``a - b`` over the seeds both have, paired by seed: (the mean difference, its s.e.,
    the seeds); None below two seeds in common."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    cell = mean_se([a[s] - b[s] for s in seeds])
    return cell.mean, cell.se, cell.n


def control_rows(
    table: Mapping[str, Mapping[str, Any]],
    controls: Sequence[tuple[str, Sequence[str], str]],
    seeds: Mapping[str, Mapping[int, float]] | None = None,
    *,
    vs_paper: bool = False,
) -> tuple[list[str], list[bool]]:
    """One table row per control that has run: its accuracy (with its difference from the
    paper's row in errors, ``vs_paper``) and each compared row's difference from it, paired
    by seed over the seeds both have (runs of one seed on one kind of device start from the
    same particles; the seeds' pairs are independent either way; ``seeds``:
    :func:`seed_accuracies`), ± its s.e.; with fewer than two seeds in common it is the
    difference of the means, with no s.e.; where every seed in common differs by the same
    amount (accuracy is counted in test images), that amount, with no interval
    (:func:`~repens.results.statistics.no_spread`). Also, for each paired difference with an
    interval, whether its 95 % interval (Student's t at seeds - 1 degrees of freedom) holds zero."""
    seeds = seeds or {}
    rows, measured = [], []
    for control, compared, what in controls:
        c = _acc(table, control)
        if c is None:
            continue
        diffs = []
        for method in compared:
            m = _acc(table, method)
            if m is None:
                continue
            paired = paired_difference(seeds.get(method, {}), seeds.get(control, {}))
            if paired is None:
                why = "a single seed" if min(m[1], c[1]) < 2 else "fewer than two seeds in common"
                text = f"{m[0] - c[0]:+.2f} ({why}: no s.e.)"
            elif no_spread(paired[1], max(abs(m[0]), abs(c[0]))):  # a zero-width interval reads nothing
                text = f"{paired[0]:+.2f} in each of the {paired[2]} seeds in common (no spread: no interval)"
            else:
                diff, se, k = paired
                text = f"{diff:+.2f} ± {se:.2f}, paired over {k} seeds"
                measured.append(abs(diff) <= quantile(k - 1) * se)
            diffs.append(f"{method} {m[0]:.2f} ({m[1]}): {text}")
        own = _cell(table[control]) if vs_paper else f"{c[0]:.2f} ({c[1]})"
        rows.append(f"| {control} | {what} | {own} | {'; '.join(diffs) or 'not run'} |")
    return rows, measured


def repulsion_lines(
    repulsion_csv: Path,
    vs_paper: pd.DataFrame,
    paper_protocol: str,
    link: Path,
    runs: pd.DataFrame | None = None,
) -> list[str]:
    """The repulsion's share of the step (before and after Adam's scaling) at each protocol,
    and each control's accuracy against the rows it is compared with (``runs``:
    ``table1_runs.csv``, for the differences paired by seed)."""
    lines = _repulsion_size_lines(repulsion_csv, vs_paper, paper_protocol, link)
    rows, measured = control_rows(_accuracy_rows(vs_paper), CONTROLS, seed_accuracies(runs))
    if rows:
        lines += [
            "The controls, FashionMNIST accuracy (%), mean (seeds). "
            + PAIRED_NOTE
            + (
                f" Of the {len(measured)} paired differences, {sum(measured)} have a 95 % interval (Student's t "
                "at seeds - 1 degrees of freedom) that holds zero: there the repulsion changes the accuracy by "
                "less than these seeds can tell."
                if measured
                else ""
            ),
            "",
            "| control | what it isolates | its accuracy | compared rows: accuracy (seeds): difference |",
            "| --- | --- | --- | --- |",
            *rows,
        ]
    return lines


def answers_lines(kept: Path, link: Path, config: Mapping[str, Any]) -> list[str]:
    """The page's first sections: what held, why Table 1 differs, what the repulsion does."""
    protocol = (config.get("experiments", {}).get("image", {}) or {}).get("paper_protocol") or "code-protocol"
    lines: list[str] = []
    if (kept / "claims.csv").is_file():
        lines += ["## What held", "", *scorecard_lines(kept / "claims.csv", link), ""]
    if (kept / "table1_vs_paper.csv").is_file():
        vs_paper = pd.read_csv(kept / "table1_vs_paper.csv")  # read once, for both sections
        runs = pd.read_csv(kept / "table1_runs.csv") if (kept / "table1_runs.csv").is_file() else None
        why = protocol_lines(vs_paper, protocol, runs)
        if why:
            lines += ["## Why Table 1 differs from the paper", "", *why, ""]
        what = repulsion_lines(kept / "table1_repulsion.csv", vs_paper, protocol, link, runs)
        if what:
            lines += ["## What the repulsion does", "", *what, ""]
    return lines


__all__: Sequence[str] = (
    "answers_lines",
    "control_rows",
    "paired_difference",
    "seed_accuracies",
    "scorecard_lines",
    "protocol_lines",
    "repulsion_lines",
    "short_protocol",
)
