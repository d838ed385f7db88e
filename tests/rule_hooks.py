"""Test helpers for the update rules: a rule built for a training loop's settings, and a
rule whose steps a test interferes with (a kill, a signal, a poisoned direction)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from repens.methods.rule import Rule, RuleState, build
from repens.methods.updates import Update
from repens.models.kernels import RBF
from repens.training.train import TrainSettings, TrainState, train


def rule_for(
    name: str, posterior, settings: TrainSettings, space: str = "weight", kernel: RBF | None = None, **options
) -> Rule:
    """Rule ``name`` on ``posterior``, stepped by the settings' optimizer at their rate."""
    return build(
        name, space, posterior, kernel=RBF() if kernel is None else kernel, optimizer=settings.optimizer,
        lr=settings.lr, **options,
    )  # fmt: skip


def fit(rule: Rule, start: torch.Tensor, settings: TrainSettings, generator: torch.Generator, **kw) -> TrainState:
    """:func:`repens.training.train.train` of ``rule`` from the particles ``start``."""
    return train(rule, rule.init(start, generator), settings, **kw)


class Hooked:
    """``rule`` whose ``update`` first calls ``before(n)`` (``n``: the updates so far, this
    one included) and returns its update mapped through ``after(n, update)``; the rest is
    the rule's."""

    def __init__(
        self,
        rule: Rule,
        before: Callable[[int], None] | None = None,
        after: Callable[[int, Update], Update] | None = None,
    ) -> None:
        self.rule, self.before, self.after, self.calls = rule, before, after, 0

    def __getattr__(self, name: str):
        return getattr(self.rule, name)

    def update(self, state: RuleState, batch=None) -> tuple[RuleState, Update]:
        self.calls += 1
        if self.before is not None:
            self.before(self.calls)
        state, result = self.rule.update(state, batch)
        return state, (result if self.after is None else self.after(self.calls, result))


def crash_at(rule: Rule, n: int, error: type[BaseException] = KeyboardInterrupt) -> Hooked:
    """``rule`` killed at its ``n``-th update (before it moves anything)."""

    def before(calls: int) -> None:
        if calls == n:
            raise error

    return Hooked(rule, before)


def nan_at(rule: Rule, n: int) -> Hooked:
    """``rule`` whose ``n``-th update returns a NaN direction."""
    return Hooked(rule, after=lambda calls, out: Update(out.direction * float("nan")) if calls == n else out)


class Constant(Rule):
    """A rule whose direction is ``value`` everywhere (a test's: the optimizer's own moves show)."""

    def __init__(self, value: float = 1.0, **kw) -> None:
        super().__init__(None, **kw)
        object.__setattr__(self, "value", value)

    def ascent(self, params: torch.Tensor, ctx, state) -> Update:  # noqa: ARG002
        return Update(torch.full_like(params, self.value))
