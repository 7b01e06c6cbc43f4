"""The graph document's schema, for the OpenAPI description (``pipeplan.graph`` version 1).

The service checks a graph with :meth:`pipeplan.costmodel.graph.ModelGraph.from_dict`; these models only
describe the format (docs/graph-format.md) to clients and to schema-driven tools.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EdgeDoc", "GraphDoc", "LayerDoc", "TensorDoc"]

NonNegative = Field(..., ge=0)


class TensorDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[int]
    dtype: str
    bytes: int = NonNegative
    layers: list[str] = Field(default_factory=list, description="consumers of an input, producer of an output")


class LayerDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, description="module path, or scope:op for functional glue")
    kind: str = Field(..., min_length=1,
                      description="linear, conv, attention, … (pipeplan.costmodel.capture.features.KINDS)")
    module_type: str = Field(..., min_length=1)
    order: int = Field(..., ge=0, description="unique position in a topological order")
    flops: int = NonNegative
    bytes_read: int = NonNegative
    bytes_written: int = NonNegative
    param_bytes: int = NonNegative
    activation_bytes: int = NonNegative
    kernels: int = NonNegative
    input_shapes: list[list[int]] = Field(default_factory=list)
    input_dtypes: list[str] = Field(default_factory=list)
    output_shapes: list[list[int]] = Field(default_factory=list)
    output_dtypes: list[str] = Field(default_factory=list)
    ops: list[str] = Field(default_factory=list)
    channels_last: bool = Field(False, description="the first input is a 4-D map in channels-last strides")
    intensity: float | None = Field(None, description="derived; recomputed on load")


class EdgeDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    src: str
    dst: str
    bytes: int = NonNegative


class GraphDoc(BaseModel):
    """A captured model: layers in topological order and the bytes on each edge."""

    format: Literal["pipeplan.graph"]
    version: Literal[1]
    model: str = Field(..., min_length=1, max_length=256)
    batch_size: int = Field(..., ge=1)
    granularity: str = "leaf"
    total_param_bytes: int | None = Field(None, ge=0)
    meta: dict[str, Any] = Field(default_factory=dict)
    inputs: list[TensorDoc] = Field(default_factory=list)
    outputs: list[TensorDoc] = Field(default_factory=list)
    layers: list[LayerDoc] = Field(..., min_length=1)
    edges: list[EdgeDoc]
