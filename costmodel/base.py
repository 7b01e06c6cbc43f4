"""The one interface every cost model implements, and that the planner and executor use."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device, Link

__all__ = ["CostModel", "LayerMemory"]


@dataclass(frozen=True)
class LayerMemory:
    """Bytes a layer needs on the device that runs it, for one microbatch in flight."""

    params: int  # weights and buffers: resident once per device
    activations: int  # outputs kept until the next stage has consumed them: one per microbatch
    workspace: int  # intermediates alive only while the layer runs

    @property
    def total(self) -> int:
        return self.params + self.activations + self.workspace


class CostModel(ABC):
    """Predicts how long a layer takes on a device under a load, and how much memory it needs.

    Implementations: :class:`pipeplan.costmodel.analytic.RooflineModel` (no data needed) and the learned,
    contention-aware models trained from profiles.
    """

    name: str = "cost model"
    # Set by pipeplan.costmodel.registry.load_cost_model, so that a plan records exactly which model made it:
    spec: str | None = None  # what to load it again with: a name, or a model file's absolute path
    digest: str | None = None  # "sha256:…" of the model file; None for a model without a file

    @abstractmethod
    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        """Seconds for one forward pass of ``layer`` on ``device``.

        ``load`` is the contention to assume; ``None`` means the device's current ``load``.
        """

    def layer_times(self, layers: Sequence[Layer], device: Device, load: Contention | None = None) -> list[float]:
        """:meth:`layer_time` of each of ``layers``; a model that predicts in batches overrides it."""
        return [self.layer_time(layer, device, load) for layer in layers]

    def stage_overhead(self, device: Device, load: Contention | None = None) -> float:
        """Seconds a pipeline stage on ``device`` pays once per microbatch, whatever its layers.

        0 unless a model says otherwise. On a time-sliced GPU a stage waits for other contexts'
        slices once per pass it launches and synchronises (:mod:`pipeplan.costmodel.timeslice`): a cost
        that no split of a stage's layers changes, so it is not in any :meth:`layer_time`.
        """
        return 0.0

    def stage_time(self, layers: Sequence[Layer], device: Device, load: Contention | None = None) -> float:
        """Seconds of one microbatch through a stage of ``layers`` on ``device``: their
        :meth:`layer_times` and the :meth:`stage_overhead` once (0 for no layers)."""
        if not layers:
            return 0.0
        return sum(self.layer_times(layers, device, load)) + self.stage_overhead(device, load)

    def for_model(self, model: str) -> CostModel:
        """The cost model to price the graph of ``model`` (:attr:`ModelGraph.model`) with: this one, unless
        the model learns per model (:class:`pipeplan.costmodel.calibration.CalibratedCostModel`
        prefers the runs of the model it prices)."""
        return self

    def predict(self, layer: Layer, device: Device, contention: Contention | None = None) -> float:
        """Alias of :meth:`layer_time` with the name the design documents use."""
        return self.layer_time(layer, device, contention)

    def layer_memory(self, layer: Layer) -> LayerMemory:
        """Parameters, kept activations and transient workspace of ``layer``.

        The workspace bound is what the layer writes beyond its outputs: eager execution keeps at
        most that many intermediate bytes alive at once.
        """
        return LayerMemory(
            params=layer.param_bytes,
            activations=layer.activation_bytes,
            workspace=max(0, layer.bytes_written - layer.activation_bytes),
        )

    def link_time(self, nbytes: float, link: Link) -> float:
        """Seconds to move ``nbytes`` over ``link`` (:meth:`Link.time`: latency + bytes / bandwidth; 0 for none)."""
        return link.time(nbytes) if nbytes > 0 else 0.0
