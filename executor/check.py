"""Compare a pipeline's outputs with the unsplit model's, on the same device and in the same dtype.

The reference is the eager model run on the last stage's device, on the same microbatches.  The
tolerance follows from the arithmetic both sides used, not from a guess per model:

========================  =======  ==========================================================
arithmetic                 tol      why
========================  =======  ==========================================================
fp32 on CPU               1e-5     same kernels; only reduction order may differ
fp32 on CUDA              1e-4     the exported graph may pick other kernels than eager
TF32 (CUDA matmul/conv)   5e-3     10-bit mantissa (unit round-off 4.9e-4), over many layers
fp16                      5e-3     10-bit mantissa
bf16                      3e-2     7-bit mantissa (unit round-off 3.9e-3)
========================  =======  ==========================================================

An element passes when ``|got − expected| ≤ tol · (max|expected| + |expected|)``: the error is
measured against the output's own scale, so logits of 1e3 and probabilities of 1e-3 are judged
alike, and a genuine mismatch (a wrong weight, a swapped input) is off by O(1) of that scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

__all__ = ["CheckResult", "compare_outputs", "tensor_leaves", "tolerance"]


def tolerance(dtype: torch.dtype, device_type: str, *, matmul_tf32: bool | None = None,
              cudnn_tf32: bool | None = None, convolutions: bool = False) -> tuple[float, str]:
    """The relative tolerance for outputs computed in ``dtype`` on ``device_type``, and why.

    >>> tolerance(torch.float32, "cpu")
    (1e-05, 'fp32 on cpu')
    >>> tolerance(torch.float32, "cuda", matmul_tf32=True, cudnn_tf32=False)
    (0.005, 'fp32 with TF32 matmuls on cuda')
    >>> tolerance(torch.bfloat16, "cuda")[0]
    0.03
    """
    if dtype == torch.bfloat16:
        return 3e-2, f"bf16 on {device_type}"
    if dtype == torch.float16:
        return 5e-3, f"fp16 on {device_type}"
    if device_type != "cuda":
        return 1e-5, f"fp32 on {device_type}"
    if matmul_tf32 is None:
        matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    if cudnn_tf32 is None:
        cudnn_tf32 = torch.backends.cudnn.allow_tf32
    tf32 = [what for what, on in (("matmuls", matmul_tf32), ("convolutions", cudnn_tf32 and convolutions)) if on]
    if tf32:
        return 5e-3, f"fp32 with TF32 {' and '.join(tf32)} on {device_type}"
    return 1e-4, f"fp32 on {device_type}"


class CheckResult(NamedTuple):
    ok: bool
    message: str
    max_abs_diff: float | None  # largest |got − expected| over all outputs
    max_rel_diff: float | None  # the same over each output's max|expected|: what the tolerance bounds
    tolerance: float
    basis: str  # why that tolerance
    batches: int

    def as_dict(self) -> dict[str, Any]:
        return self._asdict()


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors of a model's (or a pipeline's) output, in pytree order: what is compared and returned.

    >>> [t.tolist() for t in tensor_leaves({"logits": torch.tensor([1.0]), "hidden": (None, torch.tensor([2.0]))})]
    [[1.0], [2.0]]
    """
    return [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def compare_outputs(got_batches: Sequence[Any], reference: Callable[[int], list[torch.Tensor]], *,
                    tol: float, basis: str) -> CheckResult:
    """Compare each batch's pipeline outputs with ``reference(b)`` (the unsplit model's leaves).

    >>> ref = lambda b: [torch.tensor([1.0, 2.0])]
    >>> compare_outputs([(torch.tensor([1.0, 2.0]),)], ref, tol=1e-5, basis="fp32 on cpu").ok
    True
    >>> bad = compare_outputs([(torch.tensor([1.0, 2.5]),)], ref, tol=1e-5, basis="fp32 on cpu")
    >>> bad.ok, bad.max_abs_diff, bad.max_rel_diff
    (False, 0.5, 0.25)
    >>> bad.message.split(" (")[0]
    'batch 0, output 0: 1 of 2 elements differ by more than 1e-05 of the output scale'

    """
    worst_abs, worst_rel = 0.0, 0.0
    n = len(got_batches)
    for b, got in enumerate(got_batches):
        got_leaves, expected = tensor_leaves(got), reference(b)
        if len(got_leaves) != len(expected):
            return CheckResult(False, f"batch {b}: the pipeline returned {len(got_leaves)} outputs, the model "
                               f"{len(expected)}", None, None, tol, basis, n)
        for i, (g, e) in enumerate(zip(got_leaves, expected, strict=True)):
            g = g.to(e.device)
            if g.shape != e.shape or g.dtype != e.dtype:
                return CheckResult(False, f"batch {b}, output {i}: the pipeline returned {tuple(g.shape)} "
                                   f"{g.dtype}, the model {tuple(e.shape)} {e.dtype}", None, None, tol, basis, n)
            if not e.is_floating_point():
                if not torch.equal(g, e):
                    return CheckResult(False, f"batch {b}, output {i}: integer outputs differ", None, None,
                                       tol, basis, n)
                continue
            if not e.numel():
                continue
            g64, e64 = g.double(), e.double()
            finite = torch.isfinite(e64)
            if not torch.equal(finite, torch.isfinite(g64)) or not torch.equal(g64[~finite], e64[~finite]):
                return CheckResult(False, f"batch {b}, output {i}: infinities or NaNs differ", None, None,
                                   tol, basis, n)
            diff = (g64 - e64)[finite].abs()
            scale = float(e64[finite].abs().max()) if bool(finite.any()) else 0.0
            bound = tol * (scale + e64[finite].abs())
            max_abs = float(diff.max()) if diff.numel() else 0.0
            rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
            worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, rel)
            bad = int((diff > bound).sum())
            if bad:
                return CheckResult(False, f"batch {b}, output {i}: {bad} of {e.numel()} elements differ by more than "
                                   f"{tol:g} of the output scale (max abs {max_abs:.3g}, rel {rel:.3g}; {basis})",
                                   max_abs, rel, tol, basis, n)
    return CheckResult(True, f"outputs match the unsplit model (max abs {worst_abs:.3g}, rel {worst_rel:.3g}; "
                       f"tolerance {tol:g} for {basis})", worst_abs, worst_rel, tol, basis, n)
