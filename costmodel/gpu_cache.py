"""Which memory traffic of a layer stays in the GPU's L2 cache.

Eager PyTorch runs a layer's operators one kernel at a time, each reading the tensor the one before
wrote. A tensor that fits in L2 (50 MB on an H100) is still there when the next kernel reads it,
and a write to it need not reach DRAM before it is read again, so a chain of elementwise kernels
on such tensors runs at L2 rather than HBM bandwidth; a tensor larger than L2 streams from DRAM
each time. On the shared H100 measurements this is what the calibration residuals of memory-bound
layers show (``benchmarks/README.md``): elementwise and normalisation layers on 5–20 MB
activations (GPT-2 at batch 8, ViT at batch 8) ran 25–60% faster than DRAM bandwidth allows, the
same operators on 50–400 MB activations (batch 32–64) within a few % of it.

:func:`l2_resident` decides from the layer's shapes: its working set (its first input and its
output, at the run's dtype) fits in L2. The model then divides that layer's traffic by a fitted
``l2_speedup``.

>>> from pipeplan.costmodel.graph import Layer
>>> relu = Layer("r", "activation", "ReLU", 0, flops=0, bytes_read=4 * 2**20, bytes_written=4 * 2**20,
...              param_bytes=0, activation_bytes=4 * 2**20, kernels=1, input_shapes=[[2**20]])
>>> l2_resident(relu, 50 * 2**20, 4), l2_resident(relu, 50 * 2**20 // 8, 4)
(True, False)
"""

from __future__ import annotations

import math

from pipeplan.costmodel.graph import Layer

__all__ = ["L2_BYTES", "l2_resident"]

# L2 cache of the GPUs pipeplan knows (gpu_specs.KNOWN_GPUS names; NVIDIA architecture whitepapers).
L2_BYTES = {"H100-SXM": 50 * 2**20, "H100-PCIe": 50 * 2**20, "H200": 50 * 2**20, "A100-80GB": 40 * 2**20,
            "A100-40GB": 40 * 2**20}


def l2_resident(layer: Layer, l2_bytes: int, dtype_bytes: int) -> bool:
    """Whether ``layer``'s working set (first input and output, ``dtype_bytes`` per element) fits in
    an L2 of ``l2_bytes``: its kernels then read and write through the cache."""
    if not l2_bytes or not layer.input_shapes or not layer.input_shapes[0]:
        return False
    first = math.prod(layer.input_shapes[0]) * dtype_bytes
    output = layer.activation_bytes // 4 * dtype_bytes  # activation_bytes is at the capture's fp32
    return 0 < first + output <= l2_bytes
