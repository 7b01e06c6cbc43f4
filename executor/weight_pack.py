"""A layer's weights packed in one byte buffer, so that a fetch is one message.

Each message between two processes costs a round of scheduling on both (on a busy core, a time
slice each), so a borrowed layer travels as one buffer, not one message per tensor.  The lender
packs once (:func:`pack`); the borrower receives into one buffer and views it as the tensors
(:func:`unpack`, no copy), each at an offset aligned to its element size.

>>> import torch
>>> w, b = torch.randn(3, 2), torch.arange(3)
>>> shapes = (Boundary("w", (3, 2), w.dtype), Boundary("b", (3,), b.dtype))
>>> flat = pack((w, b))
>>> flat.dtype, flat.numel() == packed_size(shapes) == 3 * 2 * 4 + 3 * 8
(torch.uint8, True)
>>> [torch.equal(x, y) for x, y in zip(unpack(flat, shapes), (w, b))]
[True, True]
"""

from __future__ import annotations

import math

import torch

from pipeplan.executor.stages import Boundary

__all__ = ["pack", "packed_size", "unpack"]


def _nbytes(b: Boundary) -> int:
    return math.prod(b.shape) * b.dtype.itemsize


def _offsets(tensors: tuple[Boundary, ...]) -> tuple[list[int], int]:
    """Byte offset of each tensor in the packed buffer, aligned to its element size, and the total."""
    offsets, end = [], 0
    for b in tensors:
        end += -end % b.dtype.itemsize
        offsets.append(end)
        end += _nbytes(b)
    return offsets, end


def packed_size(tensors: tuple[Boundary, ...]) -> int:
    """Bytes of the buffer :func:`pack` makes of tensors of these shapes and dtypes."""
    return _offsets(tensors)[1]


def pack(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The tensors' bytes in one contiguous ``uint8`` buffer, as :func:`unpack` reads it back."""
    offsets, total = _offsets(tuple(Boundary("", tuple(t.shape), t.dtype) for t in tensors))
    flat = torch.empty(total, dtype=torch.uint8)
    for t, start in zip(tensors, offsets, strict=True):
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
        flat[start:start + raw.numel()] = raw
    return flat


def unpack(flat: torch.Tensor, tensors: tuple[Boundary, ...]) -> tuple[torch.Tensor, ...]:
    """Views of ``flat`` (from :func:`pack`) as tensors of these shapes and dtypes: no copy."""
    offsets, _ = _offsets(tensors)
    return tuple(flat[start:start + _nbytes(b)].view(b.dtype).view(b.shape)
                 for b, start in zip(tensors, offsets, strict=True))
