"""Moved to :mod:`pipeplan.costmodel.cluster`, beside the devices, contention and links it is built of
(one hardware model that every package reads).  This alias keeps ``pipeplan.planner.cluster`` imports
working; new code imports ``pipeplan.costmodel.cluster`` (or ``pipeplan.planner``'s exports)."""

from pipeplan.costmodel.cluster import *  # noqa: F403
from pipeplan.costmodel.cluster import __all__  # noqa: F401
