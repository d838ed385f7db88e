"""The claim scorecard: each experimental claim of the main paper (Sec. 4 of D'Angelo &
Fortuin 2021) and the anchored / Langevin claims of the two seed papers the pipeline
tests, written as a check over result files, with the figures it rests on and a verdict.

It reads tables only (never trains):

* ``results/synthetic/metrics.csv`` (Figure 2, F.1: :mod:`repens.report.synthetic`) and
  ``results/synthetic/sample_quality.json`` beside it (the noise floor's spread over its
  draws, written by :mod:`repens.summaries.synthetic`),
* ``results/toy/distance_to_hmc.csv`` (Figures 1, 3 against HMC: :mod:`repens.report.toy`;
  one row per method, or per method and seed, or ``<metric>_mean/_se/_n`` columns),
* ``results/table1.csv`` (Table 1: :mod:`repens.report.image`),
* ``results/table2_uci.csv`` (Table 2: :mod:`repens.report.uci`), when present,
* the transcribed values of the papers: ``workflow/resources/table1_paper.csv`` and
  ``workflow/resources/table2_seeds.csv``,
* ``results/convergence.csv`` (:mod:`repens.summaries.convergence`: the :mod:`repens.summaries.converged`
  verdict of each Table 1 / Table 2 run, from its ``metrics.json`` and training log), when given.

The scale of a table (``quick`` or ``paper``) comes from its ``scale`` column, else from
its provenance sidecar ``<csv>.provenance.json`` (:mod:`repens.jobs.provenance`).

**The verdict rule** (:func:`compare`, :func:`combine`). Every claim is a set of
comparisons between two quantities, each a mean with a standard error (over seeds, or
splits for UCI; a published value with its printed error; an exact constant with none).
Each quantity's interval is mean ± t s.e., t Student's quantile for a :data:`COVERAGE`
(95%) interval at the estimate's ``n - 1`` degrees of freedom (:meth:`Estimate.k`: 12.7 at
n = 2, 2.78 at n = 5, 2.09 at n = 20; 1.96 for a printed error of unknown n); a printed
value's interval is widened by its rounding (:attr:`Estimate.rounding`).

* an ordering (``a > b``, ``a < b``): *reproduced* if the intervals do not overlap and
  the difference has the claimed sign, *contradicted* if they do not overlap and it has
  the other sign, *inconclusive* if they overlap. Disjoint intervals mean
  ``|a - b| > t_a se_a + t_b se_b``, typically more than the difference's own interval
  ``t sqrt(se_a^2 + se_b^2)`` asks: a conservative test, which suits claims that each rest
  on many comparisons;
* an agreement (``a ~ b``: "within error bars", "comparable", "no difference") is an
  equivalence test (two one-sided tests) against the claim's margin ``delta``
  (:attr:`Claim.margin` says which and why): the difference ``a - b`` has the interval
  ``(a - b) ± t sqrt(se_a^2 + se_b^2)``, t at Welch's degrees of freedom (plus the printed
  values' rounding); *reproduced*
  when that whole interval lies within ``±delta``, *contradicted* when it lies wholly
  outside, *inconclusive* otherwise. Wide error bars therefore make agreement
  inconclusive, never reproduced;
* ``a <= b`` / ``a >= b`` ("not worse than") are agreements in disguise, one-sided
  (non-inferiority): ``a <= b`` is *reproduced* when the interval of ``a - b`` lies wholly
  below ``+delta``, *contradicted* when wholly above, *inconclusive* otherwise (``>=``
  mirrored);
* the *detectable difference* of a comparison (:attr:`Comparison.detectable`) is the
  half-width of the interval the rule reads: ``t sqrt(se_a^2 + se_b^2)`` for an agreement,
  ``t_a se_a + t_b se_b`` for an ordering (plus rounding). An agreement whose detectable
  difference exceeds its margin cannot be reproduced at the measured error bars;
* *not run*: a quantity is missing (its file, or its row), or it was made at a scale
  other than ``paper``;
* *too few seeds*: both quantities exist at the paper's scale, but one rests on fewer than
  2 seeds (no standard error): its runs are in, the verdict waits for more seeds;
* *inconclusive (not converged: <reason>)*: a comparison that ran, one of whose quantities
  rests on runs that did not converge (:attr:`Estimate.converged` False), whatever its
  figures; unknown convergence (None) is shown ("[convergence unknown]") but does not block.

A claim's verdict combines its comparisons: *contradicted* if any is, else *not run* if
any is, else *too few seeds* if any is, else *reproduced* if all are, else *inconclusive*. Only the papers' claims
(:data:`CLAIMS`) are claims; checks of our own runs (:data:`DIAGNOSTICS`, e.g. whether
DRLE's repulsion acts at the lambda our config chose) are evaluated the same way and
shown apart, never counted in the claims' headline. Where the source paper
prints the numbers a claim rests on (Table 1; the seed papers' UCI tables), the same
check on the paper's own numbers is given beside ours (``source_verdict``): how strong
the claim is in its own paper at this rule.

:func:`write_scorecard` writes ``results/claims.csv`` (the papers' claims),
``claims_diagnostics.csv`` beside it (the diagnostics, same columns),
``claims_comparisons.csv`` (one row per comparison of every claim and diagnostic, with its
numbers: what the evidence figures of :mod:`repens.report.claim_figures` draw) and
``claims.md`` (a table of the claims, one of the diagnostics and a legend of the rule).
:func:`write_scorecard_html` writes the HTML of the Snakemake report from those CSVs and
the evidence figures (files only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repens.report.claim_list import (  # noqa: F401 (the scorecard's names, in one place)
    CLAIMS,
    COUNTERPARTS,
    DIAGNOSTICS,
    FUNCTION_SPACE,
    FWGD,
    LANGEVIN_RUNS,
    POSTER_DATASETS,
    TABLE1_METHODS,
    UCI_DATASETS,
    WEIGHT_SPACE,
    WGD,
    Claim,
)
from repens.report.evidence import (  # noqa: F401 (the scorecard's names, in one place)
    DATASET_LABELS,
    FILES,
    METRIC_LABELS,
    Evidence,
    PaperEvidence,
    noise_floor_se,
    shown_path,
    synthetic_summary_path,
    table_scale,
)
from repens.report.verdicts import (  # noqa: F401 (the scorecard's names, in one place)
    EXACT,
    NOT_CONVERGED,
    PUBLISHED,
    RELATIONS,
    TOO_FEW_SEEDS,
    UNSCORED,
    VERDICTS,
    Comparison,
    Estimate,
    as_run,
    combine,
    compare,
    detectable_summary,
    familywise,
    familywise_words,
    summary,
)
from repens.results.statistics import COVERAGE, quantile

__all__ = [
    "COVERAGE",
    "quantile",
    "VERDICTS",
    "TOO_FEW_SEEDS",
    "UNSCORED",
    "RELATIONS",
    "Estimate",
    "Comparison",
    "compare",
    "combine",
    "detectable_summary",
    "headline",
    "diagnostics_path",
    "comparisons_path",
    "COMPARISON_COLUMNS",
    "comparison_rows",
    "Claim",
    "CLAIMS",
    "CLAIM_VERDICTS",
    "NOT_TESTABLE",
    "DIAGNOSTICS",
    "Evidence",
    "PaperEvidence",
    "table_scale",
    "evaluate",
    "scorecard_rows",
    "scorecard_markdown",
    "write_scorecard",
    "scorecard_html",
    "write_scorecard_html",
]

# --------------------------------------------------------------------------- the scorecard

#: a claim that cannot be tested (:attr:`repens.report.claim_list.Claim.untestable` says why)
NOT_TESTABLE = "not testable"
#: a claim that the same check contradicts on the values its own paper prints: a finding
#: about the claim, whatever our runs show (their verdict is kept beside it, ``runs_verdict``)
FALSE_ON_PAPER = "false on the paper's own numbers"
#: a claim not run (or with too few seeds) at the protocol that produced the paper's numbers whose runs under
#: another protocol contradict it: a finding about that protocol, not a verdict on the paper
DIFFERS = "differs under another protocol"
#: a claim's verdicts: its comparisons' (:data:`VERDICTS`, at the protocol that produced the
#: paper's numbers), differs under another protocol, false on the paper's own numbers, or
#: not testable
CLAIM_VERDICTS = (*VERDICTS, DIFFERS, FALSE_ON_PAPER, NOT_TESTABLE)
#: Table 1's protocols: the Appendix G.4 text's (the image experiment's own methods) and the
#: released code's (the variant config.yaml names ``paper_protocol``, read with the code's
#: metric definitions); the paper's Table 1 numbers came from the latter (docs/image.md)
G4_TEXT = "Appendix G.4's text (prior initialisation; our metric definitions)"
CODE_PROTOCOL = (
    "the authors' released code (Table 1 block {variant}: PyTorch's default initialisation, the "
    "function-space rules on softmax outputs; the code's NLL, ECE and MD ratio)"
)


@dataclass
class Result:
    claim: Claim
    comparisons: list[Comparison]
    verdict: str
    source_comparisons: list[Comparison] = field(default_factory=list)
    source_verdict: str = ""
    #: the protocol the comparisons' runs follow
    protocol: str = ""
    #: the same check on runs of another protocol (a Table 1 claim's other block), its name
    other_protocol: str = ""
    other_comparisons: list[Comparison] = field(default_factory=list)
    other_verdict: str = ""


def evaluate(
    evidence: Evidence,
    claims: Sequence[Claim] = CLAIMS,
    table1_protocol: str = G4_TEXT,
    other: tuple[str, Evidence] | None = None,
) -> list[Result]:
    """Run every claim's check on our results and, where the paper prints the numbers,
    on the paper's; a Table 1 claim's also on ``other`` (another protocol's name and
    evidence) where given. ``table1_protocol`` names the protocol of ``evidence``'s Table 1
    block (the other claims name theirs, :attr:`Claim.protocol`).

    A claim's verdict: not testable (:attr:`Claim.untestable`), else false on the paper's own
    numbers (:data:`FALSE_ON_PAPER`: the check on them is contradicted), else its comparisons'
    (:func:`combine`), except that a claim not run at its protocol whose runs under the other
    protocol contradict it :data:`DIFFERS` (the other protocol's verdict is shown beside
    every Table 1 claim)."""
    out = []
    for claim in claims:
        scored = (lambda cs: cs) if claim.limit else (lambda cs: [as_run(c) for c in cs])
        comparisons = scored(claim.check(evidence))
        table1 = "table1" in claim.files
        protocol = table1_protocol if table1 else claim.protocol
        result = Result(claim, comparisons, combine(comparisons), protocol=protocol)
        if claim.reference:
            paper = PaperEvidence(claim.reference, evidence.paths, evidence.labels, evidence.group_spec)
            result.source_comparisons = claim.check(paper)
            result.source_verdict = combine(result.source_comparisons)
        if table1 and other is not None:
            result.other_protocol, other_evidence = other
            result.other_comparisons = scored(claim.check(other_evidence))
            result.other_verdict = combine(result.other_comparisons)
        if claim.untestable:
            result.verdict = NOT_TESTABLE
        elif result.source_verdict == "contradicted":
            result.verdict = FALSE_ON_PAPER
        elif result.verdict in UNSCORED and result.other_verdict == "contradicted":
            result.verdict = DIFFERS
        out.append(result)
    return out


def scorecard_rows(results: Sequence[Result], files: Mapping[str, Path | str | None]) -> list[dict[str, Any]]:
    """One CSV row per claim."""
    rows = []
    for r in results:
        c = r.claim
        family, holds = familywise_reading(r)
        rows.append(
            {
                "id": c.id,
                "title": c.title or c.words,
                "source": c.source,
                "claim": c.words,
                "reading": c.reading,
                "files": " ".join(shown_path(files.get(k) or FILES[k]) for k in c.files),
                "verdict": r.verdict,
                "runs_verdict": combine(r.comparisons),
                "protocol": r.protocol,
                "other_protocol": f"{r.other_protocol}: {r.other_verdict}" if r.other_protocol else "",
                "other_figures": summary(r.other_comparisons) if r.other_protocol else "",
                "figures": _verdict_reason(r) + summary(r.comparisons),
                "source_verdict": r.source_verdict or "n/a",
                "source_figures": summary(r.source_comparisons) if r.source_comparisons else "",
                **{f"n_{v.replace(' ', '_')}": sum(x.verdict == v for x in r.comparisons) for v in VERDICTS},
                "comparisons": " | ".join(x.text() for x in r.comparisons),
                "kind": "diagnostic" if c.diagnostic else "claim",
                "margin": c.margin,
                "detectable": detectable_summary(r.comparisons),
                "familywise": family,
                "familywise_holds": holds,
            }
        )
    return rows


def deciding(r: Result) -> list[Comparison]:
    """The comparisons a contradiction-class verdict rests on: the paper's printed values' for
    :data:`FALSE_ON_PAPER`, the other protocol's for :data:`DIFFERS`, the runs' for
    contradicted; none for any other verdict."""
    if r.verdict == FALSE_ON_PAPER:
        return list(r.source_comparisons)
    if r.verdict == DIFFERS:
        return list(r.other_comparisons)
    return list(r.comparisons) if r.verdict == "contradicted" else []


def familywise_reading(r: Result) -> tuple[str, str]:
    """``(text, holds)`` of the comparisons ``r``'s verdict rests on (:func:`deciding`), from one
    :func:`familywise`: the reading in words (:func:`familywise_words`), saying whose the
    comparisons are where they are not our runs' at the claim's protocol, and "yes" / "no",
    whether the contradiction stands at the family-wise level ('' and '' without one)."""
    reading = familywise(deciding(r))
    contradicted, holding, _, _ = reading
    if not contradicted:
        return "", ""
    where = {FALSE_ON_PAPER: "on the paper's printed values, ", DIFFERS: "under the other protocol, "}
    return f"{where.get(r.verdict, '')}{familywise_words(reading)}", "yes" if holding else "no"


def _verdict_reason(r: Result) -> str:
    """What opens a claim's figures cell where its verdict is not its runs' own."""
    if r.claim.untestable:
        return f"not testable: {r.claim.untestable}. "
    if r.verdict == FALSE_ON_PAPER:
        return (
            f"false on the paper's own numbers: the same check on its printed values is contradicted "
            f"({summary(r.source_comparisons, limit=2)}); our runs: {combine(r.comparisons)}. "
        )
    if r.verdict == DIFFERS:
        return (
            f"differs under another protocol: under {r.other_protocol} the check is contradicted "
            f"({summary(r.other_comparisons, limit=2)}); at {r.protocol}: "
        )
    return ""


LEGEND = (
    "Each claim is checked as comparisons of two quantities, each a mean ± standard error (over seeds; over "
    "splits for UCI; a paper's printed error; none for a constant). Each quantity's interval is mean ± t s.e., "
    f"t Student's {(1 + COVERAGE) / 2:g} quantile at n - 1 degrees of freedom ({quantile(1):.3g} at n = 2, "
    f"{quantile(4):.3g} at n = 5, {quantile(19):.3g} at n = 20; {quantile(math.inf):.3g} for a printed error of "
    f"unknown n): a {COVERAGE:.0%} interval for a normal mean whose error is estimated from n values. A printed "
    "value's interval is widened by half a unit of its last digit, its error taken as at least that. An ordering "
    "(a > b) is **reproduced** when the intervals are disjoint and the difference has the claimed sign, "
    "**contradicted** when they are disjoint with the other sign, **inconclusive** when they overlap (disjoint "
    "intervals: a difference of more than t_a se_a + t_b se_b, a conservative test for claims that rest on many "
    "comparisons). An agreement (a ~ b: 'within error bars', 'comparable', 'no difference') is an equivalence "
    "test against the claim's margin delta (stated with its reason in the claim's cell): the interval of the "
    "difference, (a - b) ± t sqrt(se_a^2 + se_b^2), t at Welch's degrees of freedom, is **reproduced** when it "
    "lies wholly within ±delta, **contradicted** when wholly outside, **inconclusive** otherwise, so wide error "
    "bars never make an agreement. a <= b ('not worse') is the one-sided form: reproduced when that interval lies "
    "below +delta, contradicted when wholly above. "
    "'Detectable': the half-width of the interval the rule reads (the smallest difference the error bars can "
    "detect: for an ordering t_a se_a + t_b se_b); where it exceeds an agreement's margin, that comparison cannot "
    "be reproduced at the measured error bars; such an inconclusive agreement says at which n it cannot be decided "
    "and about which n would decide it (or that none would: a printed error alone wider than the margin). "
    "**Paired**: where both quantities come from runs of the same seeds (the toys and the synthetic targets, whose "
    "runs of a seed share its data, target draws and HMC reference; Table 1's cells, from the runs file beside it: "
    "runs paired by the seed that starts each method's stream, on common test sets), the rule reads the interval of "
    "the seeds' differences, mean(d) ± t s.e.(d) at n - 1 degrees of freedom: an ordering is reproduced when it lies "
    "wholly on the claimed side of 0, contradicted when wholly on the other ('paired over n seeds' in the figures); "
    "elsewhere (a printed value, a cell that is not the mean of its runs, rows whose seed sets differ, Table 2's "
    "means over splits) the unpaired rule above. **No spread**: a comparison whose seeds' differences are all equal, "
    "or resting on a quantity from runs whose seeds all gave one value (accuracy is counted in test images, so this "
    "happens by chance), has a zero-width interval that would decide anything: it is inconclusive and says why. "
    "**not run**: a quantity's file or row is missing, or it was made at a scale other than paper. **too "
    "few seeds**: both quantities are in, at the paper's scale, but one rests on fewer than 2 seeds (no standard "
    "error): the verdict waits for more seeds. **Convergence**: a claim about a fixed-budget protocol (Table 1's "
    "50,000 steps, Pearce et al.'s epochs: every claim here) is scored as run, a comparison resting on a Table 1 / "
    "Table 2 row that did not converge (results/convergence.csv: a Table 1 row whose mean over seeds still drifts, "
    "or one of whose runs degraded late; a Table 2 row whose run did not converge) marked '[caveat, not converged: "
    "...]'; a claim about a method's limit would be **inconclusive (not converged)** there, whatever its figures. "
    "Unknown convergence is shown ('[convergence unknown]') but does not block. A claim is contradicted if any of "
    "its comparisons is, else not run if any is, else too few seeds if any is, else reproduced if all are, else "
    "inconclusive. **Family-wise** (beside a contradicted, false-on-the-paper's-numbers or differs verdict): a claim "
    "of m comparisons is contradicted when any one is, so if it held, its m comparisons could wrongly contradict it "
    "up to m times as often as one; the contradiction is checked again with every interval at 1 - 0.05/m coverage "
    "(Bonferroni over all m, those without a verdict yet included) and 'holds' or 'does not hold' there. A "
    "contradiction that does not hold family-wise leans against the claim but does not decide it at these seeds. "
    "Reproduced needs every comparison (an intersection-union test) and needs no such correction. "
    "'On the paper's numbers': the same check on the values the source paper prints (n/a where it "
    "shows a figure only, or where the claim is about matching them). Diagnostics are checks of our own runs, not "
    "claims of a paper: judged the same way, listed apart, not counted among the claims. **not testable**: a claim "
    "whose test the evidence cannot make (the reason in its figures cell); its comparisons are shown, not judged. "
    "**false on the paper's own numbers**: the same check, run on the values the source paper prints, contradicts "
    "the claim: a finding about the claim, not a failed reproduction; what our runs say is kept beside it (figures "
    "cell, the CSV's runs_verdict). Every claim names the protocol its runs follow ('scored at'): Table 1's claims "
    "are scored at the protocol that produced the paper's numbers (the authors' released code, with the code's "
    "metric definitions), and the same check on the runs at Appendix G.4's text is shown beside them ('under another "
    "protocol'): a finding about that protocol, not a verdict on the paper. **differs under another protocol**: a "
    "claim not run, or with too few seeds, at the paper's protocol that the other protocol's runs contradict."
)


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _md_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| # | claim | source | scored at | figures | detectable | verdict | on the paper's numbers "
        "| under another protocol |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(rows, 1):
        margin = f"; margin {r['margin']}" if r.get("margin") else ""
        claim = f'**{r["id"]}**: "{r["claim"]}" ({r["reading"]}{margin})'
        lines.append(
            "| "
            + " | ".join(
                _md_cell(x)
                for x in (
                    str(i),
                    claim,
                    r["source"],
                    r.get("protocol", ""),
                    r["figures"],
                    r.get("detectable", ""),
                    f"**{r['verdict']}**" + (f" ({r['familywise']})" if r.get("familywise") else ""),
                    r["source_verdict"],
                    r.get("other_protocol", ""),
                )
            )
            + " |"
        )
    return lines


def headline(rows: Sequence[Mapping[str, Any]]) -> str:
    """ "N claims: x reproduced, ...": the papers' claims only (diagnostics left out)."""
    claims = [r for r in rows if r.get("kind", "claim") != "diagnostic"]

    def count(v: str) -> str:
        group = [r for r in claims if r["verdict"] == v]
        judged = [r for r in group if r.get("familywise_holds") in ("yes", "no")]
        held = sum(r["familywise_holds"] == "yes" for r in judged)
        return f"{len(group)} {v}" + (f" ({held} of them family-wise)" if judged else "")

    counts = ", ".join(count(v) for v in CLAIM_VERDICTS if v in VERDICTS or any(r["verdict"] == v for r in claims))
    return f"{len(claims)} claims: {counts}"


def scorecard_markdown(
    rows: Sequence[Mapping[str, Any]], scales: Mapping[str, str | None], title: str = "Claim scorecard", intro: str = ""
) -> str:
    """``claims.md``: the papers' claims (claim, source, figures, detectable difference,
    verdict, the paper's own), the diagnostics apart, and the legend; ``intro`` opens the
    first paragraph."""
    made = "; ".join(f"{key}: {scale or 'absent'}" for key, scale in scales.items())
    claims = [r for r in rows if r.get("kind", "claim") != "diagnostic"]
    diagnostics = [r for r in rows if r.get("kind") == "diagnostic"]
    opening = f"{intro} " if intro else ""
    lines = [f"# {title}", "", f"{opening}{headline(rows)}. Scale of each result table: {made}.", ""]
    lines += _md_table(claims)
    if diagnostics:
        counts = ", ".join(
            f"{sum(r['verdict'] == v for r in diagnostics)} {v}"
            for v in CLAIM_VERDICTS
            if any(r["verdict"] == v for r in diagnostics)
        )
        lines += [
            "",
            "## Diagnostics (checks of our own runs, not claims)",
            "",
            f"{len(diagnostics)} diagnostics: {counts}. Not counted among the claims above.",
            "",
        ]
        lines += _md_table(diagnostics)
    lines += ["", "## Verdict rule", "", LEGEND, ""]
    return "\n".join(lines)


def diagnostics_path(out_csv: Path | str) -> Path:
    """Where the diagnostics' CSV goes: ``<stem>_diagnostics.csv`` beside ``out_csv``."""
    out_csv = Path(out_csv)
    return out_csv.with_name(f"{out_csv.stem}_diagnostics{out_csv.suffix or '.csv'}")


def comparisons_path(out_csv: Path | str) -> Path:
    """Where the per-comparison CSV goes: ``<stem>_comparisons.csv`` beside ``out_csv``."""
    out_csv = Path(out_csv)
    return out_csv.with_name(f"{out_csv.stem}_comparisons{out_csv.suffix or '.csv'}")


#: the columns of ``claims_comparisons.csv`` (:func:`comparison_rows`)
COMPARISON_COLUMNS = (
    "claim",
    "kind",
    "claim_verdict",
    "claim_familywise",
    "index",
    "a",
    "relation",
    "b",
    "a_value",
    "a_se",
    "a_n",
    "b_value",
    "b_se",
    "b_n",
    "difference",
    "detectable",
    "margin",
    "paired",
    "verdict",
    "reason",
    "caveat",
)


def comparison_rows(results: Sequence[Result]) -> list[dict[str, Any]]:
    """One row per comparison of each result (:data:`COMPARISON_COLUMNS`): the claim id,
    claim or diagnostic, the claim's verdict and its family-wise reading (:func:`familywise_reading`),
    the comparison's index, both quantities (label, mean, s.e., n),
    ``difference`` (a - b), ``detectable`` (the half-width of the interval the rule reads),
    ``margin`` (empty for an ordering), the verdict and its reason (nan: not run)."""
    rows = []
    for r in results:
        family, _ = familywise_reading(r)
        for i, c in enumerate(r.comparisons, 1):
            rows.append(
                {
                    "claim": r.claim.id,
                    "kind": "diagnostic" if r.claim.diagnostic else "claim",
                    "claim_verdict": r.verdict,
                    "claim_familywise": family,
                    "index": i,
                    "a": c.a.label,
                    "relation": c.relation,
                    "b": c.b.label,
                    "a_value": c.a.value,
                    "a_se": c.a.se,
                    "a_n": c.a.n,
                    "b_value": c.b.value,
                    "b_se": c.b.se,
                    "b_n": c.b.n,
                    "difference": c.difference,
                    "detectable": c.detectable,
                    "margin": "" if c.margin is None else c.margin,
                    "paired": c.paired,
                    "verdict": c.verdict,
                    "reason": c.reason,
                    "caveat": c.caveat,
                }
            )
    return rows


def _protocols(
    files: Mapping[str, Path | str | None],
    labels: Mapping[str, str] | None,
    groups: Mapping[str, Sequence[Any]] | None,
    variant: str | None,
    paper_protocol: str | None,
) -> tuple[Evidence, str, tuple[str, Evidence] | None]:
    """The evidence Table 1's claims are scored on, its protocol's name, and the other
    protocol's (name, evidence) shown beside them, if any (:func:`write_scorecard`)."""
    if variant:
        return Evidence(files, labels, groups, variant), f"the variant {variant}", None
    g4 = Evidence(files, labels, groups)
    if not paper_protocol:
        return g4, G4_TEXT, None
    code = Evidence(files, labels, groups, paper_protocol, code_metrics=True)
    return code, CODE_PROTOCOL.format(variant=paper_protocol), (G4_TEXT, g4)


def write_scorecard(
    files: Mapping[str, Path | str | None],
    out_csv: Path | str,
    out_md: Path | str,
    out_html: Path | str | None = None,
    labels: Mapping[str, str] | None = None,
    claims: Sequence[Claim] = CLAIMS,
    diagnostics: Sequence[Claim] = DIAGNOSTICS,
    groups: Mapping[str, Sequence[Any]] | None = None,
    variant: str | None = None,
    paper_protocol: str | None = None,
) -> list[dict[str, Any]]:
    """Evaluate every claim and diagnostic on the tables in ``files`` (keys of
    :data:`FILES`; a missing path or file makes its checks "not run"), with the method
    ``groups`` of the config (default :data:`repens.report.evidence.DEFAULT_GROUPS`), and write the CSV
    of the claims (``out_csv``), that of the diagnostics (:func:`diagnostics_path`), that
    of the comparisons (:func:`comparisons_path`), the Markdown and, when ``out_html`` is
    given, the HTML without figures (:func:`write_scorecard_html` adds them). Returns the
    rows, claims first. ``variant``: Table 1's claims alone, on the variant's methods
    (:class:`repens.report.evidence.Evidence`), no diagnostics. ``paper_protocol``: the
    variant whose Table 1 block follows the protocol that produced the paper's numbers (the
    released code's): Table 1's claims are scored on it with the code's metric definitions,
    and on the image experiment's own methods (Appendix G.4's text) as another protocol."""
    import pandas as pd

    from repens.core.atomic import write_text_atomic
    from repens.report.tables import plain_table, write_table

    evidence, table1_protocol, other = _protocols(files, labels, groups, variant, paper_protocol)
    if variant:
        claims, diagnostics = [c for c in claims if "table1" in c.files], []
    results = evaluate(evidence, claims, table1_protocol, other)
    diag_results = evaluate(evidence, diagnostics, table1_protocol, other)
    rows = scorecard_rows(results, files)
    diag_rows = scorecard_rows(diag_results, files)
    scales = {}
    for key in ("synthetic", "toy", "table1", "uci"):
        table, _ = evidence.rows(key)
        scales[key] = None if table is None else evidence._scale(key, table)
    columns = list((rows or diag_rows)[0]) if rows or diag_rows else ["id"]
    frame = pd.DataFrame(rows, columns=columns)
    diag_frame = pd.DataFrame(diag_rows, columns=columns)
    write_table(plain_table(frame, title="Claim scorecard"), out_csv=out_csv)
    write_table(plain_table(diag_frame, title="Claim scorecard: diagnostics"), out_csv=diagnostics_path(out_csv))
    each = pd.DataFrame(comparison_rows([*results, *diag_results]), columns=list(COMPARISON_COLUMNS))
    write_table(plain_table(each, title="Claim scorecard: comparisons"), out_csv=comparisons_path(out_csv))
    titled = (
        {
            "title": f"Claim scorecard: Table 1's claims at the variant {variant}",
            "intro": f"Each method m of a claim is read as the variant's method m-{variant} (config.yaml).",
        }
        if variant
        else {}
    )
    write_text_atomic(Path(out_md), scorecard_markdown(rows + diag_rows, scales, **titled))
    if out_html is not None:
        write_text_atomic(Path(out_html), scorecard_html(frame, diag_frame))
    return rows + diag_rows


def _figure_html(claim_id: str, verdict: str, png: Path) -> str:
    import base64
    import html

    data = base64.b64encode(png.read_bytes()).decode("ascii")
    name = html.escape(claim_id)
    return (
        f'<figure id="evidence-{name}" style="margin: 1em 0"><img src="data:image/png;base64,{data}" '
        f'alt="evidence for {name}" style="max-width: 100%"><figcaption>{name}: {html.escape(verdict)}'
        "</figcaption></figure>"
    )


#: the scorecard page's columns (``claims.csv``'s), in order; the shown names where they differ
HTML_COLUMNS = ("id", "source", "claim", "margin", "figures", "detectable", "verdict", "familywise", "source_verdict")
HTML_NAMES = {"familywise": "family-wise", "source_verdict": "on the paper's numbers"}


def _scorecard_table_html(table: Any, title: str, note: str) -> str:
    """One table of the scorecard page (:data:`HTML_COLUMNS`, those ``table`` has): the verdicts
    in bold, long text wrapped (:func:`repens.report.tables.to_html`), so the verdicts are
    seen on a 1,500-pixel screen."""
    import pandas as pd

    from repens.report.tables import plain_table, to_html

    shown = table[[c for c in HTML_COLUMNS if c in table]].rename(columns=HTML_NAMES).reset_index(drop=True)
    bold = pd.DataFrame(False, index=shown.index, columns=shown.columns)
    bold["verdict"] = True
    return to_html(plain_table(shown, title=title, note=note, bold=bold, wrap=True))


def scorecard_html(frame: Any, diag_frame: Any, figures: Path | str | None = None) -> str:
    """The scorecard page: the claims' table (verdicts in bold, long text wrapped, the
    legend), the diagnostics' apart and, with ``figures`` (the folder of
    :mod:`repens.report.claim_figures`), each claim's evidence figure embedded as a
    base64 ``<img>`` (a self-contained page; a claim without its PNG is listed as such)."""
    import html as html_text

    rows = frame.to_dict("records")
    # the legend without its Markdown emphasis
    title = f"Claim scorecard (beyond the paper): {headline(rows)}"
    page = _scorecard_table_html(frame, title, LEGEND.replace("**", ""))
    extra = ""
    if len(diag_frame):  # a section of its own (its styles and table in the same page; ids apart)
        diag = _scorecard_table_html(
            diag_frame, "Diagnostics: checks of our own runs, not claims (not counted above)", ""
        ).replace("T_repens", "T_repens_diagnostics")
        style = diag.split("<head>", 1)[1].split("</head>", 1)[0]
        body = diag.split("<body>", 1)[1].rsplit("</body>", 1)[0]
        head, rest = page.split("</head>", 1)
        page = f"{head}{style}</head>{rest}"
        extra += f"<h2>Diagnostics (checks of our own runs, not claims)</h2>{body}"
    if figures is not None:
        folder = Path(figures)
        items = []
        for r in [*rows, *diag_frame.to_dict("records")]:
            png = folder / f"{r['id']}.png"
            items.append(
                _figure_html(str(r["id"]), str(r["verdict"]), png)
                if png.is_file()
                else f"<p>{html_text.escape(str(r['id']))}: no figure ({html_text.escape(str(png))})</p>"
            )
        extra += "<h2>Evidence: each comparison's difference a - b with the interval the rule reads</h2>" + "".join(
            items
        )
    if extra:
        main_body, tail = page.rsplit("</body>", 1)
        page = f"{main_body}{extra}</body>{tail}"
    return page


def write_scorecard_html(claims_csv: Path | str, out_html: Path | str, figures: Path | str | None = None) -> str:
    """``claims.html`` from the files only: ``claims_csv`` and the diagnostics' CSV beside
    it (:func:`diagnostics_path`, written by :func:`write_scorecard`) and the evidence
    figures in ``figures`` (one ``<claim id>.png`` each)."""
    import pandas as pd

    from repens.core.atomic import write_text_atomic

    def read(path: Path) -> pd.DataFrame:
        if not path.is_file():
            from repens.results.files import ResultFileMissing

            raise ResultFileMissing(f"{path}: no such scorecard file (python -m repens claims writes it)")
        return pd.read_csv(path, dtype=str, keep_default_na=False)

    claims_csv = Path(claims_csv)
    page = scorecard_html(read(claims_csv), read(diagnostics_path(claims_csv)), figures)
    write_text_atomic(Path(out_html), page)
    return page
