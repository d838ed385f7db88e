"""Which options each update rule takes: the declaration ``repens.updates`` implements.

Kept free of torch so that the workflow can check ``config.yaml`` against it when it
loads (``repens.config``). ``tests/test_updates.py`` checks these sets against the
keyword arguments of the rule functions, the score estimators and the function prior,
so a rule that gains or loses an option cannot drift from what the config accepts.

Keys are the config's ``rule`` (with ``space: function`` for the function-space forms).
"""

from __future__ import annotations

__all__ = ["RULE_OPTIONS", "FUNCTION_PRIOR_OPTIONS", "ESTIMATOR_OPTIONS", "FUNCTION_SPACE", "options_of"]

#: keyword options of each weight-space rule (repens.updates.<rule>)
RULE_OPTIONS: dict[str, frozenset[str]] = {
    "ensemble": frozenset(),
    "anchored": frozenset({"anchor_divisor"}),
    "svgd": frozenset(),
    "wgd": frozenset({"estimator"}),  # plus the chosen estimator's options
    "langevin": frozenset({"temperature", "mmd_weight", "prior_samples"}),
}

#: rules with a function-space form (config ``space: function``)
FUNCTION_SPACE = frozenset({"svgd", "wgd"})

#: options of the function prior, taken by every function-space rule
#: (repens.updates.function_prior_score)
FUNCTION_PRIOR_OPTIONS = frozenset({"function_prior", "prior_samples", "prior_eta", "gp_lengthscale", "gp_variance"})

#: options of each estimator of grad log rho (repens.scores)
ESTIMATOR_OPTIONS: dict[str, frozenset[str]] = {
    "kde": frozenset(),
    "sge": frozenset({"eta"}),
    "ssge": frozenset({"eta", "num_eigs"}),
}


def options_of(rule: str, space: str = "weight", estimator: str | None = None) -> frozenset[str]:
    """Every option the rule takes in ``space`` with ``estimator`` (wgd)."""
    options = set(RULE_OPTIONS[rule])
    if rule == "wgd":
        options |= ESTIMATOR_OPTIONS.get(estimator, frozenset())
    if space == "function":
        options |= FUNCTION_PRIOR_OPTIONS
    return frozenset(options)
