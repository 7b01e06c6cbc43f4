"""A cluster spec of this machine: its GPUs and CPU cores, measured, and the links between them.

``pipeplan cluster --detect --out here.yaml`` writes a spec that ``plan`` and ``run`` take as it is:

- one device per GPU (``gpu0`` …), with the name and memory torch reports, its measured fp32 matmul
  rate and copy bandwidth (:func:`pipeplan.costmodel.profile.measure_device`), and ``gpu: i`` so that the
  executor runs that stage on that GPU; its ``load`` is the current load NVML reads (before anything is
  measured): the utilisation of other processes, this process's own share taken out
  (:meth:`pipeplan.costmodel.nvml.GpuLoad.contention`), with the readings in the description;
- one device per CPU core this process may use (``cpu0`` …, ``cores: [c]``), the first core
  measured and its figures given to all (they are one design), memory split evenly;
- links: between GPUs, NVLink where NVML reports an active NVLink path (its version and link count
  give the bandwidth), else the PCIe link of the slower end (generation × width); anything else
  on this host, the loopback transport gloo uses (host memory, a few GB/s).

NVML (``nvidia-ml-py``) is optional: without it, GPU pairs get their PCIe default, GPUs are recorded
idle, and the spec says so in its description. Without a GPU, NVML is not read at all.

:func:`write_core_cluster` writes the unmeasured kind: N one-core devices on this process's cores with
figures given, the cluster tests and benchmarks run stages on.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.costmodel.nvml import GpuLoad

__all__ = ["GpuLink", "detect_cluster", "match_loads", "nvlink_bandwidth", "pcie_bandwidth", "recorded_loads",
           "write_core_cluster"]

log = logging.getLogger(__name__)

# Per direction, per link (GB/s): NVLink 1 20, 2 and 3 25, 4 25 (H100: 18 links), 5 50.
_NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# Per lane, per direction after encoding (GB/s): gen 1–2 8b/10b, gen 3+ 128b/130b.
_PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# What a copy achieves of the raw figure.
_ACHIEVED = 0.8
# gloo over loopback between two processes of this host (what `local-cpu` measured).
_LOOPBACK = {"bandwidth": 2e9, "latency": 500e-6}
_NVLINK_LATENCY = 3e-6
_PCIE_LATENCY = 10e-6


def nvlink_bandwidth(version: int, links: int) -> float:
    """Bytes/s one direction of ``links`` NVLinks of ``version`` achieve.

    >>> f"{nvlink_bandwidth(4, 18) / 1e9:.0f} GB/s"   # H100 SXM
    '360 GB/s'
    """
    if links < 1:
        raise ValueError(f"an NVLink path needs at least one link, got {links}")
    return _NVLINK_GBPS.get(version, max(_NVLINK_GBPS.values())) * 1e9 * links * _ACHIEVED


def pcie_bandwidth(generation: int, width: int) -> float:
    """Bytes/s one direction of a PCIe link achieves.

    >>> f"{pcie_bandwidth(4, 16) / 1e9:.1f} GB/s"
    '25.2 GB/s'
    """
    if width < 1:
        raise ValueError(f"a PCIe link has at least one lane, got {width}")
    return _PCIE_LANE_GBPS.get(generation, max(_PCIE_LANE_GBPS.values())) * 1e9 * width * _ACHIEVED


@dataclass(frozen=True)
class GpuLink:
    """What NVML says about one GPU: its NVLink version and active link count, its PCIe link."""

    nvlink_version: int | None
    nvlinks: int
    pcie_generation: int
    pcie_width: int
    peers: frozenset[int]  # GPUs it reaches over NVLink


def _nvml_links(count: int) -> list[GpuLink] | None:
    """Each GPU's links from NVML, or None when NVML is not there."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.warning("NVML could not start (%s): GPU links get the PCIe default", exc)
        return None
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        result = []
        for i, handle in enumerate(handles):
            active, version = 0, None
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(handle, link):
                        active += 1
                        version = pynvml.nvmlDeviceGetNvLinkVersion(handle, link)
                except pynvml.NVMLError:
                    break
            peers = frozenset(
                j for j, other in enumerate(handles) if j != i and active and pynvml.nvmlDeviceGetP2PStatus(
                    handle, other, pynvml.NVML_P2P_CAPS_INDEX_NVLINK) == pynvml.NVML_P2P_STATUS_OK)
            result.append(GpuLink(version, active, pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
                                  pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle), peers))
        return result
    finally:
        pynvml.nvmlShutdown()


def gpu_pair_link(a: GpuLink, b: GpuLink, index_b: int) -> dict[str, float]:
    """The link between two GPUs: NVLink when ``a`` reaches GPU ``index_b`` over it, else PCIe.

    >>> h100 = GpuLink(4, 18, 5, 16, frozenset({1}))
    >>> gpu_pair_link(h100, GpuLink(4, 18, 5, 16, frozenset({0})), 1)["bandwidth"] / 1e9
    360.0
    >>> gpu_pair_link(h100, GpuLink(None, 0, 3, 16, frozenset()), 2)["bandwidth"] / 1e9
    12.608
    """
    if index_b in a.peers and a.nvlink_version is not None and b.nvlinks:
        return {"bandwidth": nvlink_bandwidth(a.nvlink_version, min(a.nvlinks, b.nvlinks)),
                "latency": _NVLINK_LATENCY}
    slower = min((a.pcie_generation, a.pcie_width), (b.pcie_generation, b.pcie_width),
                 key=lambda gw: pcie_bandwidth(*gw))
    return {"bandwidth": pcie_bandwidth(*slower), "latency": _PCIE_LATENCY}


def match_loads(uuids: Sequence[str], loads: Sequence[GpuLoad]) -> list[GpuLoad | None]:
    """Each CUDA device's NVML reading: the one of the same UUID (NVML writes ``GPU-…``, torch leaves
    the prefix out), or the one of the same index where either side has no UUID.

    >>> a, b = (GpuLoad(i, "x", 0.0, 0, 1, (), False, None, f"GPU-{u}") for i, u in enumerate("ab"))
    >>> [g.index if g else None for g in match_loads(["b", "a", "c"], [a, b])]
    [1, 0, None]
    """
    def key(uuid: str) -> str:
        return uuid.lower().removeprefix("gpu-")

    by_uuid = {key(g.uuid): g for g in loads if g.uuid}
    return [by_uuid.get(key(u)) if u and by_uuid else (loads[i] if i < len(loads) else None)
            for i, u in enumerate(uuids)]


def recorded_loads(readings: Sequence[GpuLoad | None]) -> tuple[list[Contention], list[str]]:
    """The load to record for each GPU (idle where there is no reading) and a note of each reading."""
    loads, notes = [], []
    for i, g in enumerate(readings):
        load = g.contention() if g is not None else Contention()
        loads.append(load)
        if g is not None:
            others = len(g.others)
            own = "" if not g.own else (f", this process {g.own_utilization:.0%}" if g.own_utilization is not None
                                        else ", this process's share unknown")
            notes.append(f"gpu{i} when detected (NVML): {g.utilization:.0%} busy{own}, {others} other process(es), "
                         f"{g.memory_used / 2**30:.1f} of {g.memory_total / 2**30:.0f} GiB in use: load "
                         f"{load.describe()}")
    return loads, notes


def _nvml_loads(uuids: Sequence[str]) -> list[GpuLoad | None] | None:
    """The CUDA devices' current loads from NVML, or None when NVML cannot be read."""
    from pipeplan.costmodel.nvml import NvmlError, read_loads

    try:
        return match_loads(uuids, read_loads())
    except NvmlError as exc:
        log.info("GPU loads not read: %s", exc)
        return None


def _measured(**kw: Any) -> Device:
    from pipeplan.costmodel.profile import ProfileSettings, measure_device

    return measure_device(ProfileSettings(**kw))


def detect_cluster(name: str | None = None, *, gpus: bool = True, cores: Sequence[int] | None = None,
                   measure: bool = True) -> Cluster:
    """This machine as a :class:`Cluster`: measured GPUs and CPU cores, and their links.

    ``cores`` are the CPU cores to include (default: all this process may use; ``[]`` for none);
    ``measure=False`` skips the timing and takes conservative placeholders (for tests and dry runs:
    the spec then says so).
    """
    import torch

    host = socket.gethostname()
    usable = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    devices: list[dict[str, Any]] = []
    notes: list[str] = []
    count = torch.cuda.device_count() if gpus and torch.cuda.is_available() else 0
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    # Read before measuring, so that the measurement's own work is not in NVML's sample.
    readings = _nvml_loads([str(getattr(p, "uuid", "") or "") for p in props]) if count else None
    if count and readings is None:
        notes.append("GPU loads not read, recorded idle (install nvidia-ml-py to read them)")
    gpu_loads, load_notes = recorded_loads(readings or [None] * count)
    for i, p in enumerate(props):
        rates = _measured(gpu=i) if measure else None
        devices.append({"id": f"gpu{i}", "type": p.name, "host": host, "memory": p.total_memory,
                        "peak_flops": rates.peak_flops if rates else 1e12,
                        "mem_bandwidth": rates.mem_bandwidth if rates else 1e11, "gpu": i,
                        "load": gpu_loads[i].model_dump()})
    if usable:
        rates = _measured(cores=(usable[0],), threads=1) if measure else None
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // len(usable)
        for c in usable:
            devices.append({"id": f"cpu{c}", "type": "cpu-core", "host": host, "memory": memory,
                            "peak_flops": rates.peak_flops if rates else 1e10,
                            "mem_bandwidth": rates.mem_bandwidth if rates else 1e9, "cores": [c]})
    if not devices:
        raise ValueError("nothing to describe: no GPU found and no CPU core given")
    if not measure:
        notes.append("rates are placeholders (detected without measuring)")
    notes += load_notes
    links: list[dict[str, Any]] = []
    if count > 1:
        nvml = _nvml_links(count)
        if nvml is None:
            notes.append("GPU links are PCIe gen4 x16 defaults (install nvidia-ml-py to read them)")
            nvml = [GpuLink(None, 0, 4, 16, frozenset()) for _ in range(count)]
        links = [{"a": f"gpu{i}", "b": f"gpu{j}", **gpu_pair_link(nvml[i], nvml[j], j)}
                 for i in range(count) for j in range(i + 1, count)]
    description = f"detected on {host}: {count} GPU(s), {len(usable)} CPU core(s), measured idle"
    if notes:
        description += "; " + "; ".join(notes)
    spec = {"name": name or f"{host}-detected", "description": description, "devices": devices,
            "topology": {"intra_host": _LOOPBACK}, "links": links}
    return Cluster.from_dict(spec)


def write_core_cluster(path: str | Path, devices: int, *, name: str, cores: Sequence[int] | None = None,
                       id_prefix: str = "cpu", memory: str | int = "8GiB", peak_flops: str = "50GFLOPS",
                       mem_bandwidth: str = "10GB/s", latency: str = "50us", bandwidth: str = "2GB/s") -> Path:
    """Write a spec of ``devices`` one-core CPU devices (``cpu0``, ``cpu1`` … with ``id_prefix="cpu"``)
    to ``path`` and return it.

    Device k runs on ``cores[k % len(cores)]`` (default: the cores this process may use, so two
    devices share a core on a one-core machine).  The figures are the ones given, not measured: the
    cluster is known at once, as tests and benchmarks need.  Each device is one YAML flow mapping on
    its own line (``cores: [c]``), so that a test can edit one device's entry as text.

    >>> import tempfile
    >>> spec = write_core_cluster(Path(tempfile.mkdtemp()) / "c.yaml", 2, name="two", cores=[0])
    >>> [(d.id, d.cores) for d in Cluster.from_file(spec).devices]
    [('cpu0', [0]), ('cpu1', [0])]
    """
    usable = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    lines = [f"name: {name}", "devices:"]
    lines += [f"  - {{id: {id_prefix}{k}, type: cpu-core, host: localhost, memory: {memory}, peak_flops: "
              f"{peak_flops}, mem_bandwidth: {mem_bandwidth}, cores: [{usable[k % len(usable)]}]}}"
              for k in range(devices)]
    lines += ["topology:", f"  intra_host: {{bandwidth: {bandwidth}, latency: {latency}}}"]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path
