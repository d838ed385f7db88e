"""Network templates; :class:`repens.models.particles.StackedModel` turns one into n particles.

* :func:`mlp`: the fully connected ReLU nets of the toys (2 x 50) and FashionMNIST (3 x 100);
* :func:`resnet`: the CIFAR ResNet family of He et al. (2016, Sec. 4.2), depth 6n+2
  (ResNet32: n = 5), with parameter-free "option A" shortcuts.

Normalisation in the ResNet is GroupNorm (Wu & He 2018), not BatchNorm: BatchNorm's
running statistics are buffers updated in place, which ``vmap`` over particles cannot
do, and a shared buffer would mix the members' statistics. GroupNorm normalises each
example on its own, has no running state, and is the same in training and evaluation,
so a member's prediction never depends on the rest of its batch or on the other
members. ``norm="none"`` gives the plain network (no normalisation at all).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from repens.jobs.job import ImageNetwork

__all__ = ["mlp", "resnet", "MODELS", "build_model"]


def mlp(in_dim: int, hidden: list[int] | tuple[int, ...], out_dim: int, output_bias: bool = True) -> nn.Sequential:
    """Fully connected ReLU network, e.g. ``mlp(1, [50, 50], 1)`` for Appendix G.2;
    ``output_bias=False`` drops the last layer's bias (Pearce et al. 2020's networks)."""
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, out_dim, bias=output_bias))
    return nn.Sequential(*layers)


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(math.gcd(8, channels), channels)  # 8 groups at widths 16/32/64
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}; use 'group' or 'none'")


class _Block(nn.Module):
    """Basic residual block: conv3x3-norm-ReLU-conv3x3-norm, plus the shortcut, then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = _norm(norm, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = _norm(norm, cout)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        shortcut = x
        if self.stride != 1 or self.pad:
            # option A: subsample and zero-pad the new channels (no parameters)
            shortcut = x[:, :, :: self.stride, :: self.stride]
            shortcut = F.pad(shortcut, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + shortcut)


class ResNet(nn.Module):
    def __init__(
        self, depth: int = 32, width: int = 16, num_classes: int = 10, in_channels: int = 3, norm: str = "group"
    ) -> None:
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2 (20, 32, 44, ...), got {depth}")
        n = (depth - 2) // 6
        self.conv = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.norm = _norm(norm, width)
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(n):
                blocks.append(_Block(cin, cout, 2 if stage > 0 and i == 0 else 1, norm))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm(self.conv(x)))
        out = self.blocks(out)
        return self.fc(out.mean(dim=(-2, -1)))


def resnet(
    depth: int = 32, width: int = 16, num_classes: int = 10, in_channels: int = 3, norm: str = "group"
) -> ResNet:
    """CIFAR ResNet of depth 6n+2 with base width ``width`` (16 in He et al.; 0.46M
    parameters for ResNet32)."""
    return ResNet(depth, width, num_classes, in_channels, norm)


def build_model(network: ImageNetwork | Mapping[str, Any], input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The network of an image job (:class:`repens.jobs.job.ImageNetwork`; an image job is one, and
    from a dict its keys are read): ``mlp`` (``hidden``) or ``resnet`` (``depth``, ``width``, ``norm``)."""
    network = ImageNetwork.pick(network)  # an unknown model is a SpecError (a ValueError) naming it
    return MODELS[network.model](network, input_shape, num_classes)


#: builders by ImageNetwork.model (tests/test_job.py: the same names as its choices)
MODELS: dict[str, Callable[[ImageNetwork, tuple[int, ...], int], nn.Module]] = {
    "mlp": lambda n, shape, c: nn.Sequential(nn.Flatten(), mlp(math.prod(shape), list(n.hidden), c)),
    "resnet": lambda n, shape, c: resnet(n.depth, n.width, c, shape[0], n.norm),
}
