"""Every cut a captured layer DAG allows, run for real: the check the capture tests share.

A cut after a layer and all its ancestors is a split the DAG permits; each must compute the model's outputs
exactly, whatever in-place writes or split modules the layers hold.
"""

from __future__ import annotations

import networkx as nx
import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.executor.stages import split_program


def every_allowed_cut(model: nn.Module, x: torch.Tensor) -> list[str]:
    """For each layer, the cut after it and its ancestors (a split the DAG allows); the cuts whose outputs
    differ from the model's."""
    model.eval()
    captured = capture_program(model, (x,))
    graph = captured.graph
    dag = nx.DiGraph()
    dag.add_nodes_from(la.name for la in graph.layers)
    dag.add_edges_from((u, v) for u, v, _ in graph.edges())
    order = [la.name for la in sorted(graph.layers, key=lambda la: la.order)]
    with torch.no_grad():
        want = model(x)
    wrong = []
    for layer in order:
        first = nx.ancestors(dag, layer) | {layer}
        if len(first) == len(order):
            continue
        stages = split_program(captured, [[n for n in order if n in first], [n for n in order if n not in first]])
        values: tuple[torch.Tensor, ...] = (x,)
        with torch.no_grad():
            for stage in stages:
                values = stage.module(*values)
        if not torch.equal(values[0], want):
            wrong.append(layer)
    return wrong
