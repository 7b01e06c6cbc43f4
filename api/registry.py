"""The cluster registry: stored specs, base loads, reservations, and the state plans see.

A registered cluster's state is its stored spec with each device's load combined with the loads of
reserved plans, and each device's memory less what reserved plans' lenders hold there
(:mod:`pipeplan.api.reservations`).  Built-in clusters (``costmodel/clusters``) can be read and
planned on by name, but they hold no reservations: register one (``PUT``) to track its load.
A state is cached per (name, revision, created_at); every change bumps the revision, and a cluster
deleted and registered again starts at revision 1 with a new ``created_at``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeplan.api.errors import ApiError
from pipeplan.api.keys import canonical, digest_of
from pipeplan.api.reservations import LENT, with_lent, with_reserved
from pipeplan.api.tables import ClusterRow, ReservationRow, utcnow
from pipeplan.costmodel.cluster import Cluster, ClusterError, builtin_clusters, load_cluster
from pipeplan.costmodel.hardware import Contention

__all__ = ["ClusterState", "Registry"]

log = logging.getLogger(__name__)

_MAX_MEMORY = 2**62


@dataclass(frozen=True)
class ClusterState:
    name: str
    builtin: bool
    revision: int | None
    base: Cluster
    effective: Cluster
    digest: str  # of the effective cluster: what a plan's key depends on
    reservations: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # device -> (plan, kind)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    owner: str | None = None  # who registered it (None: built in, given inline, or registered before owners)
    lent: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # device -> (plan, bytes its lenders hold)

    @property
    def registered(self) -> bool:
        return not self.builtin and self.revision is not None


@lru_cache(maxsize=64)
def _builtin(name: str) -> Cluster:
    return load_cluster(name)


@lru_cache(maxsize=1)
def _builtin_names() -> dict[str, str]:
    return {n.lower(): n for n in builtin_clusters()}


@lru_cache(maxsize=64)
def _builtin_state(name: str) -> ClusterState:
    return state_of(_builtin(name), builtin=True)


def state_of(cluster: Cluster, builtin: bool = False) -> ClusterState:
    """The state of a cluster given inline (or built in): no registry, no reservations."""
    return ClusterState(cluster.name, builtin, None, cluster, cluster, digest_of(cluster.to_dict()))


def reservation_rows(session: Session, cluster: str) -> tuple[dict[str, list[tuple[str, str]]],
                                                              dict[str, list[tuple[str, int]]]]:
    """``cluster``'s reservations, per device in the order they were made: the (plan, co-runner kind)
    of each reserved stage, and the (plan, bytes) each harvesting plan's lenders hold there."""
    loads: dict[str, list[tuple[str, str]]] = {}
    lent: dict[str, list[tuple[str, int]]] = {}
    for plan_id, device, kind, nbytes in session.execute(
            select(ReservationRow.plan_id, ReservationRow.device, ReservationRow.kind, ReservationRow.bytes)
            .where(ReservationRow.cluster == cluster).order_by(ReservationRow.id)):
        if kind == LENT:  # a harvesting plan's lender: memory, not a co-runner
            lent.setdefault(device, []).append((plan_id, nbytes or 0))
        else:
            loads.setdefault(device, []).append((plan_id, kind))
    return loads, lent


class Registry:
    def __init__(self, max_devices: int) -> None:
        self.max_devices = max_devices
        self._cache: OrderedDict[tuple[str, int, datetime], ClusterState] = OrderedDict()
        self._lock = threading.Lock()

    # -- reading ----------------------------------------------------------------------------------

    def find(self, session: Session, name: str) -> ClusterState | None:
        """The registered cluster ``name``, else the built-in one, else None."""
        # The revision alone first: on the hot path the state is cached and the spec is not needed.
        found = session.execute(select(ClusterRow.revision, ClusterRow.created_at)
                                .where(ClusterRow.name == name)).first()
        if found is not None:
            key = (name, found.revision, found.created_at)
            with self._lock:
                cached = self._cache.get(key)
                if cached is not None:
                    self._cache.move_to_end(key)
                    return cached
            row = session.get(ClusterRow, name)
            if row is not None:
                return self._state(session, row)
        builtin = _builtin_names().get(name.lower())
        return _builtin_state(builtin) if builtin else None

    def get(self, session: Session, name: str, loc: list[str | int]) -> ClusterState:
        found = self.find(session, name)
        if found is None:
            names = session.execute(select(ClusterRow.name).order_by(ClusterRow.name)).scalars().all()
            raise ApiError(404 if loc and loc[0] == "path" else 422,
                           f"unknown cluster {name!r}: registered clusters are {', '.join(names) or 'none'}; "
                           f"built-in clusters are {', '.join(builtin_clusters())}", loc)
        return found

    def registered(self, session: Session, name: str) -> ClusterState:
        """A cluster of the registry; a built-in or unknown name is a 404 that says what to do."""
        state = self.get(session, name, ["path", "name"])
        if state.builtin:
            raise ApiError(404, f"cluster {name!r} is built in and read-only: register a copy with "
                           f"PUT /v1/clusters/{name} to change its loads or reserve plans on it", ["path", "name"])
        return state

    def names(self, session: Session) -> list[tuple[str, int, int, str | None]]:
        """Each registered cluster: name, devices, revision, owner."""
        rows = session.execute(select(ClusterRow.name, ClusterRow.spec, ClusterRow.revision, ClusterRow.owner)
                               .order_by(ClusterRow.name)).all()
        return [(name, len(json.loads(spec)["devices"]), revision, owner) for name, spec, revision, owner in rows]

    def pending(self, session: Session, name: str) -> ClusterState:
        """The registered cluster ``name`` as ``session`` sees it, changes not yet committed included;
        never cached (the transaction may still roll back)."""
        session.flush()
        row = session.get(ClusterRow, name)
        if row is None:
            raise AssertionError(f"cluster {name!r} is not in this session")
        return self._state(session, row, remember=False)

    def _state(self, session: Session, row: ClusterRow, remember: bool = True) -> ClusterState:
        key = (row.name, row.revision, row.created_at)
        with self._lock:
            cached = self._cache.get(key) if remember else None
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        base = Cluster.from_dict(json.loads(row.spec), source=f"cluster {row.name!r}")
        reservations, lent = reservation_rows(session, row.name)
        effective = with_reserved(base, {device: [k for _, k in held] for device, held in reservations.items()})
        effective = with_lent(effective, {device: sum(b for _, b in held) for device, held in lent.items()})
        state = ClusterState(row.name, False, row.revision, base, effective, digest_of(effective.to_dict()),
                             reservations, row.created_at, row.updated_at, row.owner, lent)
        if not remember:
            return state
        with self._lock:
            self._cache[key] = state
            while len(self._cache) > 256:
                self._cache.popitem(last=False)
        return state

    # -- writing ----------------------------------------------------------------------------------

    def validate(self, spec: dict[str, Any], loc: list[str | int]) -> Cluster:
        """A cluster from a spec mapping; a 422 naming the problem otherwise."""
        devices = spec.get("devices")
        if isinstance(devices, list) and len(devices) > self.max_devices:
            raise ApiError(422, f"{len(devices)} devices; this service plans on at most {self.max_devices}",
                           [*loc, "devices"])
        try:
            cluster = Cluster.from_dict(spec)
        except ClusterError as exc:
            raise ApiError(422, str(exc), loc) from None
        for i, device in enumerate(cluster.devices):
            # The ILP's capacities are int64 (CP-SAT): 4 EiB is beyond any device.  And a rate under 1/s
            # makes layer times overflow to inf, which no planner can order.
            if device.memory > _MAX_MEMORY:
                raise ApiError(422, f"device {device.id!r}: memory {device.memory} is over {_MAX_MEMORY} bytes",
                               [*loc, "devices", i, "memory"])
            for name in ("peak_flops", "mem_bandwidth"):
                if getattr(device, name) < 1.0:
                    raise ApiError(422, f"device {device.id!r}: {name} {getattr(device, name):g} is below 1 per second",
                                   [*loc, "devices", i, name])
        return cluster

    def put(self, session: Session, name: str, cluster: Cluster, owner: str | None = None) -> bool:
        """Store ``cluster`` as ``name`` (a new one owned by ``owner``); True when it is new.  Refused
        (409) if it drops a device that a reserved plan still loads."""
        row = session.get(ClusterRow, name, with_for_update=True)
        ids = {d.id for d in cluster.devices}
        held = session.execute(select(ReservationRow.device, ReservationRow.plan_id)
                               .where(ReservationRow.cluster == name)).all()
        lost = sorted({(d, p) for d, p in held if d not in ids})
        if lost:
            device, plan = lost[0]
            raise ApiError(409, f"device {device!r} is reserved by plan {plan}: release that plan before "
                           "removing the device", ["body", "devices"])
        spec = canonical(cluster.to_dict())
        now = utcnow()
        if row is None:
            session.add(ClusterRow(name=name, spec=spec, revision=1, created_at=now, updated_at=now, owner=owner))
            return True
        row.spec, row.revision, row.updated_at = spec, row.revision + 1, now
        return False

    def set_load(self, session: Session, name: str, device: str, load: Contention) -> None:
        row = self._row(session, name)
        base = Cluster.from_dict(json.loads(row.spec))
        try:
            changed = base.with_load(device, load)
        except ClusterError as exc:
            raise ApiError(404, str(exc), ["path", "device"]) from None
        row.spec, row.revision, row.updated_at = canonical(changed.to_dict()), row.revision + 1, utcnow()

    def delete(self, session: Session, name: str) -> None:
        row = self._row(session, name)
        plan = session.execute(select(ReservationRow.plan_id).where(ReservationRow.cluster == name)).first()
        if plan is not None:
            raise ApiError(409, f"cluster {name!r} holds reservations (plan {plan[0]}): release them first",
                           ["path", "name"])
        session.delete(row)

    def reserve(self, session: Session, name: str, plan_id: str, loads: dict[str, str],
                lent: dict[str, int] | None = None) -> bool:
        """Record ``loads`` (device → kind) and the memory ``lent`` (device → bytes its lenders hold)
        for ``plan_id``; False if the cluster is gone."""
        row = session.get(ClusterRow, name, with_for_update=True)
        if row is None:
            return False
        devices = {d["id"] for d in json.loads(row.spec)["devices"]}
        for device, kind in sorted(loads.items()):
            if device in devices:  # a device removed since the plan was made has nothing to load
                session.add(ReservationRow(plan_id=plan_id, cluster=name, device=device, kind=kind))
        for device, nbytes in sorted((lent or {}).items()):
            if device in devices and nbytes > 0:
                session.add(ReservationRow(plan_id=plan_id, cluster=name, device=device, kind=LENT, bytes=nbytes))
        row.revision, row.updated_at = row.revision + 1, utcnow()
        return True

    def release(self, session: Session, plan_id: str) -> None:
        """Remove every reservation of ``plan_id`` and bump the revisions of the clusters it held."""
        held = session.execute(select(ReservationRow).where(ReservationRow.plan_id == plan_id)).scalars().all()
        for name in sorted({r.cluster for r in held}):
            row = session.get(ClusterRow, name, with_for_update=True)
            if row is not None:
                row.revision, row.updated_at = row.revision + 1, utcnow()
        for r in held:
            session.delete(r)

    def _row(self, session: Session, name: str) -> ClusterRow:
        row = session.get(ClusterRow, name, with_for_update=True)
        if row is None:
            self.registered(session, name)  # raises the right 404
            raise AssertionError("unreachable")
        return row
