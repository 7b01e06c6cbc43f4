"""Operators that make a layer of their own, and the namespaces of torch's own operators, named without
importing torch (the learned cost model reads these names; :mod:`pipeplan.costmodel.capture` groups by them
and counts their FLOPs).

A patch unfold or fold (``nn.Unfold`` / ``nn.Fold``) and a resize (``F.interpolate`` / ``nn.Upsample``)
each run at a few GB/s on a CPU core: glue priced with one would be priced at its rate, and it,
inside a neighbour, at the neighbour's.
"""

from __future__ import annotations

__all__ = ["APART_OPS", "RESIZE_OPS", "TORCH_NAMESPACES", "UNFOLD_OPS"]

# Operators of these namespaces are torch's own (prim: metadata queries such as prim::device); any other
# namespace is a custom operator (``transformers::grouped_mm_fallback``): capture warns when it counts no
# FLOPs, and a layer holding one is named by it.
TORCH_NAMESPACES = frozenset({"aten", "prims", "prim"})

UNFOLD_OPS = ("aten.im2col", "aten.col2im")
# F.interpolate / nn.Upsample: a gather with interpolation weights.
RESIZE_OPS = ("aten.upsample_nearest1d", "aten.upsample_nearest2d", "aten.upsample_nearest3d",
              "aten._upsample_nearest_exact1d", "aten._upsample_nearest_exact2d", "aten._upsample_nearest_exact3d",
              "aten.upsample_linear1d", "aten.upsample_bilinear2d", "aten.upsample_bicubic2d",
              "aten.upsample_trilinear3d", "aten._upsample_bilinear2d_aa", "aten._upsample_bicubic2d_aa")
APART_OPS = UNFOLD_OPS + RESIZE_OPS
