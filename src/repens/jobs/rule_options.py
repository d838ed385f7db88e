"""Which options each update rule takes, as :mod:`repens.core.registry` declares them.

Kept free of torch so that the workflow can check ``config.yaml`` against it when it
loads (``repens.pipeline.config``). ``tests/test_updates.py`` checks these sets against the
keyword arguments of the rule functions, the score estimators and the function prior,
so a rule that gains or loses an option cannot drift from what the config accepts.

Keys are the config's ``rule`` (with ``space: function`` for the function-space forms).
The mappings and the set are views of the registry: a rule registered later is in them.
"""

from __future__ import annotations

from collections.abc import Iterator, Set

from repens.core import registry
from repens.core.registry import FUNCTION_PRIOR_OPTIONS, LiveMapping

__all__ = ["RULE_OPTIONS", "FUNCTION_PRIOR_OPTIONS", "ESTIMATOR_OPTIONS", "FUNCTION_SPACE", "options_of"]

#: keyword options of each weight-space rule (repens.methods.updates.<rule>); wgd: plus the chosen estimator's
RULE_OPTIONS: LiveMapping = LiveMapping(lambda: {name: r.options for name, r in registry.RULES.items()})


class _FunctionSpace(Set):
    """The rules with a function-space form (config ``space: function``)."""

    def __contains__(self, rule: object) -> bool:
        return rule in registry.function_space_rules()

    def __iter__(self) -> Iterator[str]:
        return iter(registry.function_space_rules())

    def __len__(self) -> int:
        return len(registry.function_space_rules())

    def __repr__(self) -> str:
        return f"frozenset({set(self)!r})"

    __hash__ = Set._hash


#: rules with a function-space form (config ``space: function``)
FUNCTION_SPACE = _FunctionSpace()

#: options of each estimator of grad log rho (repens.models.scores)
ESTIMATOR_OPTIONS: LiveMapping = LiveMapping(registry.estimator_options)


def options_of(rule: str, space: str = "weight", estimator: str | None = None) -> frozenset[str]:
    """Every option the rule takes in ``space`` with ``estimator`` (a rule that takes one)."""
    return registry.rule_options_of(rule, space, estimator)
