"""What each device process does in a switch: its stage skeleton, the state it sends, receives, reloads.

The deployment process keeps the captured program it started from.  For a layout (a plan's stage
list) it cuts that program again (:func:`pipeplan.executor.stages.split_program`) and names every
buffer of every stage module by its state key, the name of that tensor in the exported program's
state (the stage modules share the program's tensors, so storage identity finds it).  Then, per
state tensor a new stage needs:

- the device already holds it (its process is alive and served it): it **stays**, nothing moves;
- another live process holds it: it is **sent** over the switch's process group, from the holder
  to the new stage (a tensor several stages use, a tied weight, comes from one of its holders);
- nobody alive holds it (its process died): it is **reloaded** from the deployment's copy of the
  source model, sent with the order — :class:`pipeplan.planner.migration.Reload`'s case.

Except at the start, the stage modules go to the processes as skeletons, their buffers on the meta
device: weights never travel through the orders unless reloaded.  Ranks: stage k is rank k; a live
process that holds state someone needs but serves no stage joins after them, sends, and ends; a
live process with neither ends.  The first layout of a harvest plan also has lender processes of
their own (:mod:`pipeplan.executor.deploy_loans`), ranked after the stages as the plan's loans rank
them; the weights they lend are no process's state, so a later layout reloads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch

from pipeplan.costmodel.capture import CapturedProgram
from pipeplan.executor.deploy_stage import Layout, Transfer
from pipeplan.executor.lender import LenderBuild
from pipeplan.executor.options import RunSetup
from pipeplan.executor.stage_build import StageBuild
from pipeplan.executor.stages import split_program
from pipeplan.planner.plan import Plan

__all__ = ["LayoutOrders", "StateIndex", "layout_orders", "stage_builds"]

_Key = tuple[int, int, tuple[int, ...], tuple[int, ...], torch.dtype]


def _identity(t: torch.Tensor) -> _Key:
    return (t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(t.shape), tuple(t.stride()), t.dtype)


class StateIndex:
    """Every state tensor of the captured program (parameters, buffers, constants), by name."""

    def __init__(self, captured: CapturedProgram) -> None:
        program = captured.program
        self.tensors: dict[str, torch.Tensor] = {
            name: t for name, t in {**program.state_dict, **program.constants}.items() if isinstance(t, torch.Tensor)}

    def attrs(self, module: torch.nn.Module) -> dict[str, str]:
        """The stage module's buffer name → state key (``split_program`` attaches state as top-level buffers)."""
        names = {_identity(t.detach()): name for name, t in self.tensors.items()}  # storages may have moved
        out: dict[str, str] = {}
        for attr, tensor in module._buffers.items():
            if tensor is None:
                continue
            name = names.get(_identity(tensor))
            if name is None:
                raise AssertionError(f"stage buffer {attr!r} is none of the program's state tensors")
            out[attr] = name
        return out

    def nbytes(self, key: str) -> int:
        t = self.tensors[key]
        return t.numel() * t.element_size()


def stage_builds(captured: CapturedProgram, plan: Plan, example: StageBuild) -> list[StageBuild]:
    """The plan's stage modules cut from ``captured``, with ``example``'s inputs (no unsplit model)."""
    programs = split_program(captured, [s.layers for s in plan.stages])
    return [StageBuild(p.module, p.input_meta, p.output_meta, example.args, example.kwargs, example.kwarg_order,
                       None) for p in programs]


class LayoutOrders(NamedTuple):
    """One switch, as orders: a :class:`Layout` per device process taking part."""

    orders: dict[str, Layout]  # device → its order (the new stages' devices, then those that send and end)
    stop: list[str]  # live devices with no part: they are stopped
    sent: int  # state bytes crossing the process group
    reloaded: int  # state bytes from the deployment's copy of the source
    kept: int  # state bytes that stay where they are


@dataclass
class _Plan:
    sends: dict[str, list[Transfer]] = field(default_factory=dict)
    recvs: dict[str, list[Transfer]] = field(default_factory=dict)
    reloads: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)


def layout_orders(number: int, setup: RunSetup, builds: list[StageBuild], index: StateIndex,
                  holdings: Mapping[str, set[str]], *, init_method: str, epoch: float,
                  first: bool = False, lenders: Sequence[LenderBuild] = ()) -> LayoutOrders:
    """The orders that take the live processes (``holdings``: device → the state keys it holds) to
    the layout of ``setup`` / ``builds``.  ``first``: the builds carry their weights (the start);
    ``lenders``: the lender processes of its own of a first layout that borrows, in rank order."""
    devices = [s.device for s in setup.stages]
    if len(set(devices)) != len(devices):
        raise ValueError(f"a deployment runs one stage per device; the plan repeats one of {devices}")
    attrs = [index.attrs(b.module) for b in builds]
    moves = _Plan()
    senders: list[str] = []  # devices outside the layout that must send before ending
    kept = sent = reloaded = 0
    tag = 0
    for k, device in enumerate(devices):
        for key in dict.fromkeys(attrs[k].values()):
            size = index.nbytes(key)
            if first or key in holdings.get(device, set()):
                kept += size if not first else 0
                continue
            holder = next((d for d in devices if key in holdings.get(d, set())), None) or \
                next((d for d in sorted(holdings) if key in holdings[d]), None)
            if holder is None:
                moves.reloads.setdefault(device, {})[key] = index.tensors[key].detach().clone()
                reloaded += size
                continue
            if holder not in devices and holder not in senders:
                senders.append(holder)
            t = index.tensors[key]
            rank_of = {d: r for r, d in enumerate([*devices, *senders])}
            moves.sends.setdefault(holder, []).append(Transfer(key, rank_of[device], tag, tuple(t.shape), t.dtype))
            moves.recvs.setdefault(device, []).append(Transfer(key, rank_of[holder], tag, tuple(t.shape), t.dtype))
            tag += 1
            sent += size
    if lenders and (not first or setup.loans is None):
        raise ValueError("lender processes of their own join only the first layout, of a plan with loans")
    world = len(devices) + len(senders) + len(lenders)
    orders: dict[str, Layout] = {}
    for lender in lenders:
        assert setup.loans is not None
        rank = setup.loans.lender(lender.name).rank
        assert rank >= len(devices) + len(senders), (lender.name, rank)
        orders[lender.name] = Layout(number, init_method, rank, world, len(devices), None, setup, None, {}, [], [],
                                     {}, epoch, lender)
    for rank, device in enumerate([*devices, *senders]):
        serving = rank < len(devices)
        build = builds[rank] if serving else None
        if build is not None and not first:
            build = _skeleton(build)
        orders[device] = Layout(number, init_method, rank, world, len(devices), rank if serving else None, setup,
                                build, attrs[rank] if serving else {}, moves.sends.get(device, []),
                                moves.recvs.get(device, []), moves.reloads.get(device, {}), epoch)
    orders = dict(sorted(orders.items(), key=lambda item: item[1].rank))
    stop = sorted(d for d in holdings if d not in orders)
    return LayoutOrders(orders, stop, sent, reloaded, kept)


def _skeleton(build: StageBuild) -> StageBuild:
    """``build`` with its buffers on the meta device: the process fills them with the state it has."""
    module = build.module
    for attr, tensor in list(module._buffers.items()):
        if tensor is not None:
            module._buffers[attr] = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
    return replace(build, module=module)
