"""A chain of the stage program as a plan: its stages on devices, and the layers with no edges placed.

The program walks chains of ideals over classes of devices (:mod:`pipeplan.planner.bound.program`);
a chain names, per stage, a class and two ideals.  Here each stage takes the next device of its
class (in the class's order) and the layers between its ideals; the layers with no edges, which
no ideal holds, join the stage where it stays shortest, and fits in memory if any can.
"""

from __future__ import annotations

import numpy as np

from pipeplan.planner.bound.stages import Stages
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["place_chain"]


def place_chain(problem: Problem, costs: Ticks, classes: list[list[int]], stages: Stages,
                chain: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """The chain's stages, ``(class, ideal before, ideal after)`` in pipeline order, on devices (see
    the module docstring): layer → device index, and the devices in pipeline order."""
    member = stages.member
    used = [0] * len(classes)
    dev_of = [-1] * problem.n_layers
    order: list[int] = []
    for c, frm, to in chain:
        device = classes[c][used[c]]
        used[c] += 1
        order.append(device)
        for v in np.flatnonzero(member[to] & ~member[frm]).tolist():
            dev_of[v] = device
    if stages.isolated:
        _place_isolated(problem, costs, stages.isolated, dev_of, order)
    return dev_of, order


def _place_isolated(problem: Problem, costs: Ticks, isolated: list[int], dev_of: list[int], order: list[int]) -> None:
    """Each layer with no edges onto the device of ``order`` where its stage stays shortest (and
    fits in memory, if any can), the dearest layers first; ``dev_of`` is updated."""
    serial = problem.options.comm == "serial"
    for v in isolated:
        dev_of[v] = order[0]
    compute, recv, send = costs.stage_costs(problem, dev_of)
    compute[order[0]] -= int(sum(costs.compute[v, order[0]] for v in isolated))
    layers = {d: [v for v, dv in enumerate(dev_of) if dv == d and v not in isolated] for d in order}

    def time_with(d: int, v: int) -> tuple[int, int]:
        more = int(compute[d] + costs.compute[v, d])
        fits = problem.memory([*layers[d], v]) <= problem.capacity[d]
        return (0 if fits else 1, more + int(recv[d] + send[d]) if serial else max(more, recv[d], send[d]))

    for v in sorted(isolated, key=lambda v: -int(costs.compute[v].max())):
        d = min(order, key=lambda d: time_with(d, v))  # where the stage stays shortest
        dev_of[v] = d
        compute[d] += costs.compute[v, d]
        layers[d].append(v)
