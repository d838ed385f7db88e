"""The optimizers that move the particles: ``torch.optim``'s fused Adam and SGD, stepped
without their per-call Python.

``torch.optim.Adam.step`` (``fused=True``) spends most of a small stack's optimizer time
in Python: grouping tensors by device, building per-step lists, checking flags. Measured
with the profiler on one thread (torch 2.14): 65-90 us a call around a 5 us kernel on one
UCI split (5 x 751 weights), a fifth of the whole step; 100 us around a 60 us kernel on
the toy stack (50 x 2,701). :class:`DirectAdam` and :class:`DirectSGD` are those
optimizers (same ``param_groups``, ``state``, ``state_dict`` and checkpoints) whose
``step`` calls the same fused kernel (``torch._fused_adam_`` / ``torch._fused_sgd_``) with
the same arguments directly, so their updates are bit for bit those of ``torch.optim``
(``tests/test_optimizers.py``). Any setting the direct call does not cover (AMSGrad,
momentum, a tensor learning rate, a closure, a missing gradient, the first step, which
creates the state) goes through ``torch.optim``'s own ``step``.

Neither imports ``torch._dynamo`` (about 1.2 s of CPU, a third of a small job's start):
``torch.optim`` wraps ``add_param_group``, ``state_dict``, ``load_state_dict`` and
``zero_grad`` in ``torch._disable_dynamo`` and ``step`` in ``_use_grad_for_differentiable``,
and both import it on their first call, only to keep ``torch.compile`` from tracing them.
These optimizers call the functions those wrappers wrap (``__wrapped__``), with gradients
off as the step's wrapper sets them (``differentiable=False``), so the same code runs on the
same values; this package does not compile its optimizers. A differentiable optimizer or a
closure takes ``torch.optim``'s wrapped ``step``.
"""

from __future__ import annotations

import inspect

import torch
from torch import Tensor

__all__ = ["DirectAdam", "DirectSGD", "BlockAdam", "BlockSGD", "OPTIMIZERS", "BLOCK_OPTIMIZERS", "make_optimizer"]


def _unwrapped(method):  # noqa: ANN001, ANN202
    """``method`` without the wrappers ``functools.wraps`` records (``__wrapped__``)."""
    return inspect.unwrap(method)


class _DirectStep:
    """The step of a direct-call optimizer: its fused kernel (``_fused_step``) where
    ``_direct()`` says it covers the settings, else ``torch.optim``'s own ``step``."""

    # torch.optim's methods without their torch._disable_dynamo wrapper (see the module's docstring)
    add_param_group = _unwrapped(torch.optim.Optimizer.add_param_group)
    state_dict = _unwrapped(torch.optim.Optimizer.state_dict)
    load_state_dict = _unwrapped(torch.optim.Optimizer.load_state_dict)
    zero_grad = _unwrapped(torch.optim.Optimizer.zero_grad)

    def __init__(self, params, lr: float, maximize: bool = True) -> None:  # noqa: ANN001
        super().__init__(params, lr=lr, maximize=maximize, fused=True)
        self.step = self._direct_step  # see _direct_step

    def _direct_step(self, closure=None):  # noqa: ANN001, ANN201
        """The step. ``torch.optim`` wraps a class's ``step`` in a profiler and hook wrapper
        (11 us a call measured); the instance's own ``step`` skips it, so optimizer step
        hooks do not run (this package registers none). Where the direct call does not
        apply, ``torch.optim``'s step runs as its wrappers would run it, gradients off."""
        if closure is not None or self.defaults["differentiable"]:
            return super().step(closure)
        with torch.no_grad():
            if self._direct():
                self._fused_step()
            else:
                _unwrapped(super().step.__func__)(self)
        return None


def fused_adam(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    steps: list[Tensor],
    group: dict,
) -> None:
    """One call of torch's fused Adam kernel on these tensors, with ``group``'s settings (what
    ``torch.optim.Adam(fused=True)`` calls, without AMSGrad, gradient scaling or ``found_inf``)."""
    beta1, beta2 = group["betas"]
    torch._fused_adam_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        amsgrad=False,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=group["maximize"],
        grad_scale=None,
        found_inf=None,
    )


def fused_sgd(params: list[Tensor], grads: list[Tensor], group: dict) -> None:
    """One call of torch's fused SGD kernel (no momentum) on these tensors, with ``group``'s settings."""
    torch._fused_sgd_(
        params,
        grads,
        [],
        weight_decay=group["weight_decay"],
        momentum=0.0,
        lr=group["lr"],
        dampening=group["dampening"],
        nesterov=group["nesterov"],
        maximize=group["maximize"],
        is_first_step=False,
        grad_scale=None,
        found_inf=None,
    )


class DirectAdam(_DirectStep, torch.optim.Adam):
    """``torch.optim.Adam(fused=True)`` whose step calls the fused kernel directly."""

    def _fused_step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"].add_(1)  # what torch.optim's _foreach_add_(state_steps, 1) does
                fused_adam([p], [p.grad], [state["exp_avg"]], [state["exp_avg_sq"]], [state["step"]], group)

    def _direct(self) -> bool:
        """Whether every parameter has a gradient and state, and no setting needs ``torch.optim``."""
        for group in self.param_groups:
            if (
                group["amsgrad"]
                or group.get("decoupled_weight_decay")
                or group["differentiable"]
                or group["capturable"]
                or isinstance(group["lr"], Tensor)
                or isinstance(group["betas"][0], Tensor)
            ):
                return False
            for p in group["params"]:
                if p.grad is None or p.grad.is_sparse or "exp_avg" not in self.state[p]:
                    return False
        return True


class DirectSGD(_DirectStep, torch.optim.SGD):
    """``torch.optim.SGD(fused=True)`` without momentum, whose step calls the fused kernel directly."""

    def _fused_step(self) -> None:
        for group in self.param_groups:
            fused_sgd(group["params"], [p.grad for p in group["params"]], group)

    def _direct(self) -> bool:
        for group in self.param_groups:
            if group["momentum"] or group["differentiable"] or isinstance(group["lr"], Tensor):
                return False
            if any(p.grad is None or p.grad.is_sparse for p in group["params"]):
                return False
        return True


class BlockAdam(DirectAdam):
    """:class:`DirectAdam` over a stack of sets (G, n, D), say seeds, whose fused
    kernel gets each seed's block as a tensor of its own (one call, G tensors): the kernel
    runs each tensor's vectorised loop and its scalar tail (the last ``n D mod 16`` entries
    on AVX-512, rounded otherwise: measured) as on the seed's own (n, D) particles, where
    one (G, n, D) tensor would put those entries in the middle of the vectorised loop. The
    first step makes the state ``torch.optim.Adam`` makes (step 0, zero moments) and takes
    the same direct step, so every step is the one-seed job's, bit for bit."""

    def _direct(self) -> bool:
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:  # as torch.optim.Adam's _init_group makes it for fused=True
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return super()._direct()

    def _fused_step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"].add_(1)
                fused_adam(
                    list(p.unbind(0)),
                    list(p.grad.unbind(0)),
                    list(state["exp_avg"].unbind(0)),
                    list(state["exp_avg_sq"].unbind(0)),
                    [state["step"]] * p.shape[0],
                    group,
                )


class BlockSGD(DirectSGD):
    """:class:`DirectSGD` over a stack of sets, each set's block a tensor of its own in
    the fused kernel (see :class:`BlockAdam`)."""

    def _fused_step(self) -> None:
        for group in self.param_groups:
            blocks = [block for p in group["params"] for block in p.unbind(0)]
            grads = [block for p in group["params"] for block in p.grad.unbind(0)]
            fused_sgd(blocks, grads, group)


OPTIMIZERS = {"adam": DirectAdam, "sgd": DirectSGD}
#: the same, each set of a stack (the leading axis) stepped as a tensor of its own
BLOCK_OPTIMIZERS = {"adam": BlockAdam, "sgd": BlockSGD}


def make_optimizer(name: str, params: Tensor, lr: float, blocks: bool = False) -> torch.optim.Optimizer:
    """The optimizer ``name`` ascending ``phi`` (``maximize=True``, so ``phi`` is its gradient
    as is, with no negated copy), fused into one kernel over the particle matrix; with
    ``blocks``, each set of a stack (G, n, D) as a tensor of its own in that kernel, so each
    set's step is bit for bit its step alone (:class:`BlockAdam`)."""
    known = BLOCK_OPTIMIZERS if blocks else OPTIMIZERS
    if name not in known:
        raise ValueError(f"unknown optimizer {name!r}; known: {sorted(known)}")
    return known[name]([params], lr=lr)
