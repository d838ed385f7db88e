"""Network templates; :class:`repens.particles.StackedModel` turns one into n particles."""

from __future__ import annotations

from torch import nn

__all__ = ["mlp"]


def mlp(in_dim: int, hidden: list[int] | tuple[int, ...], out_dim: int) -> nn.Sequential:
    """Fully connected ReLU network, e.g. ``mlp(1, [50, 50], 1)`` for Appendix G.2."""
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)
