"""The stage program: a lower bound on the bottleneck, and plans near it (for :func:`pipeplan.planner.ilp.solve`).

A dynamic program over chains of ideals (sets of layers closed under predecessors) walks every
plan's pipeline stage by stage, charging each stage at most what the CP-SAT model charges it, so
the least bottleneck it finds is a bound no plan beats; charging the most instead, its chains are
plans.  What is where:

=================  ================================================================================
``program``        :class:`BoundProgram`: the dynamic program; :func:`stage_bound`
``rounds``         :class:`Search`: the program's rounds within a solve, until the best plan is proven
``state``          :class:`Round`, ``State``, the keys of the charges, :class:`Charging`, ``Part``
``moves``          the states a chain starts from and the moves between them
``charges``        what a stage is charged: compute, receipts, sends, the broadcast layer
``caches``         ``Caches``: every array the program keeps between moves, in one owner
``links``          links between classes of devices, grouped by host
``ideals``         the ideals of a layer graph, with their compute, memory and frontier
``candidates``     the candidate stages between the ideals: pairs, receive and send lists
``stages``         ``Stages``, ``ClassStages``: the candidate stages as the program reads them
``memory``         which candidate stages fit a device's memory with their largest workspace
``prices``         layer prices: a bound from compute and memory alone, and windows of stage boundaries
``held``           stages that know where each tensor they receive is held, for exact receipts
``placement``      a chain as a plan: devices, and the layers with no edges
``limits``         :class:`Limits`: every size past which the program gives up or starts over
=================  ================================================================================
"""

from __future__ import annotations

from pipeplan.planner.bound.limits import LIMITS, Limits
from pipeplan.planner.bound.program import BoundProgram, StageBound, stage_bound
from pipeplan.planner.bound.rounds import Incumbent, Search
from pipeplan.planner.bound.state import Charging, Round

__all__ = ["LIMITS", "BoundProgram", "Charging", "Incumbent", "Limits", "Round", "Search", "StageBound", "stage_bound"]
