"""The verdict rule of the claim scorecard (:mod:`repens.report.claims`): estimates, their
comparisons and how a claim's comparisons combine into its verdict."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from repens.results.statistics import COVERAGE, bonferroni_coverage, no_spread, quantile, welch_dof

#: a comparison whose quantities all exist, at the paper's scale, but one of which rests on
#: fewer than two seeds: no standard error, so no verdict until more seeds are in
TOO_FEW_SEEDS = "too few seeds"
VERDICTS = ("reproduced", "contradicted", "inconclusive", TOO_FEW_SEEDS, "not run")
#: the verdicts of a comparison that has no figures to judge (a quantity absent or seedless)
UNSCORED = (TOO_FEW_SEEDS, "not run")
#: relation -> how the figures read it
RELATIONS = {">": ">", "<": "<", "~": "~", "<=": "<=", ">=": ">="}
#: scale of a value printed in a paper (its error as printed) and of an exact constant
PUBLISHED = "published"
EXACT = "exact"
#: below this ||repulsion|| / ||drift|| (averaged over training) a repulsion is negligible
NEGLIGIBLE_REPULSION = 0.05
#: a comparison's reason when its verdict is inconclusive because a run did not converge
NOT_CONVERGED = "not converged"
#: a comparison's reason when its verdict is inconclusive because a spread measured over two or
#: more seeds is exactly zero: every seed gives the same value (or, paired, the same
#: difference). A metric counted in steps (accuracy: one test image is 0.01 points on 10,000)
#: does that by chance, with a true spread below its step; a zero-width interval would then
#: decide any difference at any coverage
ZERO_SPREAD = "no spread"


# --------------------------------------------------------------------------- verdicts


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _num(x: float, digits: int = 5) -> str:
    if not _finite(x):
        return "nan"
    return f"{x:.{digits}g}"


@dataclass(frozen=True)
class Estimate:
    """One quantity a claim compares: mean ± s.e. over ``n`` seeds (or splits).

    ``scale``: the scale of the run that made it (``"paper"``, ``"quick"``, ...), or
    :data:`PUBLISHED` (a paper's printed value and error) or :data:`EXACT` (a constant).
    ``missing``: why there is no value (the file or its row is absent). ``source``: the
    file it was read from (names it in "not run" reasons). ``rounding``: half a unit of
    the last digit a paper printed (0.005 for "0.07 ± 0.00"): the interval is widened by
    it and the error taken as at least it, so a value printed as 0.00 ± 0.00 reads as
    "below 0.005", not as exact. ``converged`` / ``convergence``: whether the runs behind
    it converged (:mod:`repens.summaries.converged`, read from ``results/convergence.csv``: True,
    False, or None when unknown) and the one-line reason; ``convergence`` is empty where
    no check applies (a printed value, a constant, or no convergence table given).
    """

    label: str
    value: float = math.nan
    se: float = math.nan
    n: int = 0
    scale: str | None = None
    source: str = ""
    missing: str | None = None
    rounding: float = 0.0
    converged: bool | None = None
    convergence: str = ""
    #: (seed, value) of each run behind the mean, where runs of one seed share their data
    #: and reference with the other quantity's (toys, synthetic targets): the comparison is
    #: then paired (:func:`_paired`); empty: unpaired
    per_seed: tuple[tuple[str, float], ...] = ()

    @classmethod
    def constant(cls, label: str, value: float) -> Estimate:
        """An exact value; ``label`` names it (e.g. "1 (HMC's)")."""
        return cls(label, float(value), 0.0, 0, EXACT)

    @classmethod
    def absent(cls, label: str, why: str) -> Estimate:
        return cls(label, missing=why)

    def problem(self) -> str | None:
        """Why this quantity cannot be judged (a "not run" or :data:`TOO_FEW_SEEDS` reason), or None."""
        return self._problem()[0]

    def too_few_seeds(self) -> bool:
        """Whether the only thing that keeps this quantity from being judged is its seeds:
        a number at the paper's scale from fewer than two runs (no standard error)."""
        return self._problem()[1] == TOO_FEW_SEEDS

    def _problem(self) -> tuple[str | None, str | None]:
        """(why this quantity cannot be judged, the verdict that makes: "not run" or
        :data:`TOO_FEW_SEEDS`), or (None, None)."""
        where = self.source or self.label
        if self.missing:
            return self.missing, "not run"
        if not _finite(self.value):
            return f"{where}: {self.label} is not a number", "not run"
        if self.scale in (PUBLISHED, EXACT):
            return (None, None) if _finite(self.se) else (f"{where}: {self.label} has no error bar", "not run")
        if self.scale != "paper":
            return f"{where}: {self.scale or 'unknown'} scale", "not run"
        if self.n < 2 or not _finite(self.se):
            return f"{where}: {self.label} from {self.n} seed(s), no standard error", (
                TOO_FEW_SEEDS if self.n < 2 else "not run"
            )
        return None, None

    @property
    def dof(self) -> float:
        """Degrees of freedom of the standard error: ``n - 1`` for a mean over ``n`` >= 2 seeds
        or splits (a paper's printed value included, where its ``n`` is known), else infinite
        (a printed error of unknown ``n``, a constant)."""
        return float(self.n - 1) if self.n >= 2 and self.scale != EXACT else math.inf

    def k(self, coverage: float = COVERAGE) -> float:
        """The interval's half-width in standard errors: :func:`quantile` of :attr:`dof` at
        ``coverage``."""
        return quantile(self.dof, coverage)

    def interval(self, k: float | None = None) -> tuple[float, float]:
        """mean ± ``k`` s.e. (default :meth:`k`, a :data:`COVERAGE` interval), widened by
        the printed rounding."""
        half = (self.k() if k is None else k) * max(self.se, self.rounding) + self.rounding
        return self.value - half, self.value + half

    def text(self) -> str:
        if self.problem() and (self.missing or not _finite(self.value)):
            return f"{self.label} n/a"
        if self.scale == EXACT:  # a constant's label names its value
            return self.label
        n = f", n={self.n}" if self.n else ""
        flag = (
            ""
            if not self.convergence or self.converged is True
            else " [not converged]"
            if self.converged is False
            else " [convergence unknown]"
        )
        return f"{self.label} {_num(self.value)} ± {_num(self.se, 2)}{n}{flag}"


@dataclass(frozen=True)
class Comparison:
    """``a <relation> b`` and its verdict; ``reason``: why not run (or not scored for too few
    seeds), else empty.

    ``margin``: the equivalence margin of an agreement (``~``, ``<=``, ``>=``), None for an
    ordering. ``difference``: ``a - b``; ``detectable``: the half-width of the interval
    the rule reads (the smallest difference the error bars can detect), nan when not run
    (``difference`` too) or with too few seeds (``difference`` is then the point estimate).
    """

    a: Estimate
    relation: str
    b: Estimate
    verdict: str
    reason: str = ""
    margin: float | None = None
    difference: float = math.nan
    detectable: float = math.nan
    #: seeds the comparison pairs (a and b from runs of the same seeds); 0: unpaired
    paired: int = 0
    #: a fixed-budget comparison scored as run on runs that did not converge: which, and why
    #: (:func:`as_run`); empty: none
    caveat: str = ""

    @property
    def undetectable(self) -> bool:
        """A two-sided agreement (``~``) whose error bars are wider than its margin: it cannot
        be reproduced (a one-sided ``<=`` / ``>=`` can, at any error bars, by a clear margin)."""
        return (
            self.relation == "~"
            and self.margin is not None
            and _finite(self.detectable)
            and self.detectable > self.margin
        )

    @property
    def n(self) -> int:
        """The seeds (or splits) the comparison rests on: the pairs, else the larger run count."""
        return self.paired or max(self.a.n, self.b.n)

    def n_to_decide(self) -> float | None:
        """For an agreement whose error bars are wider than its margin (:attr:`undetectable`):
        the smallest n (seeds or splits, of every run side) at which the interval of the
        difference, at the error per run measured here, would fit inside the margin with the
        difference measured here; ``inf`` where no n would (a printed error, which more runs
        do not shrink, is alone wider than the margin); None where the difference itself lies
        outside the margin (more runs would contradict it, not reproduce it) or the
        comparison is not such an agreement."""
        if not self.undetectable or self.verdict != "inconclusive":
            return None
        room = self.margin - abs(self.difference)
        if room <= 0:
            return None
        if self.paired:
            unit = self.detectable / quantile(self.paired - 1) * math.sqrt(self.paired)  # sd of the differences
            fixed_var, run_var, rounding = 0.0, unit**2, 0.0
        else:
            fixed_var, run_var, rounding = 0.0, 0.0, self.a.rounding + self.b.rounding
            for e in (self.a, self.b):
                se = max(e.se, e.rounding)
                if e.scale in (PUBLISHED, EXACT) or e.n < 2:
                    fixed_var += se**2
                else:
                    run_var += se**2 * e.n  # the per-run variance, divided by n' below
        if quantile(math.inf) * math.sqrt(fixed_var) + rounding >= room:
            return math.inf

        def fits(n: int) -> bool:  # the half-width at n runs falls with n (t and 1/n both do)
            return quantile(n - 1) * math.sqrt(fixed_var + run_var / n) + rounding <= room

        lo, hi = max(self.n, 2), 100_000  # fits(lo) is False (undetectable); the smallest n that fits
        if not fits(hi):
            return math.inf
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        return float(hi)

    def decidable_text(self) -> str:
        """ "cannot be decided at n = k ..." for an inconclusive agreement its error bars cannot
        decide, else ''."""
        if not self.undetectable or self.verdict != "inconclusive":
            return ""
        need = self.n_to_decide()
        head = f"cannot be decided at n = {self.n}"
        if need is None:
            return f"{head}: the difference lies outside the margin"
        if math.isinf(need):
            return f"{head} nor at any n: the printed error alone is wider than the margin"
        return f"{head}: about n = {need:.0f} would decide it"

    def text(self) -> str:
        head = f"{self.a.text()} {self.relation} {self.b.text()}"
        if self.verdict == TOO_FEW_SEEDS:
            return f"{head} (a-b {self.difference:+.3g}, no s.e.): {self.verdict}"
        if self.reason.startswith((NOT_CONVERGED, ZERO_SPREAD)):  # the verdict is not the figures': say why
            return f"{head}: {self.verdict} ({self.reason})"
        caveat = f" [caveat, {self.caveat}]" if self.caveat else ""
        pair = f", paired over {self.paired} seeds" if self.paired else ""
        if self.margin is not None and _finite(self.difference):
            decide = self.decidable_text()
            note = f"; error bars wider than the margin: {decide}" if decide else ""
            sign = {"~": "±", "<=": "+", ">=": "-"}[self.relation]
            bound = f"margin {sign}{_num(self.margin, 3)}{note}"
            head += f" (a-b {self.difference:+.3g} ± {self.detectable:.2g}{pair}, {bound})"
        elif self.paired and _finite(self.difference):
            head += f" (a-b {self.difference:+.3g} ± {self.detectable:.2g}{pair})"
        return f"{head}: {self.verdict}{caveat}"


def _half(e: Estimate) -> tuple[float, float]:
    """(the s.e. the rule uses, the rounding): the error taken as at least the rounding."""
    return max(e.se, e.rounding), e.rounding


def compare(a: Estimate, relation: str, b: Estimate, k: float | None = None, margin: float | None = None) -> Comparison:
    """The verdict of the claim ``a <relation> b`` (:func:`_compare`), but *inconclusive
    (not converged: <reason>)* when it ran and the runs behind ``a`` or ``b`` did not
    converge (:attr:`Estimate.converged` False): a comparison resting on an unconverged run
    says nothing about the methods, so it is never reproduced or contradicted. Unknown
    convergence (None) is shown (:meth:`Estimate.text`) but does not block."""
    c = _compare(a, relation, b, k, margin)
    failed = [e for e in (a, b) if e.converged is False]
    if c.verdict in UNSCORED or not failed:
        return c
    why = "; ".join(dict.fromkeys(e.convergence or "no reason recorded" for e in failed))
    return replace(c, verdict="inconclusive", reason=f"{NOT_CONVERGED}: {why}")


def as_run(c: Comparison) -> Comparison:
    """``c`` scored on its figures where :func:`compare` made it inconclusive because a run did
    not converge, the unconverged runs kept as its :attr:`Comparison.caveat`: a claim about a
    fixed-budget protocol (Table 1's 50,000 steps, Pearce et al.'s epochs) is about what that
    budget gives, converged or not; the gate stays for claims about a method's limit
    (:attr:`repens.report.claim_list.Claim.limit`)."""
    if not c.reason.startswith(NOT_CONVERGED):
        return c
    return replace(_compare(c.a, c.relation, c.b, margin=c.margin), caveat=c.reason)


def _compare(
    a: Estimate,
    relation: str,
    b: Estimate,
    k: float | None = None,
    margin: float | None = None,
    coverage: float = COVERAGE,
) -> Comparison:
    """The verdict of the claim ``a <relation> b``.

    ``relation``: ``">"`` / ``"<"`` (ordering: each quantity's :data:`COVERAGE` interval,
    mean ± t s.e. with its own degrees of freedom (:meth:`Estimate.interval`), disjoint in
    the claimed direction: reproduced; the other way: contradicted; else inconclusive);
    ``"~"`` (agreement, two one-sided tests: the interval ``(a - b) ± t sqrt(se_a^2 +
    se_b^2)``, t at Welch's degrees of freedom (:func:`welch_dof`), wholly within
    ``±margin``: reproduced; wholly outside: contradicted; else
    inconclusive; ``margin`` is required); ``"<="`` / ``">="`` (not worse, one-sided: that
    interval wholly below ``+margin`` (above ``-margin``): reproduced; wholly above
    (below): contradicted; ``margin`` defaults to 0). A printed value's rounding widens
    its side. ``k``: one half-width in standard errors for every interval instead (tests);
    ``coverage``: the intervals' coverage (:func:`familywise` reads contradictions at a stricter one).
    "not run" when either quantity has a :meth:`Estimate.problem`, :data:`TOO_FEW_SEEDS`
    when every such problem is a quantity's seeds (:meth:`Estimate.too_few_seeds`).
    Inconclusive (:data:`ZERO_SPREAD`) when a quantity from runs has an s.e. of zero: its
    seeds all gave the same value, and a zero-width interval reads nothing.
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {sorted(RELATIONS)}, got {relation!r}")
    if relation == "~" and (margin is None or not margin >= 0):
        raise ValueError(f"an agreement (~) needs a margin >= 0, got {margin!r}")
    if relation in ("<=", ">=") and margin is None:
        margin = 0.0
    if relation in (">", "<"):
        margin = None
    problems = [p for p in (a.problem(), b.problem()) if p]
    if problems:
        reason = "; ".join(dict.fromkeys(problems))
        if all(e.too_few_seeds() for e in (a, b) if e.problem()):  # the point estimate, no interval
            return Comparison(a, relation, b, TOO_FEW_SEEDS, reason, margin, a.value - b.value)
        return Comparison(a, relation, b, "not run", reason, margin)
    if k is None and _pairs(a, b):
        return _paired(a, relation, b, margin, coverage)
    return _unpaired(a, relation, b, k, margin, coverage)


def _unpaired(
    a: Estimate, relation: str, b: Estimate, k: float | None, margin: float | None, coverage: float
) -> Comparison:
    """:func:`_compare` of two quantities that are not paired (both judged, ``margin``
    normalised): disjoint intervals for an ordering, the interval of the difference for an
    agreement; inconclusive (:data:`ZERO_SPREAD`) where a quantity from runs has an s.e. of 0."""
    (se_a, r_a), (se_b, r_b) = _half(a), _half(b)
    diff = a.value - b.value
    flat = [e for e in (a, b) if e.scale == "paper" and e.rounding == 0 and no_spread(e.se, e.value)]
    if flat:
        why = "; ".join(f"{e.label}: its {e.n} seeds all give {_num(e.value)}" for e in flat)
        return Comparison(a, relation, b, "inconclusive", f"{ZERO_SPREAD}: {why}", margin, diff)
    if margin is None:  # ordering: disjoint intervals
        k_a, k_b = (a.k(coverage), b.k(coverage)) if k is None else (k, k)
        half = k_a * se_a + k_b * se_b + r_a + r_b
        a_lo, a_hi = a.interval(k_a)
        b_lo, b_hi = b.interval(k_b)
        above, below = a_lo > b_hi, a_hi < b_lo  # a's interval wholly above / below b's
        if relation == ">":
            verdict = "reproduced" if above else "contradicted" if below else "inconclusive"
        else:
            verdict = "reproduced" if below else "contradicted" if above else "inconclusive"
        return Comparison(a, relation, b, verdict, "", None, diff, half)
    k_d = quantile(welch_dof(se_a, a.dof, se_b, b.dof), coverage) if k is None else k
    half = k_d * math.sqrt(se_a**2 + se_b**2) + r_a + r_b
    return Comparison(
        a, relation, b, _interval_verdict(relation, diff - half, diff + half, margin), "", margin, diff, half
    )


def _interval_verdict(relation: str, lo: float, hi: float, margin: float | None) -> str:
    """The verdict of ``a <relation> b`` from the interval ``[lo, hi]`` of ``a - b``: an
    ordering by the side of 0 it lies on; an agreement (``~``: two one-sided tests) or a
    non-inferiority (``<=``, ``>=``) by where it lies against ``margin``."""
    if relation == ">":
        return "reproduced" if lo > 0 else "contradicted" if hi < 0 else "inconclusive"
    if relation == "<":
        return "reproduced" if hi < 0 else "contradicted" if lo > 0 else "inconclusive"
    if relation == "~":
        inside, outside = -margin <= lo and hi <= margin, hi < -margin or lo > margin
        return "reproduced" if inside else "contradicted" if outside else "inconclusive"
    if relation == "<=":
        return "reproduced" if hi <= margin else "contradicted" if lo > margin else "inconclusive"
    return "reproduced" if lo >= -margin else "contradicted" if hi < -margin else "inconclusive"  # ">="


def _pairs(a: Estimate, b: Estimate) -> list[tuple[float, float]]:
    """``a``'s and ``b``'s values seed by seed where both come from runs of the same seeds
    (two or more; :attr:`Estimate.per_seed`), else empty (the comparison is then unpaired)."""
    if not a.per_seed or not b.per_seed or a.scale in (PUBLISHED, EXACT) or b.scale in (PUBLISHED, EXACT):
        return []
    xa, xb = dict(a.per_seed), dict(b.per_seed)
    if set(xa) != set(xb) or len(xa) < 2:
        return []
    return [(xa[s], xb[s]) for s in sorted(xa)]


def _paired(a: Estimate, relation: str, b: Estimate, margin: float | None, coverage: float = COVERAGE) -> Comparison:
    """``a <relation> b`` on runs that share their seeds (data, target draws, HMC reference):
    the paired test, on the seeds' differences ``d_s = a_s - b_s``: the interval
    ``mean(d) ± t s.e.(d)``, t Student's at ``n - 1`` degrees of freedom. An ordering is
    reproduced when the interval lies wholly on the claimed side of 0, contradicted when
    wholly on the other, else inconclusive; an agreement reads it against its margin as the
    unpaired rule does. What the seeds share cancels in ``d``, so the interval is the
    difference's own, not two intervals side by side. Differences that are all equal give no
    interval (:data:`ZERO_SPREAD`): inconclusive."""
    pairs = _pairs(a, b)
    d = [x - y for x, y in pairs]
    n = len(d)
    mean = sum(d) / n
    if no_spread(max(d) - min(d), max(max(abs(x), abs(y)) for x, y in pairs)):
        why = f"{ZERO_SPREAD}: the {n} seeds' differences a - b are all {d[0]:+.3g}"
        return Comparison(a, relation, b, "inconclusive", why, margin, mean, paired=n)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n)
    half = quantile(n - 1, coverage) * se
    verdict = _interval_verdict(relation, mean - half, mean + half, margin)
    return Comparison(a, relation, b, verdict, "", margin, mean, half, paired=n)


def detectable_summary(comparisons: Sequence[Comparison]) -> str:
    """The smallest differences the error bars of the comparisons that ran can detect
    (range), and on how many an agreement's margin is below it (cannot be reproduced)."""
    ran = [c for c in comparisons if c.verdict not in UNSCORED and _finite(c.detectable)]
    if not ran:
        return ""
    lo, hi = min(c.detectable for c in ran), max(c.detectable for c in ran)
    text = _num(lo, 2) if _num(lo, 2) == _num(hi, 2) else f"{_num(lo, 2)}-{_num(hi, 2)}"
    agreements = [c for c in ran if c.relation == "~"]
    wide = [c for c in agreements if c.undetectable and c.verdict == "inconclusive"]
    if wide:
        text += (
            f"; above the margin on {len(wide)} of {len(agreements)} comparisons: those cannot be "
            f"decided at n = {_range([c.n for c in wide])}"
        )
        needs = [c.n_to_decide() for c in wide]
        finite = [n for n in needs if n is not None and not math.isinf(n)]
        never = sum(1 for n in needs if n is not None and math.isinf(n))
        parts = []
        if finite:
            parts.append(f"about n = {_range([int(n) for n in finite])} would decide {len(finite)}")
        if never:
            parts.append(f"no n would decide {never} (a printed error alone is wider than the margin)")
        if parts:
            text += " (" + "; ".join(parts) + ")"
    return text


def _range(values: Sequence[int]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def combine(comparisons: Sequence[Comparison]) -> str:
    """A claim's verdict from its comparisons: contradicted if any is, else not run if
    any is (or there are none), else too few seeds if any is, else reproduced if all are,
    else inconclusive."""
    verdicts = [c.verdict for c in comparisons]
    if "contradicted" in verdicts:
        return "contradicted"
    if not verdicts or "not run" in verdicts:
        return "not run"
    if TOO_FEW_SEEDS in verdicts:
        return TOO_FEW_SEEDS
    return "reproduced" if all(v == "reproduced" for v in verdicts) else "inconclusive"


def familywise(comparisons: Sequence[Comparison]) -> tuple[int, int, int, float]:
    """How a claim's contradictions fare at the claim's family-wise level: ``(contradicted,
    holding, m, coverage)``, the comparisons contradicted at :data:`COVERAGE`, how many of them
    stay contradicted with every interval at :func:`~repens.results.statistics.bonferroni_coverage` (Bonferroni
    over the claim's ``m`` comparisons, those without a verdict yet included, so the reading
    does not loosen as seeds arrive), ``m`` and that coverage.

    A claim is contradicted when any of its comparisons is (:func:`combine`); if the claim
    holds, each comparison wrongly contradicts it with probability at most (1 - COVERAGE) / 2,
    so ``m`` of them together may do so up to ``m`` times as often (about 26 % for 12
    comparisons at the boundary of their claims). A contradiction that holds at the Bonferroni
    coverage keeps that chance below (1 - COVERAGE) / 2 however many comparisons a claim
    has. (Reproduced needs every comparison, an intersection-union test, so it needs no
    correction.) The rule's verdict stays :func:`combine`'s; this is read beside it."""
    m = len(comparisons)
    coverage = bonferroni_coverage(m)
    contradicted = [c for c in comparisons if c.verdict == "contradicted"]
    holding = sum(
        _compare(c.a, c.relation, c.b, margin=c.margin, coverage=coverage).verdict == "contradicted"
        for c in contradicted
    )
    return len(contradicted), holding, m, coverage


def familywise_words(reading: tuple[int, int, int, float]) -> str:
    """ "family-wise: holds (1 of 1 contradiction at 99.58 % intervals, Bonferroni over 12
    comparisons)" (or "does not hold"): a :func:`familywise` reading in words; '' without a
    contradiction."""
    contradicted, holding, m, coverage = reading
    if not contradicted:
        return ""
    word = "holds" if holding else "does not hold"
    noun = "contradiction" if contradicted == 1 else "contradictions"
    return (
        f"family-wise: {word} ({holding} of {contradicted} {noun} at {coverage:.2%} intervals, "
        f"Bonferroni over {m} comparison{'s' if m != 1 else ''})"
    )


_NO_ROW = re.compile(r"^(?P<file>.*): no (?P<block>[\w-]+)/(?P<method>[\w-]+) row$")


def _grouped(reasons: Sequence[str]) -> list[str]:
    """ "F: no D1/m1 row", "F: no D2/m2 row" -> "F: no rows for m1, m2 (D1, D2)", in first-seen order."""
    out: dict[str, tuple[list[str], list[str]] | None] = {}
    for reason in reasons:
        m = _NO_ROW.match(reason)
        if m is None:
            out.setdefault(reason, None)
            continue
        methods, blocks = out.setdefault(f"{m['file']}: no rows for", ([], []))
        methods.append(m["method"]) if m["method"] not in methods else None
        blocks.append(m["block"]) if m["block"] not in blocks else None
    return [
        key if found is None else f"{key} {', '.join(found[0])} ({', '.join(found[1])})" for key, found in out.items()
    ]


def summary(comparisons: Sequence[Comparison], limit: int = 4) -> str:
    """The figures a verdict rests on, short: why it was not run (and how the comparisons
    that did run came out), else every comparison (up to ``limit``) or the counts and
    the comparisons that decide the verdict."""
    if not comparisons:
        return "no comparison"
    verdict = combine(comparisons)

    def counts(items: Sequence[Comparison]) -> str:
        def stuck(v: str) -> int:
            return sum(c.verdict == v and (c.reason.startswith(NOT_CONVERGED) or bool(c.caveat)) for c in items)

        return ", ".join(
            f"{sum(c.verdict == v for c in items)} {v}" + (f" ({stuck(v)} of them not converged)" if stuck(v) else "")
            for v in VERDICTS
            if any(c.verdict == v for c in items)
        )

    if verdict in UNSCORED:
        reasons = _grouped(
            dict.fromkeys(r for c in comparisons if c.verdict in UNSCORED for r in c.reason.split("; ") if r)
        )
        text = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
        ran = [c for c in comparisons if c.verdict not in UNSCORED]
        if ran or any(c.verdict != verdict for c in comparisons):
            unscored = [c for c in comparisons if c.verdict in UNSCORED]
            kinds = {c.verdict for c in unscored}
            what = f"{kinds.pop()} (" if len(kinds) == 1 else f"without a verdict: {counts(unscored)} ("
            text = f"{len(unscored)} of {len(comparisons)} comparisons {what}{text})"
            text += f"; {counts(ran)}{_not_converged(ran)}" if ran else ""
        return text
    if len(comparisons) <= limit:
        return "; ".join(c.text() for c in comparisons)
    deciding = [c for c in comparisons if c.verdict == verdict and verdict != "reproduced"]
    shown = "; ".join(c.text() for c in deciding[:limit])
    more = f"; and {len(deciding) - limit} more" if len(deciding) > limit else ""
    return (
        f"{len(comparisons)} comparisons: {counts(comparisons)}"
        + (f". {shown}{more}" if shown else "")
        + _not_converged([c for c in comparisons if c not in deciding[:limit]])
    )


_RUN = re.compile(r"(?:^|; )(?:not converged: )?(?P<run>[\w-]+/[\w-]+/[\w-]+/seed\d+): (?P<why>[^;]*)")


def _not_converged(comparisons: Sequence[Comparison], limit: int = 4) -> str:
    """ "; not converged: <run> (<its reason>), <run>, ...": the runs that made comparisons
    inconclusive, the first with its reason (empty if none)."""
    runs: dict[str, str] = {}
    for c in comparisons:
        for text in (c.reason, c.caveat):
            if text.startswith(NOT_CONVERGED):
                for m in _RUN.finditer(text):
                    runs.setdefault(m["run"], m["why"].strip())
    if not runs:
        return ""
    items = list(runs.items())
    shown = [f"{items[0][0]} ({items[0][1]})"] + [run for run, _ in items[1:limit]]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return f"; not converged: {', '.join(shown)}{more}"
