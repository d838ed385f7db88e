"""repens: repulsive deep ensembles, their relatives, and the pipeline that reproduces them.

The library's front door: a module's particles and their posterior in one call, the
update rules, the kernel::

    import repens

    posterior = repens.ensemble(net, likelihood="categorical", num_train=60000, prior=1.0)
    rule = repens.FunctionWGD(posterior, estimator="kde", lr=1e-3)   # Eq. 5 with Eq. 20
    state = rule.init(posterior.sample_prior(10, generator), generator)
    for x, y in batches:
        state, step = rule.update(state, repens.Batch(x, y))

Every name is imported on first use, so ``import repens`` stays cheap (the workflow's
planning imports ``repens.pipeline.config`` without torch). ``docs/library.md`` documents
each name with its equation.
"""

from __future__ import annotations

import importlib

from repens.core.version import __version__

#: the front door's names -> where each is defined (``module:name``)
_EXPORTS = {
    # the update rules (repens.methods.rules), each an object with init and update
    "DeepEnsemble": "repens.methods.rules.ensemble:DeepEnsemble",
    "SVGD": "repens.methods.rules.svgd:SVGD",
    "FunctionSVGD": "repens.methods.rules.svgd:FunctionSVGD",
    "WGD": "repens.methods.rules.wgd:WGD",
    "FunctionWGD": "repens.methods.rules.wgd:FunctionWGD",
    "Anchored": "repens.methods.rules.anchored:Anchored",
    "Langevin": "repens.methods.rules.langevin:Langevin",
    "Rule": "repens.methods.rule:Rule",
    "RuleState": "repens.methods.rule:RuleState",
    "build": "repens.methods.rule:build",
    "Update": "repens.methods.updates:Update",
    "langevin_step_size": "repens.methods.step_size:langevin_step_size",
    # kernels, posteriors, a module as an ensemble
    "RBF": "repens.models.kernels:RBF",
    "Batch": "repens.models.posteriors:Batch",
    "Posterior": "repens.models.posteriors:Posterior",
    "NetworkPosterior": "repens.models.posteriors:NetworkPosterior",
    "ensemble": "repens.models.wrap:ensemble",
    "ModulePosterior": "repens.models.wrap:ModulePosterior",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'repens' has no attribute {name!r}")
    module, _, attr = _EXPORTS[name].partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
