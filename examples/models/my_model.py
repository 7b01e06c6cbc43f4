"""Your own model, for pipeplan: a factory that returns the module and one example microbatch.

    pipeplan graph examples/models/my_model.py:build --batch 4
    pipeplan plan examples/models/my_model.py:build --batch 4 --cluster local-cpu --out plan.json
    pipeplan run --plan plan.json

pipeplan calls ``build(batch_size=B)`` after seeding torch's RNG (so every stage process builds the
same weights); ``seq_len`` and ``image_size`` are passed only when given on the command line, and
only if the function takes them.  Return ``(module, args)`` or ``(module, args, kwargs)``.
"""

from __future__ import annotations

import torch
from torch import nn


class TinyClassifier(nn.Module):
    """A small convolutional classifier with a residual connection."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.body = nn.Sequential(nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = h + self.body(h)
        return self.head(h.mean(dim=(2, 3)))


def build(batch_size: int = 1, image_size: int = 32) -> tuple[nn.Module, tuple[torch.Tensor]]:
    return TinyClassifier().eval(), (torch.randn(batch_size, 3, image_size, image_size),)
