"""A run's loans: who lends which stage's weights, the processes and groups that carry them, the caps.

:func:`resolve_loans` reads a plan's ``harvest`` section (:class:`pipeplan.planner.harvest.Harvest`)
into a :class:`LoanSetup` before any process starts.  Every lender gets a rank: a lender that
runs a stage is that stage's process; any other (a device outside the pipeline, or ``host:NAME``)
gets a process of its own, after the stages' ranks, pinned to its device's cores (a host lender
is not pinned).  :func:`apply_loans` cuts the lent weights out of the borrowers' stage modules
(:func:`pipeplan.executor.loan_cut.cut_loans`) and hands them to the lenders.

Process groups (:func:`make_groups`, called in the same order by every rank): the pipeline's
group holds the stages only (``PipelineStage`` refuses a group larger than its stages), and the
fetches go over a gloo group of every rank, apart from the pipeline's, so that a fetch never
waits behind an activation, nor the other way round.

Memory caps (:class:`pipeplan.executor.memory_cap.WeightLedger`, checked in each process): a
harvest plan's devices and hosts are capped at what the plan's memory map gives them (capacity
after the margin and reservations); ``RunOptions.memory_caps`` (``--memory-cap DEV=SIZE``) sets
or overrides a cap, for any plan.  A layer-major stage counts its batch's live activations and
stash buffers against it too (:mod:`pipeplan.executor.stash_memory`), a lender the stashes it
holds (:class:`pipeplan.executor.stash.StashStore`).

Stashes (``plan.harvest.stashes``): each stashing stage's lender gets a rank as a weight lender
does (a process of its own when it runs no stage); ``LoanSetup.stashes`` maps the stage to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

import torch.distributed as dist

from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.units import UnitError, parse_bytes
from pipeplan.executor.errors import PlanMismatchError
from pipeplan.executor.layer_major import LAYERS_ATTR
from pipeplan.executor.lender import LenderBuild
from pipeplan.executor.loan_cut import cut_loans
from pipeplan.executor.options import device_values
from pipeplan.executor.stages import LAYER_META
from pipeplan.planner.harvest import HOST_PREFIX
from pipeplan.planner.plan import Plan

if TYPE_CHECKING:
    from pipeplan.executor.options import RunSetup
    from pipeplan.executor.stage_build import StageBuild

__all__ = ["Groups", "LenderSetup", "LoanSetup", "apply_loans", "make_groups", "parse_caps", "resolve_loans"]


class LenderSetup(NamedTuple):
    name: str  # a device id, or host:NAME
    rank: int
    stage: int | None  # the stage its device runs (it then lends from that stage's process); None: its own
    cores: tuple[int, ...] | None  # where its own process is pinned (None: not pinned)


@dataclass(frozen=True)
class LoanSetup:
    """The run's lenders, the caps per device, and each stage's borrowed layers."""

    stages: int  # the pipeline's stages: ranks 0..stages−1
    lenders: tuple[LenderSetup, ...] = ()
    caps: dict[str, int] = field(default_factory=dict)  # device id or host:NAME → weight bytes it may hold
    borrowed: dict[int, dict[str, tuple[int, str]]] = field(default_factory=dict)  # stage → layer → lender
    stashes: dict[int, tuple[int, str]] = field(default_factory=dict)  # stage → the lender of its stash (rank, name)

    @property
    def extra(self) -> tuple[LenderSetup, ...]:
        """Lenders with a process of their own, in rank order."""
        return tuple(sorted((x for x in self.lenders if x.stage is None), key=lambda x: x.rank))

    def lender(self, name: str) -> LenderSetup:
        return next(x for x in self.lenders if x.name == name)

    def rank_name(self, rank: int) -> str | None:
        """The lender name of an extra rank (None for a stage's rank)."""
        return next((x.name for x in self.extra if x.rank == rank), None)


def parse_caps(items: Sequence[str]) -> dict[str, str]:
    """``["cpu1=2MiB"]`` → ``{"cpu1": "2MiB"}``, each size checked."""
    caps = device_values(items, "--memory-cap", "DEVICE=SIZE, e.g. cpu1=2MiB")
    for device, size in caps.items():
        _bytes(device, size)
    return caps


def _bytes(device: str, size: object) -> int:
    try:
        value = parse_bytes(size)  # type: ignore[arg-type]
    except (UnitError, TypeError, ValueError) as exc:
        raise PlanMismatchError(f"memory cap of {device}: {exc}") from None
    if value < 0:
        raise PlanMismatchError(f"memory cap of {device} cannot be negative, got {size!r}")
    return value


def _caps(plan: Plan, cluster: Cluster, given: Mapping[str, object]) -> dict[str, int]:
    caps: dict[str, int] = {}
    if plan.harvest is not None:
        caps = {row.device: row.capacity - row.reserved for row in plan.harvest.memory}
    known = {d.id for d in cluster.devices} | {f"{HOST_PREFIX}{d.host}" for d in cluster.devices}
    for device, size in given.items():
        if device not in known:
            raise PlanMismatchError(f"--memory-cap names {device!r}, which cluster {cluster.name!r} does not have "
                                    f"(its devices: {', '.join(sorted(known))})")
        caps[device] = _bytes(device, size)
    return caps


def resolve_loans(plan: Plan, setup: RunSetup) -> RunSetup:
    """``setup`` with the plan's loans and the memory caps (unchanged for a plan with neither)."""
    cluster = Cluster.from_dict(setup.cluster)
    caps = _caps(plan, cluster, setup.options.memory_caps)
    loans = plan.harvest.loans if plan.harvest is not None else []
    if not loans and not caps:
        return setup
    stage_of = {s.device: k for k, s in enumerate(plan.stages)}
    lenders: dict[str, LenderSetup] = {}
    usable = os.sched_getaffinity(0)
    borrowed: dict[int, dict[str, tuple[int, str]]] = {}
    for loan in loans:
        k = stage_of.get(loan.borrower)
        if k is None or loan.layer not in plan.stages[k].layers:
            raise PlanMismatchError(f"the plan's harvest lends layer {loan.layer!r} to {loan.borrower!r}, but no "
                                    f"stage on {loan.borrower!r} runs it: the plan's loans and stages disagree")
        if loan.lender not in lenders:
            lenders[loan.lender] = _lender(loan.lender, stage_of, cluster, usable,
                                           len(stage_of) + sum(x.stage is None for x in lenders.values()))
        borrowed.setdefault(k, {})[loan.layer] = (lenders[loan.lender].rank, loan.lender)
    stashes: dict[int, tuple[int, str]] = {}
    for stash in plan.harvest.stashes if plan.harvest is not None else []:
        k = stage_of.get(stash.borrower)
        if k is None or k not in borrowed:
            raise PlanMismatchError(f"the plan's harvest stashes the activations of {stash.borrower!r}, but no stage "
                                    f"on {stash.borrower!r} borrows weights (only a borrowing stage runs layer-major)")
        if stash.lender not in lenders:
            lenders[stash.lender] = _lender(stash.lender, stage_of, cluster, usable,
                                            len(stage_of) + sum(x.stage is None for x in lenders.values()))
        stashes[k] = (lenders[stash.lender].rank, stash.lender)
    notes = list(setup.notes)
    if loans and setup.device_type == "cuda":
        notes.append("borrowed weights travel through host memory over gloo, not by GPU peer copies or NCCL")
    return replace(setup, loans=LoanSetup(len(plan.stages), tuple(lenders.values()), caps, borrowed, stashes),
                   notes=tuple(notes))


def _lender(name: str, stage_of: Mapping[str, int], cluster: Cluster, usable: set[int], rank: int) -> LenderSetup:
    if name in stage_of:
        return LenderSetup(name, stage_of[name], stage_of[name], None)
    if name.startswith(HOST_PREFIX):
        return LenderSetup(name, rank, None, None)
    try:
        device = cluster.device(name)
    except (KeyError, ValueError):
        raise PlanMismatchError(f"the plan's harvest names lender {name!r}, which cluster {cluster.name!r} does "
                                "not have") from None
    cores = tuple(device.cores or ())
    bad = [c for c in cores if c not in usable]
    if bad:
        raise PlanMismatchError(f"lender {name!r} is cores {list(cores)}, but this process may only use cores "
                                f"{sorted(usable)}")
    return LenderSetup(name, rank, None, cores or None)


def apply_loans(builds: list[StageBuild], setup: RunSetup) -> list[LenderBuild]:
    """Cut every borrowed layer's weights out of its stage in ``builds`` (in place) and give them to the
    lenders: a stage lender's ``build.lent``; return the builds of the lenders with processes of their own."""
    loans = setup.loans
    if loans is None:
        return []
    extra = {x.name: LenderBuild(x.name) for x in loans.extra}
    for k, borrowed in sorted(loans.borrowed.items()):
        fetches, lent, kept = cut_loans(builds[k].module, k, borrowed)
        if kept:
            raise PlanMismatchError(f"stage {k} on {setup.stages[k].device} borrows layers {kept} whose weights "
                                    "another of its layers also reads (tied), or that have none: plan without "
                                    "lending them")
        builds[k].fetches = fetches
        # The operators' layers, by node name, for the layer-major runner's blocks: an fx module's
        # node meta does not survive the pickling that takes it to its process; its attributes do.
        setattr(builds[k].module, LAYERS_ATTR, {n.name: n.meta.get(LAYER_META) for n in builds[k].module.graph.nodes})
        for spec, item in zip(fetches, lent, strict=True):
            target = loans.lender(spec.lender_name)
            (builds[target.stage].lent if target.stage is not None else extra[target.name].lent).append(item)
    return list(extra.values())


@dataclass
class Groups:
    """A stage's process groups: ``pipe`` for ``PipelineStage`` (None: the world), ``ctrl`` for the
    stages' control collectives (None: the world), ``fetch`` for borrowed weights (None: no loans)."""

    pipe: dist.ProcessGroup | None
    ctrl: dist.ProcessGroup | None
    fetch: dist.ProcessGroup | None


def make_groups(setup: RunSetup) -> Groups:
    """Create the run's groups; every rank (stages and lenders) calls it, in the same order."""
    timeout = timedelta(seconds=setup.options.timeout)
    loans = setup.loans
    if loans is None or not loans.borrowed:
        return Groups(None, dist.new_group(backend="gloo", timeout=timeout) if setup.backend != "gloo" else None,
                      None)
    stages = list(range(loans.stages))
    pipe = dist.new_group(stages, backend=setup.backend, timeout=timeout) if loans.extra else None
    ctrl = pipe if setup.backend == "gloo" else dist.new_group(stages, backend="gloo", timeout=timeout)
    fetch = dist.new_group(list(range(setup.world_size)), backend="gloo", timeout=timeout)
    return Groups(pipe, ctrl, fetch)
