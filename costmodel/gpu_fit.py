"""Fit the GPU cost model's constants on the calibration configurations of the H100 measurements.

Two least-squares fits of log errors (``scipy.optimize.least_squares``, trust-region reflective,
parameters in log space so they stay positive), on :data:`~pipeplan.costmodel.gpu_measurements.CALIBRATION`
only, never on the evaluation configurations:

1. idle: efficiencies, ramp, L2 speed-up, kernel times, host costs (per launch path) and the
   recording hooks' cost (not ``eff_other``, which no calibration layer can see, nor the L1
   bandwidth that prices depthwise convolutions, a datasheet figure: the calibration set has no
   grouped convolution), against the whole-pass wall clocks (each weighted as much as all of its
   configuration's leaf spans) and the leaf spans of every calibration pass;
2. sharing: per co-runner kind the stretch and slice wait, and how counts add up, against the
   wall clock under each of the six loads, with the idle constants fixed.

Each constant stays within a factor e¹² of its start, efficiencies at most 1, and ``host_pass``
within 1–100 µs (:data:`_BOUNDS`): what is known before any fit, without which a fold of the
cross-validation (:mod:`pipeplan.costmodel.gpu_cv`) that lacks a short pass drives a constant no
pass left in it can see to overflow, or to half a millisecond.

``python -m pipeplan.costmodel.gpu_fit`` writes ``costmodel/data/gpu/analytic-h100.json`` (``--capture``
first recaptures the shipped graphs). It takes about 20 s on one core.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeplan.costmodel.gpu import DEFAULT_PARAMS_PATH, GpuCostModel, GpuParams
from pipeplan.costmodel.gpu_accuracy import module_spans
from pipeplan.costmodel.gpu_measurements import (
    CALIBRATION,
    LOADS,
    MEASUREMENTS_PATH,
    capture_graphs,
    graphs,
    load_contention,
    measurements,
)
from pipeplan.costmodel.gpu_specs import gpu_device
from pipeplan.costmodel.hardware import Device
from pipeplan.costmodel.timeslice import SharingParams

__all__ = ["IDLE_NAMES", "SHARING_NAMES", "fit", "h100"]

log = logging.getLogger(__name__)

# eff_other is not fitted: no calibration layer outside matrix products and convolutions has FLOPs,
# so the data cannot see it (a fit drove it to 1e-18).
IDLE_NAMES = ("eff_linear", "eff_conv", "eff_attention", "flops_half", "eff_memory", "eff_elementwise",
              "l2_speedup", "kernel_time", "kernel_time_streaming", "host_module", "host_container", "host_kernel",
              "host_gemm", "host_conv", "host_norm", "host_attention", "host_view", "host_pass", "hook", "event")
SHARING_NAMES = ("share_compute", "share_memory", "share_mixed", "slice_compute", "slice_memory", "slice_mixed",
                 "alpha")
_EFFICIENCIES = {"eff_linear", "eff_conv", "eff_attention", "eff_memory", "eff_elementwise"}
_INSTRUMENT = ("hook", "event")
_START = {"hook": 1e-5, "event": 1e-6, "l2_speedup": 1.5, "kernel_time_streaming": 1e-6}
_SPAN = 12.0
# What is known of a constant before any fit. Entering a forward from Python and the synchronise
# that ends it take tens of microseconds (a CUDA synchronise's round trip is about 10 µs, a Python
# call a few): without a bound, a fold that lacks a short pass lets host_pass absorb whatever the
# long passes leave over (0.5 ms, 2.6× mlp@256's whole pass).
_BOUNDS = {"host_pass": (1e-6, 1e-4)}


def h100() -> Device:
    """The measured device, by the type torch reported for it."""
    return gpu_device(json.loads(MEASUREMENTS_PATH.read_text())["device"])


def _least_squares(residuals: Callable[[dict[str, float]], list[float]], start: dict[str, float],
                   names: Sequence[str]) -> dict[str, float]:
    from scipy.optimize import least_squares

    def unpack(x: np.ndarray) -> dict[str, float]:
        return {n: math.exp(v) for n, v in zip(names, x, strict=True)}

    # In log space, within a factor e^12 of the start (a fold of the cross-validation that sees no
    # layer of some kind must not drive its constant to overflow); efficiencies at most 1.
    x0 = np.log([start[n] for n in names])
    lower = np.array([math.log(_BOUNDS[n][0]) if n in _BOUNDS else v - _SPAN for n, v in zip(names, x0, strict=True)])
    upper = np.array([math.log(_BOUNDS[n][1]) if n in _BOUNDS else 0.0 if n in _EFFICIENCIES else v + _SPAN
                      for n, v in zip(names, x0, strict=True)])
    x0 = np.clip(x0, lower + 1e-6, upper - 1e-6)
    result = least_squares(lambda x: np.asarray(residuals({**start, **unpack(x)})), x0, method="trf", x_scale=1.0,
                           bounds=(lower, upper))
    log.info("fit of %s: cost %.4f after %d evaluations", ", ".join(names), result.cost, result.nfev)
    return {**start, **unpack(result.x)}


Residuals = Callable[[dict[str, float]], list[float]]


def _idle_residuals(base: GpuCostModel, device: Device, keys: Sequence[str]) -> Residuals:
    graph_of, measured = graphs(), {m.key: m for m in measurements()}

    def residuals(values: dict[str, float]) -> list[float]:
        model = base.with_params(**{k: v for k, v in values.items() if k not in _INSTRUMENT})
        out = []
        for key in keys:
            graph, m = graph_of[key], measured[key]
            spans = module_spans(model, graph, device, values["hook"], values["event"])
            pairs = [(spans[n], s) for n, s in m.modules.items() if n in spans]
            weight = math.sqrt(len(pairs))  # the pass counts as much as all its spans together
            out.append(weight * math.log(model.pass_time(graph.layers, device) / m.idle))
            out += [math.log(max(p, 1e-9) / s) for p, s in pairs]
        return out
    return residuals


def _sharing_residuals(base: GpuCostModel, device: Device, keys: Sequence[str]) -> Residuals:
    graph_of, measured = graphs(), {m.key: m for m in measurements()}

    def residuals(values: dict[str, float]) -> list[float]:
        model = base.with_params(sharing=replace(base.params.sharing, **values))
        return [math.log(model.pass_time(graph_of[key].layers, device, load_contention(load))
                         / measured[key].wall(load)) for key in keys for load in LOADS]
    return residuals


def fit(keys: Sequence[str] = tuple(sorted(CALIBRATION))) -> tuple[GpuParams, dict[str, float]]:
    """Fitted constants, and the recording instrument's (hook host time, event GPU time), from the
    configurations ``keys`` (the calibration set)."""
    leaked = set(keys) - CALIBRATION
    if leaked:
        raise ValueError(f"refusing to fit on evaluation configurations {sorted(leaked)}")
    device = h100()
    base = GpuCostModel(GpuParams())
    start = {**{n: getattr(base.params, n) for n in IDLE_NAMES if n not in _INSTRUMENT}, **_START}
    # the launch paths' host costs default to host_kernel, and start from it
    start = {n: base.params.host_kernel if v is None else v for n, v in start.items()}
    idle = _least_squares(_idle_residuals(base, device, keys), start, IDLE_NAMES)
    instrument = {n: idle.pop(n) for n in _INSTRUMENT}
    model = base.with_params(**idle)
    shared_start = {n: getattr(SharingParams(), n) for n in SHARING_NAMES}
    shared = _least_squares(_sharing_residuals(model, device, keys), shared_start, SHARING_NAMES)
    params = replace(model.params, sharing=replace(model.params.sharing, **shared),
                     fitted_on=f"{MEASUREMENTS_PATH.name}: calibration configurations {', '.join(keys)}")
    return params, instrument


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeplan.costmodel.gpu_fit", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_PARAMS_PATH)
    parser.add_argument("--capture", action="store_true", help="recapture the shipped leaf graphs first")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.capture:
        capture_graphs()
    params, instrument = fit()
    doc: dict[str, Any] = {"params": params.to_dict(), "instrument": instrument}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
