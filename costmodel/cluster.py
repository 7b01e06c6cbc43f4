"""The machines a plan runs on: devices, and the link between every pair of them.

A spec (YAML or JSON) lists devices and says how they are joined, with shorthands so that a
person does not have to write out n·(n-1)/2 links::

    name: 2xa100
    devices:
      - {id: gpu0, type: A100-80GB, memory: 80GiB, peak_flops: 312TFLOPS, mem_bandwidth: 2039GB/s}
      - {id: gpu1, type: A100-80GB, memory: 80GiB, peak_flops: 312TFLOPS, mem_bandwidth: 2039GB/s}
    topology:
      islands: [{devices: [gpu0, gpu1], bandwidth: 300GB/s, latency: 3us}]
      intra_host: {bandwidth: 25GB/s, latency: 10us}
      inter_host: {bandwidth: 12.5GB/s, latency: 20us}
    links:
      - {a: gpu0, b: gpu1, bandwidth: 100GB/s, latency: 5us}

Each pair takes the first of: an explicit link, a shared island, ``intra_host`` (same host),
``inter_host`` (different hosts).  A pair left with nothing is an error, never a silent default,
because a made-up bandwidth would quietly steer the planner.

>>> load_cluster("4xa100-nvlink").link("gpu0", "gpu1").bandwidth
100000000000.0
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from pipeplan.costmodel.hardware import Contention, Device, Link
from pipeplan.errors import UserError

__all__ = [
    "Cluster", "ClusterError", "ClusterSpec", "IslandSpec", "Link", "LinkSpec", "Topology",
    "builtin_clusters", "load_cluster",
]

Pair = frozenset[str]

_BUILTIN_DIR = Path(__file__).parent / "clusters"
_SUFFIXES = (".yaml", ".yml", ".json")


class ClusterError(UserError, ValueError):
    """A cluster spec is wrong; the message names the device, link or file at fault."""


# A device "talking to itself" moves no data; built without validation to allow inf.
_SELF = Link.model_construct(bandwidth=math.inf, latency=0.0)


class LinkSpec(Link):
    """An explicit link between devices ``a`` and ``b``; it overrides every topology entry."""

    a: str
    b: str


class IslandSpec(Link):
    """Devices joined pairwise at one link, e.g. GPUs on one NVLink/NVSwitch fabric."""

    devices: list[str] = Field(..., min_length=2)


class Topology(BaseModel):
    """Shorthands expanded into pairwise links (see the module docstring for precedence)."""

    model_config = ConfigDict(extra="forbid")

    islands: list[IslandSpec] = Field(default_factory=list)
    intra_host: Link | None = Field(None, description="pairs on one host not in an island")
    inter_host: Link | None = Field(None, description="pairs on different hosts")


class ClusterSpec(BaseModel):
    """A cluster as written in a spec file, before the topology is expanded."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1)
    description: str = ""
    devices: list[Device] = Field(..., min_length=1)
    topology: Topology = Field(default_factory=Topology)
    links: list[LinkSpec] = Field(default_factory=list)


class Cluster:
    """Devices in spec order plus a link for every pair of distinct devices.

    Two clusters are equal when their devices and links are; name and description are labels.

    >>> c = load_cluster("local-cpu")
    >>> [d.id for d in c.devices], c.link("cpu1", "cpu0").latency
    (['cpu0', 'cpu1'], 0.0005)
    >>> c.with_load("cpu0", Contention(corunners=1)) == c
    False
    """

    def __init__(self, name: str, devices: Sequence[Device],
                 links: Mapping[tuple[str, str], Link], description: str = "") -> None:
        self.name = name
        self.description = description
        self.devices: list[Device] = list(devices)
        self._by_id: dict[str, Device] = {}
        for d in self.devices:
            if d.id in self._by_id:
                raise ClusterError(f"duplicate device id {d.id!r}: each device needs its own id")
            self._by_id[d.id] = d
        self._links: dict[Pair, Link] = {}
        for (a, b), link in links.items():
            _require((a, b), self._by_id, f"link {a}-{b}")
            if a == b or frozenset((a, b)) in self._links:
                why = "a device cannot link to itself" if a == b else "given twice"
                raise ClusterError(f"link {a}-{b}: {why}")
            self._links[frozenset((a, b))] = link
        missing = [(a, b) for a, b in self._pairs() if frozenset((a, b)) not in self._links]
        if missing:
            extra = len(missing) - 1
            more = f" (and {extra} more pair{'s' if extra > 1 else ''})" if extra else ""
            a, b = missing[0]
            raise ClusterError(f"no link between {a} and {b}{more}: "
                               "add a link or a topology entry that covers them")

    def device(self, device_id: str) -> Device:
        """The device with this id; ClusterError listing the valid ids if there is none."""
        _require((device_id,), self._by_id, f"cluster {self.name!r}")
        return self._by_id[device_id]

    def link(self, a: str, b: str) -> Link:
        """The link between ``a`` and ``b`` (either order); ``a == b`` costs nothing."""
        _require((a, b), self._by_id, f"link {a}-{b}")
        return _SELF if a == b else self._links[frozenset((a, b))]

    def links(self) -> Iterator[tuple[str, str, Link]]:
        """Every pair once, as ``(a, b, link)`` with ``a`` before ``b`` in device order."""
        for a, b in self._pairs():
            yield a, b, self._links[frozenset((a, b))]

    def with_load(self, device_id: str, load: Contention) -> Cluster:
        """A copy with one device under ``load``; this cluster is left as it was."""
        self.device(device_id)
        devices = [d.with_load(load) if d.id == device_id else d for d in self.devices]
        return self._replace(devices)

    def idle(self) -> Cluster:
        """A copy with every device idle."""
        return self._replace([d.with_load(Contention()) for d in self.devices])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able spec with every pair spelled out; ``from_dict`` gives an equal cluster."""
        return {
            "name": self.name,
            "description": self.description,
            "devices": [d.model_dump(mode="json", exclude_none=True) for d in self.devices],
            "links": [
                {"a": a, "b": b, "bandwidth": link.bandwidth, "latency": link.latency}
                for a, b, link in self.links()
            ],
        }

    def save(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` as YAML (``.yaml``/``.yml``) or JSON (``.json``); ``load_cluster`` reads it."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in _SUFFIXES:
            raise ClusterError(f"{path}: a cluster spec must end in {', '.join(_SUFFIXES)}")
        doc = self.to_dict()
        path.write_text(json.dumps(doc, indent=1) if suffix == ".json" else yaml.safe_dump(doc, sort_keys=False))
        return path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "") -> Cluster:
        """Build a cluster from a spec mapping; ``source`` (e.g. a path) prefixes error messages.

        >>> Cluster.from_dict({"name": "one", "devices": [
        ...     {"id": "cpu0", "memory": "1GiB", "peak_flops": 1e9, "mem_bandwidth": 1e9}]}).name
        'one'
        """
        where = f"{source}: " if source else ""
        if not isinstance(data, Mapping):
            kind = type(data).__name__
            raise ClusterError(f"{where}a cluster spec must be a mapping, got {kind}")
        try:
            spec = ClusterSpec.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(_describe(data, err) for err in exc.errors())
            raise ClusterError(where + problems) from exc
        try:
            table = _expand(spec)
            return cls(spec.name, spec.devices, table, spec.description)
        except ClusterError as exc:
            raise ClusterError(where + str(exc)) from None

    @classmethod
    def from_file(cls, path: str | Path) -> Cluster:
        """Load a ``.yaml``/``.yml``/``.json`` spec; its name defaults to the file's stem."""
        path = Path(path)
        if path.suffix.lower() not in _SUFFIXES:
            raise ClusterError(f"{path}: a cluster spec must end in {', '.join(_SUFFIXES)}")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ClusterError(f"cannot read cluster spec {path}: {exc.strerror}") from exc
        try:
            data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
            raise ClusterError(f"{path}: not valid {kind}: {exc}") from exc
        if isinstance(data, dict):
            data.setdefault("name", path.stem)
        return cls.from_dict(data, source=str(path))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cluster):
            return NotImplemented
        return self.devices == other.devices and self._links == other._links

    __hash__ = None  # type: ignore[assignment]  # equal clusters may differ later via with_load

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}, devices=[{', '.join(self._by_id)}])"

    def _pairs(self) -> Iterator[tuple[str, str]]:
        ids = [d.id for d in self.devices]
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                yield a, b

    def _replace(self, devices: list[Device]) -> Cluster:
        table = {(a, b): link for a, b, link in self.links()}
        return Cluster(self.name, devices, table, self.description)


def _require(device_ids: Iterable[str], known: Collection[str], context: str) -> None:
    for device_id in device_ids:
        if device_id not in known:
            raise ClusterError(
                f"{context}: unknown device {device_id!r} (devices: {', '.join(known)})"
            )


def _expand(spec: ClusterSpec) -> dict[tuple[str, str], Link]:
    """The pairwise table a spec describes, checked for unknown ids, self-links and overlaps.

    Duplicate device ids are left to :class:`Cluster`, which checks them for every caller.
    """
    ids = [d.id for d in spec.devices]
    host = {d.id: d.host for d in spec.devices}

    island_of: dict[str, int] = {}
    for n, island in enumerate(spec.topology.islands):
        context = f"island [{', '.join(island.devices)}]"
        _require(island.devices, host, context)
        for device_id in island.devices:
            if device_id in island_of:
                where = "twice" if island_of[device_id] == n else "in two islands"
                raise ClusterError(f"{context}: device {device_id!r} is listed {where}")
            island_of[device_id] = n

    explicit: dict[Pair, Link] = {}
    for ls in spec.links:
        context = f"link {ls.a}-{ls.b}"
        _require((ls.a, ls.b), host, context)
        if ls.a == ls.b:
            raise ClusterError(f"{context}: a device cannot link to itself")
        pair = frozenset((ls.a, ls.b))
        if pair in explicit:
            raise ClusterError(f"{context}: given twice (links are symmetric)")
        explicit[pair] = Link(bandwidth=ls.bandwidth, latency=ls.latency)

    islands = [Link(bandwidth=i.bandwidth, latency=i.latency) for i in spec.topology.islands]
    table: dict[tuple[str, str], Link] = {}
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            link = explicit.get(frozenset((a, b)))
            if link is None and a in island_of and island_of[a] == island_of.get(b):
                link = islands[island_of[a]]
            if link is None:
                same = host[a] == host[b]
                link = spec.topology.intra_host if same else spec.topology.inter_host
            if link is not None:  # an uncovered pair is reported by Cluster, naming it
                table[(a, b)] = link
    return table


# Names for the spec entries pydantic errors point into, so that a message reads
# "device 'gpu0': memory: ..." rather than "devices.0.memory: ...".
_LABELS: dict[tuple[str, ...], Callable[[Any], str]] = {
    ("devices",): lambda e: f"device {e['id']!r}",
    ("links",): lambda e: f"link {e['a']}-{e['b']}",
    ("topology", "islands"): lambda e: f"island [{', '.join(e['devices'])}]",
}


def _describe(data: Any, err: Mapping[str, Any]) -> str:
    """One pydantic error, located by the entry's name (see ``_LABELS``)."""
    loc: tuple[Any, ...] = tuple(err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    head, rest = "", loc
    for prefix, label in _LABELS.items():
        n = len(prefix)
        if loc[:n] == prefix and len(loc) > n and isinstance(loc[n], int):
            entry = data
            try:
                for key in loc[: n + 1]:
                    entry = entry[key]
                head, rest = label(entry), loc[n + 1 :]
            except (KeyError, IndexError, TypeError):
                pass  # the entry is too broken to name: fall back to its path
            break
    path = ".".join(f"[{k}]" if isinstance(k, int) else str(k) for k in rest).replace(".[", "[")
    where = ": ".join(part for part in (head, path) if part)
    if not where or msg.startswith(where):
        return msg
    return f"{where}: {msg}"


def builtin_clusters() -> list[str]:
    """Names of the specs shipped in ``costmodel/clusters``, sorted."""
    return sorted(p.stem for p in _BUILTIN_DIR.iterdir() if p.suffix in _SUFFIXES)


def load_cluster(name_or_path: str | Path) -> Cluster:
    """A cluster from a spec file path or a built-in name (case-insensitive).

    >>> load_cluster("8GPU-2hosts").device("gpu4").host
    'node1'
    """
    path = Path(name_or_path)
    if path.is_file() or path.suffix.lower() in _SUFFIXES or len(path.parts) > 1:
        return Cluster.from_file(path)
    builtins = {p.stem.lower(): p for p in _BUILTIN_DIR.iterdir() if p.suffix in _SUFFIXES}
    found = builtins.get(str(name_or_path).lower())
    if found is None:
        raise ClusterError(
            f"unknown cluster {str(name_or_path)!r}: built-in clusters are "
            f"{', '.join(builtin_clusters())}; or give the path of a .yaml/.json spec"
        )
    return Cluster.from_file(found)
