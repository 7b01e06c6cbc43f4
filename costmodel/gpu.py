"""An analytic GPU cost model: what a forward pass launched from Python really waits for.

Eager PyTorch on a GPU runs two things at once: the host launches kernels (Python, the dispatcher,
the launch itself) and the GPU runs them as they arrive. What a layer launches is read from its
operators by :mod:`pipeplan.costmodel.gpu_kernels`: kernels (views, ``getitem`` and inference dropout launch
none; a reshape of a transposed tensor, or a permuted view reaching a layer norm or a matrix
product, adds a copy), dispatcher-only operators, and copy bytes. For each layer the model has

- a **host time** ``h = host_module·[leaf module] + host_container·[module calls entered] +
  Σ host_c·kernels of class c + host_view·dispatches`` (functional glue pays no module call; a
  block's or an attention module's own forward is paid when the first layer inside it starts).
  A kernel's launch costs the host by its path (:func:`pipeplan.costmodel.gpu_kernels.host_classes`):
  ``host_gemm`` through cuBLAS, ``host_conv`` through cuDNN, ``host_norm`` for normalisations,
  ``host_attention`` for fused attention, ``host_kernel`` for a plain TensorIterator kernel; and
- a **device time** ``g = t_k·kernels + max(FLOPs / (peak[dtype] · e_kind · r),
  bytes / (bandwidth · e_mem · c)) + copy bytes / (bandwidth · e_memory · c)``, where ``t_k`` is
  the fixed GPU time of a kernel (``kernel_time_streaming`` for elementwise operators and
  activations, which only stream; ``kernel_time`` for the rest, whose reductions, tiles and
  library set-up take longer to start and drain), ``c`` is ``l2_speedup`` when the layer's working
  set fits in L2 and 1 otherwise (:mod:`pipeplan.costmodel.gpu_cache`), ``peak[dtype]`` is
  the datasheet peak of the arithmetic the layer runs on (CUDA cores for fp32, tensor cores for
  TF32, bf16 and fp16; torch's defaults put fp32 matmuls on CUDA cores and fp32 convolutions on
  TF32 tensor cores; channels that do not tile a tensor core, such as an RGB input, fall back to
  CUDA cores), ``e_kind`` the efficiency achieved by the operator kind, ``r = F / (F + flops_half)``
  the ramp of small kernels that cannot fill the GPU, and ``e_mem`` one efficiency for elementwise
  operators and activations and another for the rest (normalisations, pooling, embeddings). A
  depthwise convolution has no matrix to tile: its FLOPs cost ``FLOPs × dtype bytes / L1
  bandwidth`` (an input and a weight loaded per multiply-add), from the datasheet, not fitted.

Layers run through a queue: the GPU starts a layer once the host has launched it and the previous
layer is done, so a pass takes ``F_L`` where ``F_l = max(F_{l-1}, H_l) + g_l`` and ``H_l`` is the
host's cumulative launch time. A launch-bound model (small batch) is priced by its host time, a
large one by its device time, and a mixed one by both, which a sum of per-layer maxima would
overestimate. :meth:`GpuCostModel.layer_times` returns the increments ``F_l − F_{l−1}`` (what CUDA
events around each layer measure, too); a pass adds ``host_pass`` and the slice waits once,
:meth:`GpuCostModel.stage_overhead`, which the planner charges once per stage.

Contention follows :mod:`pipeplan.costmodel.timeslice`: other contexts stretch the device time and the pass
waits for their slices once. The constants are fitted on an H100 (``costmodel/data/gpu/``, see
``costmodel/gpu_fit.py``); :func:`load_params` reads them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.gpu_cache import L2_BYTES, l2_resident
from pipeplan.costmodel.gpu_kernels import grouped_conv, host_classes, launches, strided_into, tensor_core_ready
from pipeplan.costmodel.gpu_specs import Dtype, dtype_bytes, recognise
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.costmodel.timeslice import SharingParams, sharing

__all__ = ["DEFAULT_PARAMS_PATH", "GpuCostModel", "GpuParams", "load_params"]

log = logging.getLogger(__name__)

DEFAULT_PARAMS_PATH = Path(__file__).parent / "data" / "gpu" / "analytic-h100.json"

# Kinds whose FLOPs run on matrix units (tensor cores where the dtype allows), and kinds that
# launch nothing in inference (dropout in eval, identity): they cost the host a call only.
_MATMUL_KINDS = frozenset({"linear", "attention"})
_NO_KERNEL_KINDS = frozenset({"identity", "reshape"})
_STREAMING_KINDS = frozenset({"elementwise", "activation"})


@dataclass(frozen=True)
class GpuParams:
    """The constants of :class:`GpuCostModel` (seconds, FLOPs and fractions of datasheet peaks)."""

    eff_linear: float = 0.6
    eff_conv: float = 0.5
    eff_attention: float = 0.3
    eff_other: float = 0.3  # FLOPs of any other kind (normalisations, pooling) on CUDA cores
    flops_half: float = 1e8  # a kernel of this many FLOPs reaches half its kind's efficiency
    eff_memory: float = 0.7  # normalisations, pooling, embeddings, the memory side of matmuls
    eff_elementwise: float = 0.9  # elementwise operators and activations stream at nearly full bandwidth
    l2_speedup: float = 1.0  # traffic of a layer whose working set fits in L2 runs this much faster
    kernel_time: float = 3e-6  # GPU time of one kernel however small (launch latency, tail)
    kernel_time_streaming: float | None = None  # the same for an elementwise kernel (None: kernel_time)
    host_module: float = 1e-5  # one nn.Module call from Python
    host_container: float = 1e-5  # one call of a module that holds others (a block's forward)
    host_kernel: float = 8e-6  # one operator through the dispatcher, and its launch
    # Launches through a heavier path than the dispatcher's (gpu_kernels.host_classes); None: host_kernel.
    host_gemm: float | None = None  # a matrix product's launch, through cuBLAS
    host_conv: float | None = None  # a convolution's launch, through cuDNN
    host_norm: float | None = None  # a layer, batch or group normalisation's launch
    host_attention: float | None = None  # fused attention's launch (backend choice, then its kernel)
    host_view: float = 2e-6  # one view or metadata operator (no kernel)
    host_pass: float = 5e-5  # entering the model, the final synchronise and returning
    sharing: SharingParams = field(default_factory=SharingParams)
    fitted_on: str = "defaults (not fitted)"

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, float) and not value >= 0:
                raise ValueError(f"GPU model parameter {name} must be non-negative, got {value!r}")
        for name in ("eff_linear", "eff_conv", "eff_attention", "eff_other", "eff_memory", "eff_elementwise"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"GPU model parameter {name} must be in (0, 1], got {getattr(self, name)!r}")

    def host(self, path: str) -> float:
        """Host seconds of one launch through ``path`` ("gemm", "conv", "norm", "attention" or
        "kernel"): its own constant, or ``host_kernel`` where it has none."""
        value = getattr(self, f"host_{path}")
        return self.host_kernel if value is None else float(value)

    @property
    def streaming_kernel_time(self) -> float:
        return self.kernel_time if self.kernel_time_streaming is None else self.kernel_time_streaming

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sharing": self.sharing.to_dict()}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> GpuParams:
        raw = dict(raw)
        shared = SharingParams.from_dict(raw.pop("sharing", {}))
        fitted_on = str(raw.pop("fitted_on", "unknown"))
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown GPU model parameters {sorted(unknown)}")
        values: dict[str, Any] = {k: None if v is None else float(v) for k, v in raw.items()}
        return cls(**values, sharing=shared, fitted_on=fitted_on)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


@cache
def _l2(device_type: str) -> int:
    """L2 bytes of a known GPU (0 for one pipeplan does not know: no traffic counted as cached)."""
    spec = recognise(device_type)
    return L2_BYTES.get(spec.name, 0) if spec is not None else 0


@cache
def _load(path: str) -> GpuParams:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read GPU model parameters {path}: {exc}") from None
    return GpuParams.from_dict(raw.get("params", raw))


def load_params(path: str | Path = DEFAULT_PARAMS_PATH) -> GpuParams:
    """Fitted constants from a JSON file (``{"params": {...}}`` or the bare object)."""
    return _load(str(Path(path).resolve()))


def containers(name: str) -> set[str]:
    """The module paths whose forward runs around a layer's: every proper prefix of its module
    path, except lists (a prefix followed by an index, ``h`` in ``h.0``: ModuleList has no forward;
    a Sequential's one call is missed). Functional layers (``block.attn:add``) sit in their owner.

    >>> sorted(containers("transformer.h.0.attn.c_attn"))
    ['transformer', 'transformer.h.0', 'transformer.h.0.attn']
    >>> sorted(containers("blocks.1.attn:split_1"))
    ['blocks.1', 'blocks.1.attn']
    """
    owner, functional, _ = name.partition(":")
    parts = owner.split(".")
    keep = parts if functional else parts[:-1]
    return {".".join(parts[:i]) for i in range(1, len(keep) + 1) if i == len(parts) or not parts[i].isdigit()}


class GpuCostModel(CostModel):
    """Host/device queue model of eager PyTorch on a GPU, with time-sliced sharing.

    ``dtype`` is the dtype the model runs in (graphs are captured in fp32; their bytes are scaled);
    ``tf32_matmul`` and ``tf32_conv`` are torch's ``allow_tf32`` switches (defaults as torch's).

    >>> from pipeplan.costmodel.gpu_specs import gpu_device
    >>> m = GpuCostModel(GpuParams())
    >>> fc = Layer("fc", "linear", "Linear", 0, flops=2 * 4096**3, bytes_read=3 * 4 * 4096**2,
    ...            bytes_written=4 * 4096**2, param_bytes=4 * 4096**2, activation_bytes=4 * 4096**2, kernels=1)
    >>> h100 = gpu_device("NVIDIA H100 80GB HBM3")
    >>> bf16 = GpuCostModel(GpuParams(), dtype="bf16")
    >>> round(m.layer_time(fc, h100) * 1e3, 2), round(bf16.layer_time(fc, h100) * 1e3, 3)
    (3.42, 0.235)
    """

    name = "analytic-gpu"

    def __init__(self, params: GpuParams | None = None, dtype: Dtype = "fp32", tf32_matmul: bool = False,
                 tf32_conv: bool = True) -> None:
        dtype_bytes(dtype)  # refuses an unknown dtype
        self.params = params if params is not None else load_params()
        self.dtype = dtype
        self.tf32_matmul = tf32_matmul
        self.tf32_conv = tf32_conv
        self._warned: set[str] = set()

    def with_params(self, **changes: Any) -> GpuCostModel:
        """A copy with some constants changed (what the fitting script explores)."""
        return GpuCostModel(replace(self.params, **changes), self.dtype, self.tf32_matmul, self.tf32_conv)

    # -- the pieces ---------------------------------------------------------------------------

    def _rates(self, device: Device, layer: Layer) -> tuple[float, float, float]:
        """(FLOP/s, DRAM bytes/s, L1 bytes/s) of the units ``layer`` runs on, on ``device``."""
        spec = recognise(device.type)
        if spec is None:
            if device.type not in self._warned:
                self._warned.add(device.type)
                log.warning("GPU type %r is not one pipeplan knows: using its peak_flops for every dtype",
                            device.type)
            # L1 moves half a byte per FLOP of the fp32 peak (128 B and 256 FLOP per SM clock)
            return device.peak_flops, device.mem_bandwidth, device.peak_flops / 2
        dtype: str = self.dtype
        kind = layer.kind
        if dtype == "fp32" and ((kind in _MATMUL_KINDS and self.tf32_matmul) or (kind == "conv" and self.tf32_conv)):
            dtype = "tf32"
        if kind not in _MATMUL_KINDS and kind != "conv" and dtype == "tf32":
            dtype = "fp32"
        if (kind in _MATMUL_KINDS or kind == "conv") and dtype != "fp32" and not tensor_core_ready(layer, dtype):
            dtype = "fp32"  # channels that do not tile a tensor core's fragment: CUDA cores
        return spec.peak(dtype), spec.mem_bandwidth, spec.l1_bandwidth

    def host_time(self, layer: Layer, strided_input: bool = False) -> float:
        """Seconds the host spends launching ``layer`` (``strided_input``: see
        :func:`pipeplan.costmodel.gpu_kernels.launches`)."""
        p = self.params
        launch = launches(layer, strided_input)
        module = p.host_module if layer.module_type != "functional" else 0.0
        heavy = host_classes(layer)
        plain = max(0, launch.kernels - sum(heavy.values()))
        return (module + p.host_kernel * plain + p.host_view * launch.dispatches
                + sum(p.host(path) * count for path, count in heavy.items()))

    def device_time(self, layer: Layer, device: Device, strided_input: bool = False) -> float:
        """Seconds the GPU spends on ``layer`` alone, idle."""
        p = self.params
        launch = launches(layer, strided_input)
        flop_rate, byte_rate, l1_rate = self._rates(device, layer)
        scale = dtype_bytes(self.dtype) / 4  # graphs are captured in fp32
        copies = launch.copy_bytes * scale / (byte_rate * p.eff_memory)
        if layer.kind in _NO_KERNEL_KINDS:
            return p.kernel_time * launch.kernels + copies
        compute = 0.0
        if grouped_conv(layer):  # a direct kernel: an input and a weight loaded per multiply-add
            compute = layer.flops * dtype_bytes(self.dtype) / l1_rate
        elif layer.flops:
            eff = {"linear": p.eff_linear, "conv": p.eff_conv, "attention": p.eff_attention}.get(layer.kind,
                                                                                               p.eff_other)
            compute = layer.flops / (flop_rate * eff * layer.flops / (layer.flops + p.flops_half))
        traffic = (layer.bytes_read + layer.bytes_written) * scale
        if l2_resident(layer, _l2(device.type), dtype_bytes(self.dtype)):  # costmodel/gpu_cache.py
            traffic, copies = traffic / p.l2_speedup, copies / p.l2_speedup
        streaming = layer.kind in _STREAMING_KINDS
        eff_mem = p.eff_elementwise if streaming else p.eff_memory
        fixed = p.streaming_kernel_time if streaming else p.kernel_time
        return fixed * launch.kernels + max(compute, traffic / (byte_rate * eff_mem)) + copies

    def costs(self, layers: Sequence[Layer], device: Device) -> list[tuple[float, float]]:
        """(host, idle device) seconds of each layer in order: a layer that receives a transposed
        or permuted view from the one before pays the copy that makes it contiguous, and the first
        layer inside a module that holds others pays that module's call (:func:`containers`)."""
        out: list[tuple[float, float]] = []
        previous: Layer | None = None
        entered: set[str] = set()
        for layer in layers:
            strided = strided_into(previous, layer)
            calls = containers(layer.name) - entered
            entered |= calls
            host = self.host_time(layer, strided) + self.params.host_container * len(calls)
            out.append((host, self.device_time(layer, device, strided)))
            previous = layer
        return out

    # -- CostModel ----------------------------------------------------------------------------

    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        """One layer on its own: the longer of launching it and running it (no per-pass costs)."""
        share = sharing(load if load is not None else device.load, self.params.sharing)
        return max(self.host_time(layer), self.device_time(layer, device) * (1.0 + share.stretch))

    def layer_times(self, layers: Sequence[Layer], device: Device, load: Contention | None = None) -> list[float]:
        """Each layer's share of one pass over ``layers`` in order: the increments of the queue's
        completion time. The pass's own costs (entering it, the final synchronise, the slice
        waits) are not in them: a stage pays those once, :meth:`stage_overhead`."""
        load = load if load is not None else device.load
        stretch = 1.0 + sharing(load, self.params.sharing).stretch
        host, done = 0.0, 0.0
        increments = []
        for host_s, device_s in self.costs(layers, device):
            host += host_s
            finish = max(done, host) + device_s * stretch
            increments.append(finish - done)
            done = finish
        return increments

    def stage_overhead(self, device: Device, load: Contention | None = None) -> float:
        """Once per pass a stage launches: entering it, synchronising at its end, and waiting for
        other contexts' time slices (:func:`pipeplan.costmodel.timeslice.sharing`)."""
        load = load if load is not None else device.load
        return self.params.host_pass + sharing(load, self.params.sharing).wait

    def pass_time(self, layers: Sequence[Layer], device: Device, load: Contention | None = None) -> float:
        """Wall seconds of one forward over ``layers``, launched by one process and synchronised
        at its end: what a pipeline stage waits for."""
        return self.stage_time(layers, device, load)
