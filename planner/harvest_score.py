"""Score a plan that borrows memory, exactly in seconds: the simulator's stage times plus fetches.

:class:`Lending` resolves :class:`pipeplan.planner.harvest.HarvestOptions` against a problem: who may lend
to whom, over which link, and the capacities left once ``reserved`` is taken off.  :func:`score`
then takes an assignment (layer → device, as :func:`pipeplan.planner.simulate.evaluate` does) and the loans
(layer → lender) and gives what the CP-SAT terms of :mod:`pipeplan.planner.harvest_model` count, in seconds:

- a **channel** is the link a fetch crosses: lender device l → borrowing device d (the cluster's
  link between them), or a host's link, one per host, shared by every device of that host that
  borrows from it.  Its time per microbatch is ``latency + Σ bytes / bandwidth`` over everything
  it carries: borrowers on one channel contend;
- a stage's **fetch** is the sum of the channels it reads (its layers run, and fetch, in order);
  its time is ``max(compute, receive, send, fetch)`` with ``comm="overlap"`` or their sum with
  ``serial``.  A lender pays no time (the copy is the link's and the DMA engine's work), only memory;
- **memory**, on the borrower: its stage's memory (:meth:`Problem.memory`) less what it borrowed,
  plus ``STAGING_BUFFERS`` × its largest loan; on a lender device: its own stage's memory (if
  any) plus what it lends, under the capacity after the margin and ``reserved``; on a host: what
  it lends, under ``host_memory``;
- with ``fetch="batch"`` a borrowing stage runs its M microbatches layer-major, so one **round** of
  fetches serves the batch: its fetch per microbatch is the channels' time ÷ M, but it holds the
  live activations of all M microbatches at once: its workspace term is
  ``max(workspace_v, M · live_v)`` (:meth:`Lending.batch_workspace`, ``live_v`` the bytes alive while
  v runs one microbatch, :func:`pipeplan.costmodel.memory.liveness`), and it passes a batch on only
  when all of it is done, so the batch's latency is that of a flow shop cut at those stages
  (:func:`batch_latency`);
- with ``stash=True`` too, such a stage may keep the microbatches it is not computing with a
  lender (``stashes``, :mod:`pipeplan.planner.harvest_stash`): one microbatch's working set and two
  stash buffers on it, ``(M − 1)`` microbatches' stash on the lender, and their traffic out and
  back on the channel between them, beside the weights.

Everything else (convexity, order, placement constraints, ``max_devices``) is the simulator's,
run on the problem with memory unconstrained (:meth:`Lending.relaxed`), since memory is checked here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from pipeplan.costmodel.memory import Liveness, liveness
from pipeplan.planner.harvest import (
    HOST_PREFIX,
    STAGING_BUFFERS,
    STASH_BUFFERS,
    Channel,
    HarvestOptions,
    Loan,
    MemoryRow,
    StageFetch,
    Stash,
    host_lender,
)
from pipeplan.planner.harvest_stash import stash_sizes
from pipeplan.planner.plan import Stage
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import Assignment, evaluate

__all__ = ["HarvestScore", "Lending", "batch_latency", "score"]

ChannelKey = tuple[int, int | None]  # (lender index, borrowing device), or (host lender, None): shared


class Lending:
    """The lending rules of one problem: lenders are indexed devices first (``0..K−1``), then hosts."""

    def __init__(self, problem: Problem, options: HarvestOptions) -> None:
        devices = {d: i for i, d in enumerate(problem.devices)}
        reserved = dict(options.reserved)
        for device in [*reserved, *(options.lenders or ())]:
            if device not in devices:
                raise PlanError(f"harvest names device {device!r}, which cluster {problem.cluster.name!r} does "
                                f"not have; its devices are {', '.join(problem.devices)}")
        capacity = [cap - reserved.get(d, 0) for cap, d in zip(problem.capacity, problem.devices, strict=True)]
        for d, cap in enumerate(capacity):
            if cap < 0:
                raise PlanError(f"harvest reserves {reserved[problem.devices[d]]} bytes on {problem.devices[d]!r}, "
                                f"more than the {problem.capacity[d]} it offers after the margin")
        self.options = options
        self.base = problem
        # The problem with reserved memory taken off: what every plan, borrowing or not, must keep.
        self.problem = copy.copy(problem)
        self.problem.capacity = capacity
        self.reserved = [reserved.get(d, 0) for d in problem.devices]
        k = problem.n_devices
        hosts = sorted({dev.host for dev in problem.cluster.devices}) if options.host_memory > 0 else []
        self.names: list[str] = [*problem.devices, *(host_lender(h) for h in hosts)]
        self.host_of: list[int | None] = [k + hosts.index(dev.host) if hosts else None
                                         for dev in problem.cluster.devices]
        lenders = set(options.lenders) if options.lenders is not None else set(problem.devices)
        self.lends = [d in lenders for d in problem.devices] + [True] * len(hosts)
        self.capacity = capacity + [options.host_memory] * len(hosts)

    @property
    def rounds(self) -> int:
        """Microbatches one round of fetches serves: the batch's with ``fetch="batch"``, else one."""
        return self.options.rounds(self.problem.options.microbatches)

    @cached_property
    def _liveness(self) -> Liveness:
        problem = self.problem
        return liveness(problem.graph, [problem.costmodel.layer_memory(layer) for layer in problem.graph.layers])

    @cached_property
    def batch_workspace(self) -> list[int]:
        """Per layer, the workspace term of a stage that runs its batch layer-major (``fetch="batch"``):
        at least the usual one, and at least M microbatches' live sets (each microbatch, before,
        at or past layer v, holds a subset of what one holds while v runs)."""
        m = self.problem.options.microbatches
        return [max(w, m * b) for w, b in zip(self.problem.workspace, self._liveness.live, strict=True)]

    @cached_property
    def stash_workspace(self) -> list[int]:
        """Per layer, the workspace term of a layer-major stage that stashes (``stash=True``): one
        microbatch's working set, ``max(workspace_v, live_v)`` (the stash buffers come on top)."""
        return [max(w, b) for w, b in zip(self.problem.workspace, self._liveness.live, strict=True)]

    @property
    def cut(self) -> list[int]:
        """Per layer, the bytes one microbatch holds just after it (what a stash sends out)."""
        return self._liveness.cut

    def stage_memory(self, layers: list[int], borrows: bool, stashes: bool = False) -> int:
        """What a stage holding ``layers`` needs before loans: :meth:`Problem.memory`, or with
        ``fetch="batch"`` and loans, the same with :attr:`batch_workspace` for its workspace
        (:attr:`stash_workspace` when it stashes; its stash buffers are the caller's)."""
        if not (borrows and self.options.batched):
            return self.problem.memory(layers)
        return self.problem.memory(layers, self.stash_workspace if stashes else self.batch_workspace)

    @property
    def n_lenders(self) -> int:
        return len(self.names)

    def is_host(self, lender: int) -> bool:
        return lender >= self.problem.n_devices

    def sources(self, d: int) -> list[int]:
        """The lenders device ``d`` may borrow from: other lending devices, and its own host."""
        out = [o for o in range(self.problem.n_devices) if o != d and self.lends[o]]
        host = self.host_of[d]
        return out if host is None else [*out, host]

    def channel(self, lender: int, d: int) -> ChannelKey:
        return (lender, None) if self.is_host(lender) else (lender, d)

    def link(self, lender: int, d: int) -> tuple[float, float]:
        """(bandwidth, latency) of the link a fetch from ``lender`` to device ``d`` crosses."""
        if self.is_host(lender):
            return self.options.host_bandwidth, self.options.host_latency
        link = self.problem.cluster.link(self.problem.devices[lender], self.problem.devices[d])
        return link.bandwidth, link.latency

    def relaxed(self) -> Problem:
        """The problem with memory unconstrained: every device could hold the whole model."""
        out = copy.copy(self.problem)
        whole = self.problem.memory(list(range(self.problem.n_layers)))
        out.capacity = [max(whole, cap) for cap in self.problem.capacity]
        return out

    def index(self, lender: str) -> int:
        if lender not in self.names:
            raise PlanError(f"unknown lender {lender!r}: the lenders are {', '.join(self.names)}"
                            + ("" if self.options.host_memory else f" (a {HOST_PREFIX}NAME lender needs host_memory)"))
        return self.names.index(lender)


@dataclass
class HarvestScore:
    """A plan with loans, scored: stages in pipeline order (times with fetches, memory on the device)."""

    stages: list[Stage]
    bottleneck: float
    latency: float
    loans: list[Loan]
    channels: list[Channel]
    fetches: list[StageFetch]
    memory: list[MemoryRow]
    violation: str | None
    objective: float  # the latency or the bottleneck, as the problem's objective asks
    stashes: list[Stash]


def score(lending: Lending, assignment: Assignment, loans: Mapping[str, str] | Sequence[int | None],
          order: Sequence[str] | None = None, stashes: Mapping[str, str] | Sequence[int | None] = ()) -> HarvestScore:
    """Score an assignment whose layers keep weights with lenders: ``loans`` maps a layer name to a
    lender name (``{"l3": "gpu2", "l4": "host:host0"}``), or gives a lender index or None per layer;
    ``stashes`` maps a device to the lender of its stashed activations (``stash=True``), or gives a
    lender index or None per device."""
    problem = lending.problem
    ev = evaluate(lending.relaxed(), assignment, order)
    dev_of = [0] * problem.n_layers
    for stage in ev.stages:
        for name in stage.layers:
            dev_of[problem.index[name]] = problem.devices.index(stage.device)
    home = _homes(lending, loans)
    violation = ev.violation
    channel_bytes: dict[ChannelKey, int] = {}
    channel_seconds: dict[ChannelKey, float] = {}
    loan_rows: list[Loan] = []
    borrowed = [0] * problem.n_devices
    largest = [0] * problem.n_devices
    lent = [0] * lending.n_lenders
    for v, lender in enumerate(home):
        if lender is None:
            continue
        d, nbytes = dev_of[v], problem.param_bytes[v]
        if violation is None and lender not in lending.sources(d):
            violation = (f"layer {problem.layers[v]!r} on {problem.devices[d]!r} may not borrow from "
                         f"{lending.names[lender]!r}: {_why_not(lending, lender, d)}")
        bandwidth, latency = lending.link(lender, d)
        key = lending.channel(lender, d)
        channel_bytes[key] = channel_bytes.get(key, 0) + nbytes
        channel_seconds.setdefault(key, latency)
        channel_seconds[key] += nbytes / bandwidth
        loan_rows.append(Loan(problem.layers[v], problem.devices[d], lending.names[lender], nbytes,
                              nbytes / bandwidth))
        borrowed[d] += nbytes
        largest[d] = max(largest[d], nbytes)
        lent[lender] += nbytes
    stash_of = _stash_homes(lending, stashes)
    stash_rows: list[Stash] = []
    stash_out, stash_in, per_mb = [0] * problem.n_devices, [0] * lending.n_lenders, [0] * problem.n_devices
    channel_stash: dict[ChannelKey, int] = dict.fromkeys(channel_bytes, 0)
    for d, lender in enumerate(stash_of):
        if lender is None:
            continue
        layers = [v for v in range(problem.n_layers) if dev_of[v] == d]
        if violation is None:
            violation = _stash_violation(lending, d, lender, bool(layers), borrowed[d] > 0)
        per, traffic = stash_sizes(lending, layers)
        held = (problem.options.microbatches - 1) * per
        bandwidth, latency = lending.link(lender, d)
        key = lending.channel(lender, d)
        channel_bytes[key] = channel_bytes.get(key, 0) + traffic
        channel_stash[key] = channel_stash.get(key, 0) + traffic
        channel_seconds.setdefault(key, latency)
        channel_seconds[key] += traffic / bandwidth
        stash_rows.append(Stash(problem.devices[d], lending.names[lender], held, per, traffic, traffic / bandwidth))
        stash_out[d], per_mb[d] = held, per
        stash_in[lender] += held
        lent[lender] += held
    fetch = [0.0] * problem.n_devices
    for (lender, target), seconds in channel_seconds.items():
        readers = [target] if target is not None else sorted({dev_of[v] for v, h in enumerate(home) if h == lender}
                                                             | {d for d, h in enumerate(stash_of) if h == lender})
        for d in readers:
            fetch[d] += seconds / lending.rounds
    serial = problem.options.comm == "serial"
    stages: list[Stage] = []
    own = [0] * problem.n_devices
    for i, s in enumerate(ev.stages):
        d = problem.devices.index(s.device)
        t = s.compute + s.recv + s.send + fetch[d] if serial else max(s.compute, s.recv, s.send, fetch[d])
        own[d] = (lending.stage_memory([problem.index[n] for n in s.layers], borrowed[d] > 0, stash_of[d] is not None)
                  - borrowed[d] + STAGING_BUFFERS * largest[d] + STASH_BUFFERS * per_mb[d])
        stages.append(Stage(i, s.device, s.layers, s.compute, s.recv, s.send, t, own[d], problem.capacity[d]))
    memory = []
    for lender, name in enumerate(lending.names):
        mine = own[lender] if lender < problem.n_devices else 0
        gave = borrowed[lender] + stash_out[lender] if lender < problem.n_devices else 0
        reserved = lending.reserved[lender] if lender < problem.n_devices else 0
        cap = lending.capacity[lender]
        memory.append(MemoryRow(name, cap + reserved, mine, lent[lender], gave, reserved, cap - mine - lent[lender],
                                stash_in[lender], stash_out[lender] if lender < problem.n_devices else 0))
        if violation is None and mine + lent[lender] > cap:
            batch = (f" (with fetch='batch' it holds the live activations of all {problem.options.microbatches} "
                     "microbatches at once)" if lending.options.batched and gave and not stash_out[lender] else "")
            note = (f" (of which {stash_in[lender]} bytes are other stages' stashed activations)"
                    if stash_in[lender] else "")
            violation = (f"{name!r} needs {mine} bytes for its stage{batch} and lends {lent[lender]}{note} but offers "
                         f"{cap} after the margin and reservations: {mine + lent[lender] - cap} bytes short")
    times = [s.time for s in stages]
    bottleneck = max(times, default=0.0)
    batched = [lending.options.batched and borrowed[problem.devices.index(s.device)] > 0 for s in stages]
    latency = batch_latency(times, batched, problem.options.microbatches)
    if violation is None and bottleneck > problem.max_bottleneck:
        violation = (f"bottleneck {bottleneck:.6g} s is above what min_throughput allows "
                     f"({problem.max_bottleneck:.6g} s)")
    channels = [Channel(lending.names[lender], problem.devices[target] if target is not None else "*",
                        channel_bytes[(lender, target)], seconds, lending.link(lender, target or 0)[0],
                        channel_stash[(lender, target)])
                for (lender, target), seconds in sorted(channel_seconds.items(), key=_channel_order)]
    fetches = []
    for s in stages:
        d = problem.devices.index(s.device)
        fetches.append(StageFetch(s.device, fetch[d], borrowed[d], STAGING_BUFFERS * largest[d], stash_out[d],
                                  STASH_BUFFERS * per_mb[d]))
    objective = latency if problem.options.objective == "latency" else bottleneck
    return HarvestScore(stages, bottleneck, latency, loan_rows, channels, fetches, memory, violation, objective,
                        stash_rows)


def batch_latency(times: Sequence[float], batched: Sequence[bool], microbatches: int) -> float:
    """The batch's latency through stages of ``times`` (per microbatch, in pipeline order), where a
    ``batched`` stage takes the whole batch before it passes any on (it runs layer-major).

    Without such stages this is the simulator's flow shop, ``Σ t + (M − 1) · max t``.  A batched
    stage cuts the pipeline: the stages between two cuts form a flow shop whose M jobs are all
    ready at its start (exact for identical jobs), and the batched stage takes ``M · t``.  Never
    less than the flow shop of all stages, so a bound on that is a bound on this.

    >>> batch_latency([1.0, 2.0, 1.0], [False, True, False], 3)  # (1+2·1) + 3·2 + (1+2·1)
    12.0
    """
    total, segment = 0.0, list[float]()
    for t, cut in zip([*times, 0.0], [*batched, True], strict=True):
        if cut:
            if segment:
                total += sum(segment) + (microbatches - 1) * max(segment)
            total += microbatches * t
            segment = []
        else:
            segment.append(t)
    return total


def _channel_order(item: tuple[ChannelKey, float]) -> tuple[int, int]:
    (lender, target), _ = item
    return lender, -1 if target is None else target


def _homes(lending: Lending, loans: Mapping[str, str] | Sequence[int | None]) -> list[int | None]:
    """Lender index (None: at home) per layer, from either form :func:`score` takes."""
    problem = lending.problem
    if isinstance(loans, Mapping):
        unknown = sorted(set(loans) - set(problem.index))
        if unknown:
            raise PlanError(f"a loan names layer {unknown[0]!r}, which model {problem.graph.model!r} does not have")
        return [lending.index(loans[name]) if name in loans else None for name in problem.layers]
    if len(loans) != problem.n_layers:
        raise PlanError(f"loans must give a lender or None per layer: {len(loans)} for {problem.n_layers} layers")
    return list(loans)


def _stash_homes(lending: Lending, stashes: Mapping[str, str] | Sequence[int | None]) -> list[int | None]:
    """Stash lender index (None: no stash) per device, from either form :func:`score` takes."""
    problem = lending.problem
    if isinstance(stashes, Mapping):
        unknown = sorted(set(stashes) - set(problem.devices))
        if unknown:
            raise PlanError(f"a stash names device {unknown[0]!r}, which cluster {problem.cluster.name!r} "
                            "does not have")
        return [lending.index(stashes[d]) if d in stashes else None for d in problem.devices]
    if not stashes:
        return [None] * problem.n_devices
    if len(stashes) != problem.n_devices:
        raise PlanError(f"stashes must give a lender or None per device: {len(stashes)} for {problem.n_devices}")
    return list(stashes)


def _stash_violation(lending: Lending, d: int, lender: int, runs: bool, borrows: bool) -> str | None:
    name = lending.problem.devices[d]
    if not lending.options.stash:
        return (f"{name!r} stashes its activations with {lending.names[lender]!r}, but the harvest options say "
                "stash=False")
    if not runs or not borrows:
        return (f"{name!r} stashes its activations, but only a stage that borrows weights runs its batch "
                "layer-major and so has other microbatches' activations to stash")
    if lender not in lending.sources(d):
        return f"{name!r} may not stash with {lending.names[lender]!r}: {_why_not(lending, lender, d)}"
    return None


def _why_not(lending: Lending, lender: int, d: int) -> str:
    if lender == d:
        return "a device cannot lend to itself"
    if lending.is_host(lender):
        return f"a device borrows only from its own host ({lending.names[lending.host_of[d] or 0]})" \
            if lending.host_of[d] is not None else "no host tier"
    return "it is not among the harvest lenders"
