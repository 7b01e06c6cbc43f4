"""What a captured layer launches on a GPU: kernels, hidden copies, and which units its FLOPs use.

A captured :class:`~pipeplan.costmodel.graph.Layer` lists its operators (``aten.linear``, ``aten.view``, …)
and counts as kernels those whose result does not alias an input. On a GPU three corrections follow
from how eager PyTorch and its kernels work, not from any measurement:

- **No launch.** ``getitem`` is Python indexing of a tuple, not an operator; ``aten.dropout`` in
  inference returns its input. Neither launches a kernel, and ``getitem`` does not even reach the
  dispatcher.
- **Hidden copies.** A view costs no kernel, but a ``reshape``/``flatten``/``contiguous`` of a
  transposed or permuted tensor must copy it, and so must an operator that needs a contiguous
  input (layer and group norms, matrix products) when a transposed or permuted view reaches it,
  from its own layer or the end of the one before. Each copy is one more kernel that reads and
  writes the tensor.
- **Which units.** Tensor cores need channel counts that tile their fragments: multiples of 4 for
  TF32 and 8 for bf16/fp16 (NVIDIA, *Convolutional Layers User's Guide*, "Channels In And Out";
  *Matrix Multiplication Background User's Guide*). An RGB input convolution (3 channels) runs on
  CUDA cores. A grouped convolution whose per-output reduction is shorter than its input channels
  (depthwise: one input channel per group) has no matrix to tile at all; PyTorch runs fp32
  depthwise convolutions with its own direct kernel, which loads an input value and a weight for
  every multiply-add, so it is bound by the SMs' L1 load bandwidth (128 bytes per clock per SM):
  ``FLOPs × dtype bytes / l1_bandwidth``.

>>> from pipeplan.costmodel.graph import Layer
>>> out = 4 * 8 * 128 * 768  # the attention output, (8, 128, 768) in fp32, copied once by the reshape
>>> attn = Layer("a", "attention", "functional", 0, flops=1, bytes_read=1, bytes_written=out, param_bytes=0,
...              activation_bytes=out, kernels=1,
...              ops=["aten.scaled_dot_product_attention", "aten.transpose", "aten.reshape"])
>>> launches(attn) == Launches(kernels=2, dispatches=1, copy_bytes=2 * out)
True
"""

from __future__ import annotations

import math
from typing import NamedTuple

from pipeplan.costmodel.graph import Layer

__all__ = ["HOST_CLASSES", "Launches", "grouped_conv", "host_classes", "launches", "strided_into",
           "tensor_core_ready"]

# Operators whose result is a view with a non-contiguous layout.
_STRIDING = frozenset({"aten.transpose", "aten.permute", "aten.swapaxes", "aten.movedim"})
# View-returning operators that copy when the layout cannot be viewed (a strided input).
_MAYBE_COPY = frozenset({"aten.reshape", "aten.flatten", "aten.contiguous"})
# Operators that make their input contiguous before they start.
_NEED_CONTIGUOUS = frozenset({"aten.layer_norm", "aten.group_norm", "aten.rms_norm", "aten.linear",
                              "aten.matmul", "aten.addmm", "aten.mm"})
# Captured as kernels, launch nothing in inference.
_NO_LAUNCH = frozenset({"aten.dropout", "aten.feature_dropout", "aten.alpha_dropout"})
_NOT_AN_OPERATOR = frozenset({"getitem"})
# Operators that are views (no kernel) whatever the capture's schema check says.
_VIEWS = frozenset({"aten.view", "aten._unsafe_view", "aten.unsqueeze", "aten.squeeze", "aten.expand",
                    "aten.slice", "aten.select", "aten.split", "aten.unbind", "aten.chunk", "aten.t", "aten.alias",
                    "aten.detach", "aten.to", "aten.as_strided"}) | _STRIDING | _MAYBE_COPY


# Operators whose host path goes through a library (cuBLAS, cuDNN, the fused attention kernels)
# or a heavier native path (normalisations), by class: see :func:`host_classes`.
HOST_CLASSES: dict[str, frozenset[str]] = {
    "gemm": frozenset({"aten.linear", "aten.addmm", "aten.mm", "aten.bmm", "aten.matmul", "aten.baddbmm"}),
    "conv": frozenset({"aten.conv1d", "aten.conv2d", "aten.conv3d", "aten.convolution", "aten._convolution"}),
    "norm": frozenset({"aten.layer_norm", "aten.batch_norm", "aten.group_norm", "aten.rms_norm",
                       "aten.instance_norm"}),
    "attention": frozenset({"aten.scaled_dot_product_attention"}),
}


class Launches(NamedTuple):
    """What a layer costs the host and the GPU beyond its captured FLOPs and bytes."""

    kernels: int  # kernels the GPU runs (captured kernels, less those that launch nothing, plus copies)
    dispatches: int  # operators that reach the dispatcher but launch nothing (views)
    copy_bytes: int  # bytes the hidden copies read and write, at the capture's dtype


def _numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 0


def strided_into(previous: Layer | None, layer: Layer) -> bool:
    """Whether ``previous`` hands ``layer`` a transposed or permuted view: its last operator makes
    one, and its last output has the shape of ``layer``'s first input (a layer list carries no
    edges; the shape tells the consumer from a sibling, such as a key projection after a query's)."""
    if previous is None or not previous.output_shapes or not layer.input_shapes:
        return False
    ops = [op for op in previous.ops if op not in _NOT_AN_OPERATOR]
    return bool(ops) and ops[-1] in _STRIDING and previous.output_shapes[-1] == layer.input_shapes[0]


def launches(layer: Layer, strided_input: bool = False) -> Launches:
    """Kernels, dispatcher-only operators and copy traffic of ``layer`` on a GPU.

    ``strided_input``: the layer before it hands it a transposed or permuted view
    (:func:`strided_into`).
    """
    strided, copies, copy_elems, dropped = strided_input, 0, 0, 0
    first_input = _numel(layer.input_shapes[0]) if layer.input_shapes else 0
    output = layer.activation_bytes // 4
    operators = [op for op in layer.ops if op not in _NOT_AN_OPERATOR]
    for op in operators:
        if op in _NO_LAUNCH:
            dropped += 1
        elif op in _STRIDING:
            strided = True
        elif op in _MAYBE_COPY and strided:
            copies, copy_elems, strided = copies + 1, copy_elems + output, False
        elif op not in _VIEWS:
            if op in _NEED_CONTIGUOUS and strided:
                copies, copy_elems = copies + 1, copy_elems + first_input
            strided = False
    # The capture counted every operator that does not return a view as a kernel, dropout
    # included; the copies were views to it. Whatever is neither reaches only the dispatcher.
    kernels = max(0, layer.kernels - dropped) + copies
    dispatches = max(0, len(operators) - layer.kernels - copies + dropped) if operators else 0
    return Launches(kernels, dispatches, 2 * 4 * copy_elems)


def host_classes(layer: Layer) -> dict[str, int]:
    """How many of ``layer``'s kernels go through each host path of :data:`HOST_CLASSES`.

    A kernel's launch costs the host more than the dispatcher's trip when a library call stands
    between them: a matrix product asks cuBLAS for a heuristic and a workspace, a convolution
    looks its plan up in cuDNN's cache and sets descriptors, a normalisation checks and reshapes
    its statistics' shapes, fused attention picks a backend among several. Elementwise operators
    go from the dispatcher straight to a TensorIterator launch. Layers whose kernels include no
    such operator have none.

    >>> from pipeplan.costmodel.graph import Layer
    >>> conv = Layer("c", "conv", "Conv2d", 0, flops=1, bytes_read=1, bytes_written=1, param_bytes=0,
    ...              activation_bytes=1, kernels=2, ops=["aten.conv2d", "aten.relu"])
    >>> host_classes(conv)
    {'gemm': 0, 'conv': 1, 'norm': 0, 'attention': 0}
    """
    return {name: sum(op in ops for op in layer.ops) for name, ops in HOST_CLASSES.items()}


def grouped_conv(layer: Layer) -> bool:
    """Whether ``layer`` is a single grouped convolution whose per-output reduction (input
    channels per group × kernel area, FLOPs / 2 / outputs) is shorter than its input channels:
    depthwise convolutions, for which no matrix unit helps.

    >>> from pipeplan.costmodel.graph import Layer
    >>> dw = Layer("dw", "conv", "Conv2d", 0, flops=2 * 8 * 96 * 56 * 56 * 49, bytes_read=0,
    ...            bytes_written=4 * 8 * 96 * 56 * 56, param_bytes=4 * 96 * 50, activation_bytes=0,
    ...            kernels=1, input_shapes=[[8, 96, 56, 56]], ops=["aten.conv2d"])
    >>> grouped_conv(dw)
    True
    """
    if layer.kind != "conv" or layer.kernels != 1 or not layer.input_shapes or len(layer.input_shapes[0]) < 3:
        return False
    outputs = layer.bytes_written / 4
    if not outputs or not layer.flops:
        return False
    return layer.flops / (2 * outputs) < layer.input_shapes[0][1]


def tensor_core_ready(layer: Layer, dtype: str) -> bool:
    """Whether the channels a tensor core would tile are multiples of its fragment: 4 for TF32,
    8 for bf16 and fp16 (input channels of a convolution, input features of a matrix product)."""
    if not layer.input_shapes or not layer.input_shapes[0]:
        return True
    shape = layer.input_shapes[0]
    channels = shape[1] if layer.kind == "conv" and len(shape) >= 3 else shape[-1]
    return channels % (4 if dtype == "tf32" else 8) == 0
