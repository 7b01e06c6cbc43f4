"""The device a learned model was profiled on, shared by the tests that predict with shipped models."""

from __future__ import annotations

from pipeplan.costmodel.hardware import Device
from pipeplan.costmodel.learned import LearnedCostModel


def reference_device(model: LearnedCostModel) -> Device:
    """A device at the model's own profiled figures, so it predicts from its estimators (not the roofline)."""
    device_type, figures = next(iter(model.reference_devices.items()))
    return Device(id="core", type=device_type, memory="1GiB", peak_flops=figures["peak_flops"],
                  mem_bandwidth=figures["mem_bandwidth"])
