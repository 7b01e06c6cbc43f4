"""Cluster specs: loading, topology precedence, exact link times, errors and round trips."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pipeplan.costmodel.cluster import Cluster, ClusterError, Link, builtin_clusters, load_cluster
from pipeplan.costmodel.hardware import Contention

BUILTINS = ["4xa100-nvlink", "8gpu-2hosts", "hetero-a100-t4", "local-cpu"]


def dev(device_id: str, host: str = "node0", **fields: Any) -> dict[str, Any]:
    spec = {"id": device_id, "host": host, "memory": "80GiB", "peak_flops": "312TFLOPS",
            "mem_bandwidth": "2039GB/s"}
    spec.update(fields)
    return spec


def spec(*devices: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"name": "test", "devices": list(devices), **rest}


def two_gpus(**rest: Any) -> dict[str, Any]:
    """gpu0 and gpu1 on one host, joined over PCIe unless ``rest`` says otherwise."""
    rest.setdefault("topology", {"intra_host": {"bandwidth": "25GB/s", "latency": "10us"}})
    return spec(dev("gpu0"), dev("gpu1"), **rest)


def raises(message: str) -> Any:
    return pytest.raises(ClusterError, match=re.escape(message))


# -- built-in specs ---------------------------------------------------------------------------


def test_builtin_names() -> None:
    assert builtin_clusters() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_loads_with_a_link_for_every_pair(name: str) -> None:
    cluster = load_cluster(name)
    ids = [d.id for d in cluster.devices]
    assert cluster.name == name
    assert len(ids) == len(set(ids)) >= 2
    pairs = [(a, b) for a, b, _ in cluster.links()]
    assert pairs == list(itertools.combinations(ids, 2))
    for a, b in pairs:
        assert cluster.link(a, b) is cluster.link(b, a)
        assert cluster.link(a, b).bandwidth > 0


def test_builtin_name_is_case_insensitive() -> None:
    assert load_cluster("4XA100-NVLink") == load_cluster("4xa100-nvlink")


def test_examples_symlink_points_at_builtins() -> None:
    examples = Path(__file__).parents[2] / "examples" / "clusters"
    assert sorted(p.stem for p in examples.glob("*.yaml")) == BUILTINS


def test_4xa100_figures() -> None:
    cluster = load_cluster("4xa100-nvlink")
    gpu = cluster.device("gpu3")
    assert (gpu.memory, gpu.peak_flops, gpu.mem_bandwidth) == (85899345920, 312e12, 2039e9)
    assert cluster.link("gpu0", "gpu3") == Link(bandwidth=100e9, latency=5e-6)


def test_8gpu_2hosts_uses_network_between_hosts() -> None:
    cluster = load_cluster("8gpu-2hosts")
    assert cluster.link("gpu0", "gpu3").bandwidth == 100e9
    assert cluster.link("gpu4", "gpu7").bandwidth == 100e9
    assert cluster.link("gpu3", "gpu4") == Link(bandwidth=12.5e9, latency=20e-6)


def test_hetero_a100_pair_overrides_pcie_default() -> None:
    cluster = load_cluster("hetero-a100-t4")
    assert cluster.link("gpu1", "gpu0").bandwidth == 25e9
    assert cluster.link("gpu0", "gpu2").bandwidth == 12e9
    assert cluster.link("gpu2", "gpu3").bandwidth == 12e9
    assert cluster.device("gpu2").peak_flops == 65e12


def test_local_cpu_pins_one_core_per_device() -> None:
    cluster = load_cluster("local-cpu")
    assert [(d.id, d.type, d.cores) for d in cluster.devices] == [
        ("cpu0", "cpu-core", [0]),
        ("cpu1", "cpu-core", [1]),
    ]
    assert cluster.device("cpu1").memory == 8 * 2**30
    assert cluster.link("cpu0", "cpu1") == Link(bandwidth=2e9, latency=500e-6)


# -- topology precedence ----------------------------------------------------------------------


def test_precedence_links_over_islands_over_intra_over_inter() -> None:
    cluster = Cluster.from_dict(spec(
        dev("a"), dev("b"), dev("c"), dev("d"), dev("e", host="node1"),
        topology={
            "islands": [{"devices": ["a", "b", "c"], "bandwidth": "300GB/s", "latency": "3us"}],
            "intra_host": {"bandwidth": "25GB/s", "latency": "10us"},
            "inter_host": {"bandwidth": "12.5GB/s", "latency": "20us"},
        },
        links=[
            {"a": "c", "b": "a", "bandwidth": "100GB/s", "latency": "5us"},  # beats the island
            {"a": "e", "b": "d", "bandwidth": "50GB/s"},  # beats inter_host
        ],
    ))
    table = {(a, b): (link.bandwidth, link.latency) for a, b, link in cluster.links()}
    assert table == {
        ("a", "b"): (300e9, 3e-6),
        ("a", "c"): (100e9, 5e-6),
        ("b", "c"): (300e9, 3e-6),
        ("a", "d"): (25e9, 10e-6),
        ("b", "d"): (25e9, 10e-6),
        ("c", "d"): (25e9, 10e-6),
        ("a", "e"): (12.5e9, 20e-6),
        ("b", "e"): (12.5e9, 20e-6),
        ("c", "e"): (12.5e9, 20e-6),
        ("d", "e"): (50e9, 0.0),
    }


def test_links_are_symmetric() -> None:
    cluster = Cluster.from_dict(two_gpus(links=[{"a": "gpu1", "b": "gpu0", "bandwidth": 7}]))
    assert cluster.link("gpu0", "gpu1") == cluster.link("gpu1", "gpu0") == Link(bandwidth=7)


def test_link_to_self_is_free() -> None:
    link = Cluster.from_dict(two_gpus()).link("gpu1", "gpu1")
    assert (link.bandwidth, link.latency, link.time(1e12)) == (float("inf"), 0.0, 0.0)


def test_single_device_needs_no_links() -> None:
    assert list(Cluster.from_dict(spec(dev("gpu0"))).links()) == []


# -- units and link time ----------------------------------------------------------------------


def test_unit_strings_are_parsed() -> None:
    cluster = Cluster.from_dict(spec(
        dev("gpu0", memory="80GiB", peak_flops="19.5TFLOPS", mem_bandwidth="2TB/s"),
        dev("gpu1", memory=1024),
        links=[{"a": "gpu0", "b": "gpu1", "bandwidth": "100Gbit/s", "latency": "1.5ms"}],
    ))
    gpu0 = cluster.device("gpu0")
    assert (gpu0.memory, gpu0.peak_flops, gpu0.mem_bandwidth) == (85899345920, 19.5e12, 2e12)
    assert cluster.device("gpu1").memory == 1024
    assert cluster.link("gpu0", "gpu1") == Link(bandwidth=12.5e9, latency=1.5e-3)


def test_link_time_is_latency_plus_bytes_over_bandwidth() -> None:
    assert Link(bandwidth=1e9, latency=0.5).time(2e9) == 2.5
    link = Link(bandwidth="600GB/s", latency="5us")
    assert link.time(3e9) == 5e-6 + 3e9 / 600e9
    assert link.time(0) == 0.0


def test_link_time_rejects_negative_bytes() -> None:
    with pytest.raises(ValueError, match="negative number of bytes"):
        Link(bandwidth=1).time(-1)


# -- bad specs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, message",
    [
        (two_gpus(links=[{"a": "gpu0", "b": "gpu9", "bandwidth": 1}]),
         "link gpu0-gpu9: unknown device 'gpu9' (devices: gpu0, gpu1)"),
        (spec(dev("gpu0"), dev("gpu1"), dev("gpu1")), "duplicate device id 'gpu1'"),
        (spec(dev("gpu0", memory=0)), "device 'gpu0': memory must be positive, got 0"),
        (spec(dev("gpu0", mem_bandwidth=-1)), "device 'gpu0': mem_bandwidth must be positive"),
        (two_gpus(links=[{"a": "gpu0", "b": "gpu1", "bandwidth": 0}]),
         "link gpu0-gpu1: bandwidth must be positive, got 0 B/s"),
        (two_gpus(topology={"intra_host": {"bandwidth": -5}}),
         "topology.intra_host: bandwidth must be positive, got -5 B/s"),
        (two_gpus(topology={"intra_host": {"bandwidth": 1, "latency": -1e-6}}),
         "topology.intra_host: latency must be non-negative, got -1e-06 s"),
        (spec(dev("gpu0"), dev("gpu1"), dev("gpu3", host="node1"),
              topology={"intra_host": {"bandwidth": 1}}),
         "no link between gpu0 and gpu3 (and 1 more pair): add a link or a topology entry"),
        (spec(dev("gpu0"), dev("gpu1"), dev("gpu2"), topology={"islands": [
            {"devices": ["gpu0", "gpu1"], "bandwidth": 1},
            {"devices": ["gpu1", "gpu2"], "bandwidth": 1}]}),
         "island [gpu1, gpu2]: device 'gpu1' is listed in two islands"),
        (two_gpus(topology={"islands": [{"devices": ["gpu0", "gpu7"], "bandwidth": 1}]}),
         "island [gpu0, gpu7]: unknown device 'gpu7'"),
        (two_gpus(links=[{"a": "gpu0", "b": "gpu0", "bandwidth": 1}]),
         "link gpu0-gpu0: a device cannot link to itself"),
        (two_gpus(links=[{"a": "gpu0", "b": "gpu1", "bandwidth": 1},
                         {"a": "gpu1", "b": "gpu0", "bandwidth": 2}]),
         "link gpu1-gpu0: given twice"),
        (spec(), "devices: List should have at least 1 item"),
        (spec(dev("gpu0", colour="red")), "device 'gpu0': colour: Extra inputs are not permitted"),
        (two_gpus(links=[{"a": "gpu0", "b": "gpu1", "bandwidth": "fast"}]),
         "link gpu0-gpu1: bandwidth: cannot read quantity 'fast'"),
    ],
)
def test_bad_spec_names_the_culprit(data: dict[str, Any], message: str) -> None:
    with raises(message):
        Cluster.from_dict(data)


def test_malformed_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("devices: [gpu0, {id: \n")
    with raises(f"{path}: not valid YAML"):
        Cluster.from_file(path)


@pytest.mark.parametrize("text, kind", [("- gpu0\n- gpu1\n", "list"), ("", "NoneType")])
def test_yaml_file_that_is_not_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(text)
    with raises(f"{path}: a cluster spec must be a mapping, got {kind}"):
        load_cluster(str(path))


def test_malformed_json_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"devices": [')
    with raises(f"{path}: not valid JSON"):
        Cluster.from_file(path)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "zero.yaml"
    path.write_text("devices: [{id: gpu0, memory: 0, peak_flops: 1, mem_bandwidth: 1}]\n")
    with raises(f"{path}: device 'gpu0': memory must be positive, got 0"):
        load_cluster(str(path))
    with raises("must end in .yaml, .yml, .json"):
        Cluster.from_file(tmp_path / "spec.txt")
    with raises("cannot read cluster spec"):
        load_cluster(str(tmp_path / "missing.yaml"))


def test_unknown_builtin_name_lists_builtins() -> None:
    with raises("unknown cluster 'dgx-h100': built-in clusters are " + ", ".join(BUILTINS)):
        load_cluster("dgx-h100")


def test_unknown_device_lookup_lists_ids() -> None:
    cluster = load_cluster("local-cpu")
    with raises("unknown device 'gpu0' (devices: cpu0, cpu1)"):
        cluster.device("gpu0")
    with raises("link cpu0-gpu0: unknown device 'gpu0'"):
        cluster.link("cpu0", "gpu0")


def test_file_name_is_default_spec_name(tmp_path: Path) -> None:
    path = tmp_path / "mine.yml"
    path.write_text("devices: [{id: cpu0, memory: 1GiB, peak_flops: 1e9, mem_bandwidth: 1e9}]\n")
    assert load_cluster(str(path)).name == "mine"


# -- round trips and copies -------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTINS)
def test_round_trip_through_dict(name: str) -> None:
    cluster = load_cluster(name)
    data = cluster.to_dict()
    assert "topology" not in data
    assert len(data["links"]) == len(cluster.devices) * (len(cluster.devices) - 1) // 2
    again = Cluster.from_dict(data)
    assert again == cluster
    assert (again.name, again.description) == (cluster.name, cluster.description)


@pytest.mark.parametrize("name", BUILTINS)
def test_round_trip_through_json_file(name: str, tmp_path: Path) -> None:
    cluster = load_cluster(name).with_load("gpu1" if name != "local-cpu" else "cpu1",
                                           Contention(corunners=2, kind="memory"))
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cluster.to_dict(), allow_nan=False))
    assert load_cluster(str(path)) == cluster


def test_with_load_returns_a_copy() -> None:
    cluster = load_cluster("4xa100-nvlink")
    busy = cluster.with_load("gpu2", Contention(corunners=1, kind="memory"))
    assert cluster.device("gpu2").load == Contention()
    assert busy.device("gpu2").load == Contention(corunners=1, kind="memory")
    assert busy.device("gpu1").load == Contention()
    assert busy != cluster
    assert busy.link("gpu0", "gpu2") == cluster.link("gpu0", "gpu2")
    assert busy.idle() == cluster
    with raises("unknown device 'gpu9'"):
        cluster.with_load("gpu9", Contention())


def test_equality_ignores_labels_but_not_links() -> None:
    base = Cluster.from_dict(two_gpus())
    renamed = Cluster.from_dict({**two_gpus(), "name": "other", "description": "same hardware"})
    faster = Cluster.from_dict(two_gpus(topology={"intra_host": {"bandwidth": "50GB/s"}}))
    assert base == renamed
    assert base != faster
    assert base != "test"


def test_constructor_checks_the_table() -> None:
    devices = load_cluster("local-cpu").devices
    link = Link(bandwidth=1e9)
    assert Cluster("c", devices, {("cpu1", "cpu0"): link}).link("cpu0", "cpu1") is link
    with raises("link cpu1-cpu0: given twice"):
        Cluster("c", devices, {("cpu0", "cpu1"): link, ("cpu1", "cpu0"): link})
    with raises("no link between cpu0 and cpu1: add a link"):
        Cluster("c", devices, {})
