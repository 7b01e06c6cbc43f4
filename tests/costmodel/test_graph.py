"""The layer DAG: exact JSON round trips, chain detection, totals, and malformed documents refused."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pipeplan.costmodel.graph import GRAPH_FORMAT, GRAPH_VERSION, GraphError, Layer, ModelGraph, TensorInfo


def layer(name: str, order: int, **fields: Any) -> Layer:
    sizes: dict[str, Any] = {"flops": 100 * (order + 1), "bytes_read": 40, "bytes_written": 24,
                             "param_bytes": 16, "activation_bytes": 8, "kernels": 2}
    sizes.update(fields)
    return Layer(name, "linear", "Linear", order, **sizes)


def chain(n: int = 3) -> ModelGraph:
    """l0 -> l1 -> ... with edge i carrying 8 * (i + 1) bytes."""
    g = ModelGraph("chain", batch_size=4)
    for i in range(n):
        g.add_layer(layer(f"l{i}", i))
    for i in range(n - 1):
        g.add_edge(f"l{i}", f"l{i + 1}", 8 * (i + 1))
    return g


def diamond() -> ModelGraph:
    """a -> b -> d and a -> c -> d, with model tensors at both ends and shapes on the layers."""
    g = ModelGraph(
        "diamond", batch_size=2, granularity="block",
        inputs=[TensorInfo("x", [2, 4], "float32", 32, ["a"])],
        outputs=[TensorInfo("y", [2, 4], "float32", 32, ["d"])],
        total_param_bytes=48, meta={"seed": 0, "note": "hand-made"},
    )
    g.add_layer(layer("a", 0, input_shapes=[[2, 4]], input_dtypes=["float32"],
                      output_shapes=[[2, 4]], output_dtypes=["float32"], ops=["aten.linear"]))
    g.add_layer(layer("b", 1))
    g.add_layer(layer("c", 2, param_bytes=0, flops=0))
    g.add_layer(layer("d", 3, ops=["aten.add"]))
    g.add_edge("a", "b", 32)
    g.add_edge("a", "c", 32)
    g.add_edge("b", "d", 16)
    g.add_edge("c", "d", 16)
    return g


def doc(**changes: Any) -> dict[str, Any]:
    """The JSON form of ``chain()`` with top-level keys replaced (a value of None removes the key)."""
    d = chain().to_dict()
    for key, value in changes.items():
        if value is None:
            del d[key]
        else:
            d[key] = value
    return d


def with_layer(index: int, **changes: Any) -> dict[str, Any]:
    """``doc()`` with fields of layers[index] replaced (None removes the field)."""
    d = doc()
    for key, value in changes.items():
        if value is None:
            del d["layers"][index][key]
        else:
            d["layers"][index][key] = value
    return d


def refused(message: str) -> Any:
    return pytest.raises(GraphError, match=re.escape(message))


@pytest.fixture(scope="module")
def rescnn() -> ModelGraph:
    from pipeplan.costmodel.zoo import capture_model

    return capture_model("rescnn", 2)


# -- building and reading ---------------------------------------------------------------------


def test_layers_come_in_recorded_order() -> None:
    g = ModelGraph("shuffled", batch_size=1)
    for name, order in (("c", 2), ("a", 0), ("b", 1)):
        g.add_layer(layer(name, order))
    assert [lay.name for lay in g.layers] == ["a", "b", "c"]
    assert len(g) == 3 and "b" in g and "z" not in g


def test_total_flops() -> None:
    assert chain(3).total_flops == 100 + 200 + 300
    assert diamond().total_flops == 100 + 200 + 0 + 400


def test_total_param_bytes_sums_layers_unless_given() -> None:
    assert chain(3).total_param_bytes == 3 * 16
    assert diamond().total_param_bytes == 48


def test_edges_carry_bytes() -> None:
    assert sorted(chain(3).edges()) == [("l0", "l1", 8), ("l1", "l2", 16)]
    assert sorted(diamond().edges()) == [("a", "b", 32), ("a", "c", 32), ("b", "d", 16), ("c", "d", 16)]
    assert diamond().edge_bytes("c", "d") == 16


def test_repeated_edge_sums_bytes() -> None:
    g = chain(2)
    g.add_edge("l0", "l1", 5)
    assert list(g.edges()) == [("l0", "l1", 13)]


def test_predecessors_and_successors() -> None:
    g = diamond()
    assert sorted(g.successors("a")) == ["b", "c"]
    assert sorted(g.predecessors("d")) == ["b", "c"]
    assert g.predecessors("a") == [] and g.successors("d") == []


def test_getitem_unknown_layer_names_it() -> None:
    with pytest.raises(KeyError, match="no layer named 'zz' in graph of chain"):
        chain()["zz"]


def test_intensity() -> None:
    assert layer("x", 0, flops=640, bytes_read=40, bytes_written=24).intensity == 10.0
    assert layer("x", 0, bytes_read=0, bytes_written=0).intensity == 0.0


@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_path_is_a_chain(n: int) -> None:
    assert chain(n).is_chain


def test_branches_are_not_a_chain() -> None:
    assert not diamond().is_chain


def test_a_skip_is_not_a_chain() -> None:
    g = chain(3)
    g.add_edge("l0", "l2", 4)
    assert not g.is_chain


def test_disconnected_layers_are_not_a_chain() -> None:
    g = chain(3)
    g.add_layer(layer("lone", 3))
    assert not g.is_chain


def test_an_edge_out_of_order_is_not_a_chain() -> None:
    g = ModelGraph("gap", batch_size=1)
    for i in range(3):
        g.add_layer(layer(f"l{i}", i))
    g.add_edge("l0", "l2", 1)
    g.add_edge("l2", "l1", 1)
    assert not g.is_chain


def test_add_layer_refuses_duplicate() -> None:
    g = chain(2)
    with refused("duplicate layer name 'l1'"):
        g.add_layer(layer("l1", 7))


def test_add_edge_refuses_unknown_layer_and_self_loop() -> None:
    g = chain(2)
    with refused("edge l0 -> nope: unknown layer 'nope'"):
        g.add_edge("l0", "nope", 1)
    with refused("edge l1 -> l1: a layer cannot feed itself"):
        g.add_edge("l1", "l1", 1)


# -- JSON round trips -------------------------------------------------------------------------


def assert_same_layers(a: ModelGraph, b: ModelGraph) -> None:
    assert [lay.name for lay in a.layers] == [lay.name for lay in b.layers]
    for x, y in zip(a.layers, b.layers, strict=True):
        for f in dataclasses.fields(Layer):
            assert getattr(x, f.name) == getattr(y, f.name), (x.name, f.name)
    assert sorted(a.edges()) == sorted(b.edges())


@pytest.mark.parametrize("build", [chain, diamond])
def test_json_round_trip_is_exact(build: Any) -> None:
    g = build()
    back = ModelGraph.from_json(g.to_json())
    assert back == g
    assert_same_layers(back, g)
    assert (back.model, back.batch_size, back.granularity) == (g.model, g.batch_size, g.granularity)
    assert (back.inputs, back.outputs, back.meta) == (g.inputs, g.outputs, g.meta)
    assert back.total_param_bytes == g.total_param_bytes
    assert back.to_json() == g.to_json()


def test_compact_json_round_trips() -> None:
    g = diamond()
    assert ModelGraph.from_json(g.to_json(indent=None)) == g


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    g = diamond()
    path = tmp_path / "diamond.json"
    g.save(path)
    back = ModelGraph.load(path)
    assert back == g
    assert_same_layers(back, g)
    assert ModelGraph.load(str(path)) == g


def test_document_header() -> None:
    d = json.loads(chain().to_json())
    assert (d["format"], d["version"]) == (GRAPH_FORMAT, GRAPH_VERSION) == ("pipeplan.graph", 1)
    assert d["edges"] == [{"src": "l0", "dst": "l1", "bytes": 8}, {"src": "l1", "dst": "l2", "bytes": 16}]
    assert d["layers"][0]["intensity"] == round(100 / 64, 6)


def test_integral_float_sizes_are_read_as_integers() -> None:
    g = ModelGraph.from_dict(with_layer(0, flops=100.0))
    assert g["l0"].flops == 100 and isinstance(g["l0"].flops, int)


def test_real_graph_round_trips(rescnn: ModelGraph, tmp_path: Path) -> None:
    back = ModelGraph.from_json(rescnn.to_json())
    assert back == rescnn
    assert_same_layers(back, rescnn)
    rescnn.save(tmp_path / "rescnn.json")
    loaded = ModelGraph.load(tmp_path / "rescnn.json")
    assert loaded == rescnn
    assert_same_layers(loaded, rescnn)
    assert (loaded.inputs, loaded.outputs, loaded.meta) == (rescnn.inputs, rescnn.outputs, rescnn.meta)


def test_real_graph_shape(rescnn: ModelGraph) -> None:
    assert rescnn.model == "rescnn" and rescnn.batch_size == 2
    assert not rescnn.is_chain  # residual skips
    assert rescnn.total_flops == sum(lay.flops for lay in rescnn.layers) > 0
    assert all(nbytes > 0 for _, _, nbytes in rescnn.edges())
    assert [lay.order for lay in rescnn.layers] == sorted(lay.order for lay in rescnn.layers)
    rescnn.validate()


# -- malformed documents ----------------------------------------------------------------------


def test_cycle_is_refused_naming_the_path() -> None:
    d = doc()
    d["edges"].append({"src": "l2", "dst": "l0", "bytes": 4})
    with pytest.raises(GraphError, match=r"graph has a cycle: (l0 -> l1 -> l2 -> l0|l1 -> l2 -> l0 -> l1|"
                                         r"l2 -> l0 -> l1 -> l2)$"):
        ModelGraph.from_dict(d)


def test_two_layer_cycle_is_refused() -> None:
    d = doc()
    d["edges"].append({"src": "l1", "dst": "l0", "bytes": 4})
    with pytest.raises(GraphError, match=r"graph has a cycle: (l0 -> l1 -> l0|l1 -> l0 -> l1)$"):
        ModelGraph.from_dict(d)


def test_self_edge_is_refused() -> None:
    d = doc()
    d["edges"].append({"src": "l1", "dst": "l1", "bytes": 4})
    with refused("edge l1 -> l1: a layer cannot feed itself"):
        ModelGraph.from_dict(d)


@pytest.mark.parametrize("key", ["name", "kind", "module_type", "order", "flops", "bytes_read",
                                 "bytes_written", "param_bytes", "activation_bytes", "kernels"])
def test_missing_layer_field_is_named(key: str) -> None:
    who = "layers[1]" if key == "name" else "l1"
    with refused(f"layer {who!r} is missing field {key!r}"):
        ModelGraph.from_dict(with_layer(1, **{key: None}))


@pytest.mark.parametrize("key", ["model", "batch_size", "layers", "edges"])
def test_missing_top_level_field_is_named(key: str) -> None:
    with refused(f"graph is missing field {key!r}"):
        ModelGraph.from_dict(doc(**{key: None}))


@pytest.mark.parametrize("version", [99, 0, "1", None])
def test_unknown_version_is_refused(version: Any) -> None:
    d = doc()
    d["version"] = version
    with refused(f"unknown graph version {version!r}: this pipeplan reads version 1"):
        ModelGraph.from_dict(d)


@pytest.mark.parametrize("fmt", ["pipeplan.cluster", "", None])
def test_wrong_format_is_refused(fmt: Any) -> None:
    d = doc()
    if fmt is None:
        del d["format"]
    else:
        d["format"] = fmt
    with refused(f"not a pipeplan graph: 'format' must be 'pipeplan.graph', got {fmt!r}"):
        ModelGraph.from_dict(d)


@pytest.mark.parametrize("key", ["order", "flops", "bytes_read", "bytes_written", "param_bytes",
                                 "activation_bytes", "kernels"])
def test_negative_layer_size_is_refused(key: str) -> None:
    with refused(f"layer 'l2': {key} must be a non-negative integer, got -1"):
        ModelGraph.from_dict(with_layer(2, **{key: -1}))


@pytest.mark.parametrize("value", [1.5, "10", True, float("inf")])
def test_non_integer_layer_size_is_refused(value: Any) -> None:
    with refused(f"layer 'l0': bytes_read must be a non-negative integer, got {value!r}"):
        ModelGraph.from_dict(with_layer(0, bytes_read=value))


@pytest.mark.parametrize("value", [-8, 2.5, "8", True])
def test_bad_edge_bytes_is_refused(value: Any) -> None:
    d = doc()
    d["edges"][1]["bytes"] = value
    with refused(f"edges[1] (l1 -> l2): bytes must be a non-negative integer, got {value!r}"):
        ModelGraph.from_dict(d)


@pytest.mark.parametrize("key", ["src", "dst", "bytes"])
def test_edge_missing_field_is_named(key: str) -> None:
    d = doc()
    del d["edges"][0][key]
    with refused(f"edges[0] is missing field {key!r}"):
        ModelGraph.from_dict(d)


def test_edge_that_is_not_an_object_is_refused() -> None:
    d = doc()
    d["edges"][0] = ["l0", "l1", 8]
    with refused("edges[0] must be an object"):
        ModelGraph.from_dict(d)


@pytest.mark.parametrize(("src", "dst", "unknown"), [("l0", "ghost", "ghost"), ("ghost", "l2", "ghost")])
def test_edge_to_unknown_layer_is_refused(src: str, dst: str, unknown: str) -> None:
    d = doc()
    d["edges"].append({"src": src, "dst": dst, "bytes": 4})
    with refused(f"edge {src} -> {dst}: unknown layer {unknown!r}"):
        ModelGraph.from_dict(d)


def test_edge_against_the_order_is_refused() -> None:
    d = doc()
    d["edges"] = [{"src": "l1", "dst": "l0", "bytes": 4}]
    with refused("edge l1 -> l0 goes against the layers' order (1 >= 0)"):
        ModelGraph.from_dict(d)


def test_duplicate_layer_name_is_refused() -> None:
    d = doc()
    d["layers"].append({**copy.deepcopy(d["layers"][0]), "order": 9})
    with refused("duplicate layer name 'l0'"):
        ModelGraph.from_dict(d)


def test_shared_order_is_refused() -> None:
    with refused("layers 'l1' and 'l2' share order 1"):
        ModelGraph.from_dict(with_layer(2, order=1))


def test_unknown_layer_field_is_refused() -> None:
    with refused("layer 'l1' has unknown field(s): colour, weight"):
        ModelGraph.from_dict(with_layer(1, weight=3, colour="red"))


def test_bad_shape_is_refused() -> None:
    with refused("layer 'l0' input_shapes must be lists of non-negative integers, got [2, -1]"):
        ModelGraph.from_dict(with_layer(0, input_shapes=[[2, -1]]))


def test_layer_that_is_not_an_object_is_refused() -> None:
    d = doc()
    d["layers"][2] = "l2"
    with refused("layers[2] must be an object"):
        ModelGraph.from_dict(d)


@pytest.mark.parametrize("key", ["layers", "edges", "inputs", "outputs"])
def test_list_fields_must_be_lists(key: str) -> None:
    with refused(f"{key} must be a list, got dict"):
        ModelGraph.from_dict(doc(**{key: {"a": 1}}))


def test_empty_graph_is_refused() -> None:
    with refused("graph has no layers"):
        ModelGraph.from_dict(doc(layers=[], edges=[]))


def test_model_tensor_naming_unknown_layer_is_refused() -> None:
    tensor = {"name": "x", "shape": [4, 8], "dtype": "float32", "bytes": 128, "layers": ["ghost"]}
    with refused("model tensor 'x' names unknown layer 'ghost'"):
        ModelGraph.from_dict(doc(inputs=[tensor]))


def test_model_tensor_missing_field_is_named() -> None:
    with refused("outputs entry is missing field 'dtype'"):
        ModelGraph.from_dict(doc(outputs=[{"name": "y", "shape": [4], "bytes": 16}]))


def test_negative_total_param_bytes_is_refused() -> None:
    with refused("total_param_bytes must be a non-negative integer, got -5"):
        ModelGraph.from_dict(doc(total_param_bytes=-5))


@pytest.mark.parametrize("batch", [0, -1, 2.0, "4"])
def test_bad_batch_size_is_refused(batch: Any) -> None:
    with refused(f"batch_size must be a positive integer, got {batch!r}"):
        ModelGraph.from_dict(doc(batch_size=batch))


def test_bool_batch_size_is_refused() -> None:
    with refused("batch_size must be a positive integer, got True"):
        ModelGraph.from_dict(doc(batch_size=True))


@pytest.mark.parametrize("meta", [[1, 2], "abc", 5])
def test_meta_that_is_not_an_object_is_refused(meta: Any) -> None:
    with pytest.raises(GraphError, match="meta"):
        ModelGraph.from_dict(doc(meta=meta))


def test_non_string_layer_name_is_refused() -> None:
    with pytest.raises(GraphError, match="name"):
        ModelGraph.from_dict(with_layer(0, name=["l0"]))


def test_non_json_text_is_refused() -> None:
    with refused("graph is not valid JSON: "):
        ModelGraph.from_json("{not json")


@pytest.mark.parametrize(("text", "kind"), [("[1, 2]", "list"), ('"graph"', "str"), ("3", "int"),
                                            ("null", "NoneType")])
def test_json_that_is_not_an_object_is_refused(text: str, kind: str) -> None:
    with refused(f"a graph document must be a JSON object, got {kind}"):
        ModelGraph.from_json(text)


def test_load_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    with refused(f"cannot read graph file {path}: No such file or directory"):
        ModelGraph.load(path)


def test_load_prefixes_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc(version=99)))
    with pytest.raises(GraphError, match=r"^" + re.escape(f"{path}: unknown graph version 99")):
        ModelGraph.load(path)
    path.write_text("oops")
    with pytest.raises(GraphError, match=r"^" + re.escape(f"{path}: graph is not valid JSON")):
        ModelGraph.load(path)


def test_graph_error_is_a_value_error() -> None:
    assert issubclass(GraphError, ValueError)
