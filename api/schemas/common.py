"""Shapes shared by every resource: errors, names, references to a model or a cluster."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, SkipValidation, Tag, model_validator

from pipeplan.api.schemas.graph import GraphDoc
from pipeplan.api.text import check_text
from pipeplan.costmodel.cluster import ClusterSpec

__all__ = [
    "NAME_PATTERN", "ClusterRef", "ErrorItem", "ErrorResponse", "GraphModelRef", "ModelRef", "Name",
    "Strict", "TextChecked", "ZooModelRef",
]

# Registered clusters and learned cost models are named in URLs and file names: keep names plain.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, description="letters, digits, '_', '.', '-'; 1 to 128")]


class Strict(BaseModel):
    """Request bodies: unknown fields are refused (a typo is named, not ignored); no inf or NaN."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TextChecked(BaseModel):
    """A request body whose every string, however deep (graph documents, specs), is checked before
    anything else: text that cannot be stored or echoed is a 422 naming its place, never a 500."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        check_text(data, ["body"])  # raises an ApiError: its loc names the string, pydantic's would not
        return data


class ErrorItem(BaseModel):
    loc: list[str | int] = Field(..., description="where the problem is: 'body', then field names and indices")
    msg: str
    type: str


class ErrorResponse(BaseModel):
    detail: list[ErrorItem]


class ZooModelRef(Strict):
    """A model of the zoo (``GET /v1/models``), captured by the service with these input sizes."""

    name: str = Field(..., min_length=1, max_length=64, examples=["tinygpt"])
    batch: int = Field(1, ge=1, le=65536, description="batch size of one microbatch")
    granularity: str = Field("leaf", pattern=r"^(leaf|block|depth:[0-9]{1,2})$",
                             description="leaf, block or depth:N — what one layer is")
    seq_len: int | None = Field(None, ge=1, le=65536, description="tokens per sequence (token models)")
    image_size: int | None = Field(None, ge=1, le=8192, description="image side in pixels (image models)")
    kv_context: int | None = Field(None, ge=1, le=2**20,
                                   description="decoders: count a KV cache of this many tokens per sequence, for "
                                               "every microbatch in flight, in each stage's memory")


class GraphModelRef(Strict):
    """A layer graph sent as JSON (``pipeplan graph MODEL --json``); see docs/graph-format.md."""

    # Validated by pipeplan.costmodel.graph.ModelGraph.from_dict, whose messages name the layer at fault;
    # the schema documents the format.
    graph: SkipValidation[GraphDoc]


def _model_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "graph" if "graph" in value else "zoo"
    return "graph" if isinstance(value, GraphModelRef) else "zoo"


ModelRef = Annotated[
    Annotated[ZooModelRef, Tag("zoo")] | Annotated[GraphModelRef, Tag("graph")],
    Discriminator(_model_kind),
    Field(description="a zoo model by name, or a graph document"),
]

ClusterRef = Annotated[
    Name | ClusterSpec,
    Field(description="the name of a registered (or built-in) cluster, or an inline cluster spec"),
]
