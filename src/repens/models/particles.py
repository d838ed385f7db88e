"""A set of particles as one stacked parameter tensor.

Every method in this package works on a tensor ``params`` of shape (n, D): row i
is particle i. For a 2-D sampling problem D = 2 and the row *is* the sample; for a
network, :class:`StackedModel` maps each row to the module's named parameters
(views into the row, no copies) and evaluates all n networks at once, never with a
Python loop over members:

* a plain MLP (``nn.Sequential`` of ``Linear`` and ``ReLU``, :func:`repens.models.networks.mlp`)
  runs as one batched matrix product per layer (``matmul`` / ``baddbmm`` over the
  particle axis), which is what ``vmap`` would dispatch to, without its per-call
  dispatch cost (the small UCI and toy networks are overhead-bound), with its
  activations feature-major, (..., n, features, B), so that every product takes a
  weight in its stored layout (see :func:`_mlp_backward`);
* any other module (the ResNet) runs through ``torch.func.functional_call`` under
  ``torch.func.vmap``.

Either way the row is cut into the module's parameters by one ``torch.split``, whose
backward is one concatenation: slicing the row once per parameter instead made
backward build one zero-filled (n, D) gradient per parameter and add them up (on the
FashionMNIST MLP, 8 passes over the 20 MB particle matrix, half of a step's time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

__all__ = ["StackedModel", "ParamSlot"]


def _leading_flatten(module: nn.Module) -> nn.Module | None:
    """The MLP of ``Sequential(Flatten(), mlp)`` (the image networks: every example's
    features flattened, then the MLP); ``None`` for any other module."""
    if not isinstance(module, nn.Sequential) or len(module) != 2:
        return None
    first, rest = module
    if type(first) is not nn.Flatten or (first.start_dim, first.end_dim) != (1, -1):
        return None
    return rest


def _mlp_layers(module: nn.Module) -> tuple[tuple[bool, bool], ...] | None:
    """For ``Sequential(Linear, ReLU, ..., Linear)``: per Linear, (whether a ReLU follows,
    whether it has a bias); ``None`` for any other module (it runs under ``vmap``)."""
    if not isinstance(module, nn.Sequential) or len(module) == 0:
        return None
    layers: list[list[bool]] = []
    for child in module:
        if type(child) is nn.Linear:
            layers.append([False, child.bias is not None])
        elif type(child) is nn.ReLU and layers and not layers[-1][0]:  # right after a Linear
            layers[-1][0] = True
        else:
            return None
    return tuple((relu, bias) for relu, bias in layers) if not layers[-1][0] else None


def _mlp_slots(layers: tuple[tuple[bool, bool], ...]) -> tuple[tuple[int, int | None], ...]:
    """Per Linear, the index of its weight's slot and of its bias's (None without a bias):
    ``named_parameters`` lists each layer's weight, then its bias."""
    out, k = [], 0
    for _, has_bias in layers:
        out.append((k, k + 1 if has_bias else None))
        k += 2 if has_bias else 1
    return tuple(out)


def _layer(
    params_parts: tuple[Tensor, ...], model: StackedModel, i: int, lead: torch.Size
) -> tuple[Tensor, Tensor | None]:
    """Layer ``i``'s weight (..., out, in) and bias (..., out, 1) or None: views into the rows."""
    w_index, b_index = model._mlp_slots[i]
    weight = params_parts[w_index].view(*lead, *model.slots[w_index].shape)
    if b_index is None:
        return weight, None
    return weight, params_parts[b_index].view(*lead, model.slots[b_index].shape[0], 1)


def _outer_or_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b``; a broadcast product when the inner dimension is 1 (an outer product:
    one elementwise pass, where a batched GEMM with k = 1 is several times slower)."""
    if a.shape[-1] == 1:
        return a * b
    return torch.bmm(a, b) if a.dim() == 3 and a.shape[0] == b.shape[0] else torch.matmul(a, b)


def _affine(h: Tensor, weight: Tensor, bias: Tensor | None, lead: torch.Size) -> Tensor:
    """``W h + b`` for a stack, activations feature-major (..., features, B): one batched
    GEMM (``baddbmm``) when ``h`` has one batch per particle; shared inputs (one batch for
    all particles, or per group) through a broadcast ``matmul`` (all particles' weights
    against the inputs as one GEMM, never a copy of the inputs per particle); one fused
    multiply-add for a single input feature (the toy regressions)."""
    if h.shape[-2] == 1:  # an outer product; addcmul's three-way broadcast was 3x slower (83 vs 25 us, toy)
        out = weight * h
        return out if bias is None else out.add_(bias)
    if h.dim() == weight.dim() and h.shape[:-2] == lead:
        if weight.dim() == 3:  # one stack: no reshapes to dispatch
            return torch.bmm(weight, h) if bias is None else torch.baddbmm(bias, weight, h)
        w3, h3 = weight.reshape(-1, *weight.shape[-2:]), h.reshape(-1, *h.shape[-2:])
        out = torch.bmm(w3, h3) if bias is None else torch.baddbmm(bias.reshape(-1, *bias.shape[-2:]), w3, h3)
        return out.view(*lead, weight.shape[-2], h.shape[-1])
    # shared inputs: every particle's weights of a set as the rows of one GEMM against the
    # set's inputs (a copy of the weights, never one of the inputs per particle)
    shared = h.squeeze(-3) if h.dim() == weight.dim() else h  # (in, B) or (G, in, B)
    rows = weight.reshape(*weight.shape[:-3], weight.shape[-3] * weight.shape[-2], weight.shape[-1])
    out = torch.matmul(rows, shared).view(*weight.shape[:-1], h.shape[-1])
    return out if bias is None else out.add_(bias)


#: a layer with at most this many inputs (but more than one) shared by the particles gets
#: its weight gradient as ``(h g^T)^T``: ``g h^T`` with so few columns runs at a fraction of
#: the GEMM rate (measured on one core, the UCI stack's 13 inputs, 100 networks x 50 units x
#: 64 rows: 285 us against 178 us; one input: 18 us as ``g h^T``)
_NARROW_INPUT = 16


def _weight_grad(g: Tensor, h: Tensor) -> Tensor:
    """``dW = g h^T`` (..., n, out, in) for the upstream gradient ``g`` (..., n, out, B) and
    the layer's input ``h`` (..., n or 1, in, B). Inputs shared by a set's particles make
    one GEMM of all its particles' rows (no copy of the inputs per particle)."""
    if h.shape[:-2] == g.shape[:-2]:
        return torch.bmm(g, h.mT) if g.dim() == 3 else torch.matmul(g, h.mT)
    shared = h.squeeze(-3) if h.dim() == g.dim() else h  # (in, B) or (G, in, B)
    rows = g.reshape(*g.shape[:-3], g.shape[-3] * g.shape[-2], g.shape[-1])
    inputs = shared.shape[-2]
    product = torch.matmul(shared, rows.mT).mT if 1 < inputs <= _NARROW_INPUT else torch.matmul(rows, shared.mT)
    return product.reshape(*g.shape[:-1], inputs)


#: A stack whose widest activation is above this many bytes, with many more activations
#: than weights per network (:data:`BLOCK_MIN_RATIO`), runs its rows in blocks of at most
#: this size. Each block's activations then stay in cache between the layer that writes
#: them and the ones that read them, where a whole activation makes every elementwise pass
#: (bias, ReLU, its mask in backward) a trip to memory. Measured on one core
#: (gradient of the log-likelihood, median of 5 rounds): the
#: protein stack (5 splits x 5 members x batch 8192 x 100 hidden, 82 MB) 62 ms whole,
#: 36 ms in blocks of 4 MiB (54 ms at 16 MiB, 40 ms at 1 MiB). The blocks depend on the
#: shapes only, so the numerics are the same on every machine.
BLOCK_BYTES = 4 << 20
#: Each block adds a pass over the stack's weight gradient (the blocks' gradients are
#: summed), so blocks are used only where a network's widest activation has at least this
#: many times as many entries as the network has weights: the protein stack 745 (blocks
#: pay), the kin8nm stack 26 (2.5 ms either way), 50 FashionMNIST networks 0.26 (blocks of
#: 4 MiB were 1.4x slower).
BLOCK_MIN_RATIO = 64


@dataclass(frozen=True)
class _RowBlocks:
    """The inputs an MLP forward kept, per block of rows (``x[..., rows, :]``)."""

    rows: tuple[slice, ...]
    inputs: tuple[list[Tensor], ...]


def _row_blocks(params: Tensor, x: Tensor, model: StackedModel) -> tuple[slice, ...] | None:
    """Equal blocks of the input rows (dim -2) whose widest activation is at most
    :data:`BLOCK_BYTES`, or None when the whole stack is within it or its networks have
    too many weights for their activations (:data:`BLOCK_MIN_RATIO`)."""
    rows = x.shape[-2]
    width = max(model.slots[w].shape[0] for w, _ in model._mlp_slots)
    per_row = math.prod(params.shape[:-1]) * width * params.element_size()
    if per_row * rows <= BLOCK_BYTES or rows < 2 or rows * width < BLOCK_MIN_RATIO * model.dim:
        return None
    count = math.ceil(rows * per_row / BLOCK_BYTES)
    size = math.ceil(rows / count)
    return tuple(slice(i, min(i + size, rows)) for i in range(0, rows, size))


def _mlp_forward(params: Tensor, x: Tensor, model: StackedModel, keep: list | None) -> Tensor:
    """The MLP stack's forward; ``keep`` (a list) collects each layer's input for backward
    (one :class:`_RowBlocks` when the rows run in blocks, see :data:`BLOCK_BYTES`)."""
    blocks = _row_blocks(params, x, model)
    if blocks is None:
        return _mlp_forward_rows(params, x, model, keep)
    kept = tuple([] for _ in blocks) if keep is not None else tuple(None for _ in blocks)
    out = torch.cat([_mlp_forward_rows(params, x[..., rows, :], model, k) for rows, k in zip(blocks, kept)], dim=-2)
    if keep is not None:
        keep.append(_RowBlocks(blocks, kept))
    return out


def _mlp_forward_rows(params: Tensor, x: Tensor, model: StackedModel, keep: list | None) -> Tensor:
    """Inputs (..., B, in) -> outputs (..., B, out); inside, activations are feature-major
    (..., features, B) (see :func:`_mlp_backward`), and ``keep`` gets them so."""
    parts = torch.split(params, model._sizes, dim=-1)
    lead = params.shape[:-1]
    h = x.mT
    for i, (relu, _) in enumerate(model._mlp):
        if keep is not None:
            keep.append(h)
        weight, bias = _layer(parts, model, i, lead)
        h = _affine(h, weight, bias, lead)
        if relu:
            h = h.relu_()  # in place: the pre-activation is not needed again
    return h.mT.contiguous()  # a view for one output, a copy of the (small) outputs otherwise


def _mlp_backward(params: Tensor, inputs: list[Tensor], grad_out: Tensor, model: StackedModel) -> Tensor:
    """Gradient (..., D) of ``sum(grad_out * f(params))`` for the MLP stack ``f``, layer by
    layer from the top, for the upstream gradient ``g`` (..., n, out, B) of a layer with
    input ``h`` (..., in, B): ``dW = g h^T``, ``db = sum_B g`` (layers with a bias), and
    ``g <- (W^T g) * [h > 0]`` for the layer below (``h`` is a ReLU output there). With the
    activations feature-major every product takes the weight in its stored (out, in)
    layout and ``dW`` comes out in it; a one-output layer is a (1 x in)(in x B) product
    (measured on the toy stack, one core, the whole DE training step: 741.8 steps/s against
    672.8 with activations batch-major, ``benchmarks/bench_engine.py --configs toy --baseline
    <the commit before>``). With rows in blocks, the sum of the blocks' gradients."""
    if inputs and isinstance(inputs[0], _RowBlocks):
        blocks = inputs[0]
        grad = None
        for rows, kept in zip(blocks.rows, blocks.inputs):
            part = _mlp_backward(params, kept, grad_out[..., rows, :], model)
            grad = part if grad is None else grad.add_(part)
        return grad
    lead = params.shape[:-1]
    parts = torch.split(params, model._sizes, dim=-1)
    grad = params.new_empty(params.shape)
    grad_parts = torch.split(grad, model._sizes, dim=-1)
    g = grad_out.mT
    for i in reversed(range(len(model._mlp))):
        h = inputs[i]
        weight, _ = _layer(parts, model, i, lead)
        grad_w = grad_parts[model._mlp_slots[i][0]].view(*lead, *weight.shape[-2:])
        grad_w.copy_(_weight_grad(g, h))
        b_index = model._mlp_slots[i][1]
        if b_index is not None:
            torch.sum(g, dim=-1, out=grad_parts[b_index].view(*lead, weight.shape[-2]))
        if i > 0:  # through the ReLU below: zero where its output is 0, in place (a fresh product)
            g = _outer_or_matmul(weight.mT, g)
            torch.ops.aten.threshold_backward.grad_input(g, h, 0.0, grad_input=g)
    return grad


class _MLPStack(torch.autograd.Function):
    """An MLP stack as one autograd node, with the backward of :func:`_mlp_backward`
    (nothing materialised besides what eager autograd would save)."""

    @staticmethod
    def forward(ctx, params: Tensor, x: Tensor, model: StackedModel) -> Tensor:  # noqa: ANN001
        inputs: list = []
        out = _mlp_forward(params, x, model, keep=inputs)
        ctx.model = model
        if inputs and isinstance(inputs[0], _RowBlocks):
            ctx.blocks = inputs[0]  # intermediates, not the node's inputs or outputs: kept on ctx
            ctx.save_for_backward(params)
        else:
            ctx.blocks = None
            ctx.save_for_backward(params, *inputs)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # noqa: ANN001, ANN205
        params, *inputs = ctx.saved_tensors
        if ctx.blocks is not None:
            inputs = [ctx.blocks]
        return _mlp_backward(params, inputs, grad_out, ctx.model), None, None


@dataclass(frozen=True)
class ParamSlot:
    name: str
    shape: tuple[int, ...]
    start: int
    stop: int


class StackedModel:
    """Functional, vectorised view of ``module`` for n stacked parameter rows.

    Args:
        module: a template network; its own parameter values are never used by
            :meth:`forward` (they are replaced by the rows of ``params``).
        chunk_size: optional ``vmap`` chunk size to bound memory on large models.
        input_shape: the shape of one example, e.g. (1, 28, 28). With it, a
            ``Sequential(Flatten(), mlp)`` (the image MLP) runs on the MLP path, each
            example's ``len(input_shape)`` trailing dimensions flattened first; without it
            (the leading axes of the inputs would be ambiguous) it runs under ``vmap``.
    """

    def __init__(
        self, module: nn.Module, chunk_size: int | None = None, input_shape: tuple[int, ...] | None = None
    ) -> None:
        self.module = module
        self.chunk_size = chunk_size
        slots, start = [], 0
        for name, p in module.named_parameters():
            slots.append(ParamSlot(name, tuple(p.shape), start, start + p.numel()))
            start += p.numel()
        self.slots: tuple[ParamSlot, ...] = tuple(slots)
        self.dim = start
        self.buffers = dict(module.named_buffers())
        self._sizes = [s.stop - s.start for s in self.slots]
        flattened = _leading_flatten(module) if input_shape is not None else None
        #: how many trailing dimensions of the inputs make one example (flattened before the MLP)
        self._example_dims = len(input_shape) if flattened is not None else 1
        self._mlp = _mlp_layers(module if flattened is None else flattened)
        self._mlp_slots = _mlp_slots(self._mlp) if self._mlp is not None else ()

    def unflatten(self, row: Tensor) -> dict[str, Tensor]:
        """Named parameter views into rows (..., D) of the stacked tensor: (..., *shape) each."""
        lead = row.shape[:-1]
        parts = torch.split(row, self._sizes, dim=-1)
        return {s.name: part.view(*lead, *s.shape) for s, part in zip(self.slots, parts)}

    def flatten(self, module: nn.Module | None = None) -> Tensor:
        """The parameters of ``module`` (default: the template) as one row (D,)."""
        module = self.module if module is None else module
        return torch.cat([p.detach().reshape(-1) for p in module.parameters()])

    def forward(self, params: Tensor, x: Tensor) -> Tensor:
        """Outputs of all particles on the same inputs: (n, D), (B, ...) -> (n, B, ...).

        MLPs also take stacks of stacks: params (G, n, D) with inputs (B, in) shared by
        all, or (G, B, in), one input batch per group (e.g. per data split).
        """
        if self._mlp is not None:
            return self._forward_mlp(params, x)

        def one(row: Tensor) -> Tensor:
            return functional_call(self.module, {**self.unflatten(row), **self.buffers}, (x,))

        return vmap(one, chunk_size=self.chunk_size)(params)

    @property
    def is_mlp(self) -> bool:
        """Whether the module is a plain MLP, run with batched matmuls and a written-out backward."""
        return self._mlp is not None

    def forward_saving_inputs(self, params: Tensor, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """An MLP stack's outputs and each layer's input, for :meth:`backward` (no autograd)."""
        if self._mlp is None:
            raise TypeError("forward_saving_inputs needs an MLP (Sequential of Linear and ReLU)")
        x = self._per_group(params, x)
        inputs: list[Tensor] = []
        return _mlp_forward(params, x, self, keep=inputs), inputs

    def backward(self, params: Tensor, inputs: list[Tensor], grad_out: Tensor) -> Tensor:
        """``d/dparams sum(grad_out * outputs)`` (..., D) for an MLP stack, from
        :meth:`forward_saving_inputs` (a vector-Jacobian product, written out)."""
        return _mlp_backward(params, inputs, grad_out, self)

    def _per_group(self, params: Tensor, x: Tensor) -> Tensor:
        """Examples flattened to ``in`` features (``input_shape``'s MLP); one input batch per
        group (G, B, in) -> (G, 1, B, in), shared by its particles."""
        if self._example_dims > 1:
            x = x.flatten(-self._example_dims)
        return x.unsqueeze(-3) if x.dim() == params.dim() else x

    def _forward_mlp(self, params: Tensor, x: Tensor) -> Tensor:
        """``h <- relu(h W^T + b)`` per layer, batched over the leading axes of ``params``:
        one autograd node for the whole stack, with the backward written out
        (:class:`_MLPStack`), when the inputs need no gradient (always, for data)."""
        x = self._per_group(params, x)
        if x.requires_grad:
            return _mlp_forward(params, x, self, keep=None)
        return _MLPStack.apply(params, x, self)

    __call__ = forward

    def sample_gaussian(
        self, n: int, std: float | Tensor, generator: torch.Generator, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """``n`` rows drawn from N(0, std^2 I) (e.g. the prior), on the generator's device;
        ``std`` a number or a tensor broadcast against the rows (say, (n, 1) per-member sds,
        moved to the draws' device and dtype)."""
        draws = torch.randn(n, self.dim, generator=generator, dtype=dtype, device=generator.device)
        if isinstance(std, Tensor):
            return draws.mul_(std.to(draws))  # in place: no second (n, D) matrix
        return draws if std == 1 else draws.mul_(std)

    def sample_torch_default(self, n: int, generator: torch.Generator, dtype: torch.dtype = torch.float32) -> Tensor:
        """``n`` rows drawn as PyTorch initialises ``nn.Linear`` and ``nn.Conv*``: weights
        ``kaiming_uniform_(a=sqrt(5))``, i.e. ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, and
        each bias ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` with its layer's weight fan-in
        (the released FashionMNIST code's ``Net.init_params``).

        A bias takes the fan-in of the slot just before it; 1-D ``weight`` s (the affine
        scales of normalisation layers) start at one, their biases at zero.
        """
        rows = torch.zeros(n, self.dim, dtype=dtype, device=generator.device)
        fan_in = None
        for s in self.slots:
            size = s.stop - s.start
            if len(s.shape) >= 2:
                fan_in = math.prod(s.shape[1:])
            elif s.name.endswith("weight"):
                rows[:, s.start : s.stop] = 1.0
                fan_in = None
                continue
            elif fan_in is None:
                continue
            bound = 1.0 / math.sqrt(fan_in)
            u = torch.rand(n, size, generator=generator, dtype=dtype, device=generator.device)
            rows[:, s.start : s.stop] = (2.0 * u - 1.0) * bound
        return rows

    def sample_he(self, n: int, generator: torch.Generator, dtype: torch.dtype = torch.float32) -> Tensor:
        """``n`` rows with He (Kaiming-normal) weights and zero biases (He et al. 2015).

        1-D ``weight`` s (the affine scales of normalisation layers) start at one.
        """
        rows = torch.zeros(n, self.dim, dtype=dtype, device=generator.device)
        for s in self.slots:
            if len(s.shape) < 2:
                if s.name.endswith("weight"):
                    rows[:, s.start : s.stop] = 1.0
                continue
            fan_in = math.prod(s.shape[1:])
            size = s.stop - s.start
            rows[:, s.start : s.stop] = math.sqrt(2.0 / fan_in) * torch.randn(
                n, size, generator=generator, dtype=dtype, device=generator.device
            )
        return rows
