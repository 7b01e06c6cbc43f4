"""Chains of pointwise operators as models write them in a ``forward``: the sweep's ``pointwise`` kind.

A layer that is a few elementwise operators in a row (DAC's Snake, ``x + 1/α·sin²(αx)``; an RMSNorm
written out; rotary positions; adaLN's scale and shift; a residual add) does no counted FLOPs, so a cost
model sees only its bytes, its kernel count and its first operator. No other sweep kind has such layers,
and before this one the learned models priced them from neighbours of other kinds (DAC's 31 Snake layers
at twice their in-model time on the Zen 5). Each chain here is one leaf module, captured as one layer, so
its features are the ones a model's own module of that form gets: its class name gives the layer kind
(``RMSNorm`` a norm, ``QuickGELU`` an activation, the rest by their heaviest operator, elementwise).

Shapes: ``x`` is b×t×c (tokens × channels), b×c×t for the channel-first audio chains (Snake, the
state-space discretisation); per-channel parameters broadcast along the other axes.

>>> [name for name, _ in CHAINS][:3]
['snake', 'rmsnorm', 'rotary']
>>> module, inputs = build_chain({"b": 2, "c": 8, "t": 16, "chain": 0})
>>> type(module).__name__, [tuple(x.shape) for x in inputs]
('Snake', [(2, 8, 16)])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["CHAINS", "build_chain"]


class Snake(nn.Module):
    """DAC's and BigVGAN's periodic activation, ``x + 1/α · sin²(αx)``, α per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class RMSNorm(nn.Module):
    """Llama's RMSNorm as ``transformers`` writes it: six operators, not ``aten.rms_norm``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class Rotary(nn.Module):
    """Rotary positions: ``x·cos + rotate_half(x)·sin``, with cos and sin per position and channel."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class ScaleShift(nn.Module):
    """adaLN and FiLM: ``x·(1 + scale) + shift``, scale and shift per sample and channel."""

    def forward(self, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        return x * (1 + scale) + shift


class LayerScaleResidual(nn.Module):
    """A residual branch scaled per channel (ConvNeXt, CaiT): ``x + γ·y``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((channels,), 1e-2))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + self.gamma * y


class QuickGELU(nn.Module):
    """CLIP's GELU approximation, ``x·sigmoid(1.702x)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class TanhGELU(nn.Module):
    """GPT-2's GELU written out: ``0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))``, eight operators."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Discretize(nn.Module):
    """A state-space model's step discretisation, ``exp(softplus(Δ)·A)``, A per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.a = nn.Parameter(-torch.ones(channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(nn.functional.softplus(x) * self.a)


class Add(nn.Module):
    """A residual add, the most common glue layer of all."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class Mul(nn.Module):
    """A gate: one branch times another (a gated MLP's product, a squeeze-excitation's scaling)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y


def _tokens(p: dict[str, int], *extra: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """x of b×t×c, then one tensor per shape in ``extra`` (-1 in it stands for b, -2 for t, -3 for c)."""
    sizes = {-1: p["b"], -2: p["t"], -3: p["c"]}
    return (torch.randn(p["b"], p["t"], p["c"]),
            *(torch.randn(*(sizes.get(d, d) for d in shape)) for shape in extra))


# chain's ``chain`` parameter: a name for it and its builder of (module, inputs) from the spec's parameters
CHAINS: tuple[tuple[str, Callable[[dict[str, int]], tuple[nn.Module, tuple[Any, ...]]]], ...] = (
    ("snake", lambda p: (Snake(p["c"]), (torch.randn(p["b"], p["c"], p["t"]),))),
    ("rmsnorm", lambda p: (RMSNorm(p["c"]), _tokens(p))),
    ("rotary", lambda p: (Rotary(), _tokens(p, (-2, -3), (-2, -3)))),
    ("scale_shift", lambda p: (ScaleShift(), _tokens(p, (-1, 1, -3), (-1, 1, -3)))),
    ("layer_scale", lambda p: (LayerScaleResidual(p["c"]), _tokens(p, (-1, -2, -3)))),
    ("quick_gelu", lambda p: (QuickGELU(), _tokens(p))),
    ("tanh_gelu", lambda p: (TanhGELU(), _tokens(p))),
    ("discretize", lambda p: (Discretize(p["c"]), (torch.randn(p["b"], p["c"], p["t"]),))),
    ("add", lambda p: (Add(), _tokens(p, (-1, -2, -3)))),
    ("mul", lambda p: (Mul(), _tokens(p, (-1, -2, -3)))),
)


def build_chain(p: dict[str, int]) -> tuple[nn.Module, tuple[Any, ...]]:
    """The module and inputs of a ``pointwise`` spec's parameters (b, c, t and ``chain``, an index into
    :data:`CHAINS`)."""
    if not 0 <= p["chain"] < len(CHAINS):
        raise ValueError(f"pointwise chain {p['chain']} does not exist: choose 0–{len(CHAINS) - 1} "
                         f"({', '.join(f'{i} {name}' for i, (name, _) in enumerate(CHAINS))})")
    return CHAINS[p["chain"]][1](p)
