"""In-place writes in an exported graph: which operators a cut must never separate.

``torch.export`` keeps in-place writes (``copy_`` into a slice, ``mul_``, ``index_put_``): an operator that writes
a tensor has no data edge from the operators that read it before, and a reader of a view made before the write
has none from the write. A layer DAG built from data edges alone then allows cuts that run a write before an
earlier read, or that send a view to the next stage apart from its base, so that the base's later write never
reaches it (Kimi Linear's delta rule, solved by forward substitution into slices under export, computed garbage
when cut at leaf granularity).

An operator's schema says which of its results alias which input (``Tensor(a)``: a view; ``Tensor(a!)``: written).
For every tensor something writes, the operators that take it or any alias of it as input are its *touchers*.
A write ``w`` and a toucher ``t`` are safe apart when the layers grouped so far already order them as the graph
does: ``t`` before ``w`` is in ``w``'s layer or one upstream of it (or an ancestor of ``w``); ``t`` after ``w``
takes only values computed from ``w``'s result or made in ``w``'s layer, which cross a cut, if they do, once the
write is done. Any other pair must share a layer, together with the views each takes its aliases through (so
that no view crosses a cut apart from its base). A residual added in place and then activated (``x += r;
relu(x)``) is safe and keeps its layers, and so is a mask filled in place in one layer and read by every
attention layer after it; a row rewritten from the rows before it, by operators of other layers, is not.
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from collections.abc import Callable

from torch import fx

from pipeplan.costmodel.capture.union_find import UnionFind

__all__ = ["kept_together"]


class _Aliases(UnionFind[str]):
    """Which graph values share storage (by node name), and which of them are written."""

    def __init__(self, ops: list[fx.Node]) -> None:
        super().__init__()
        self.writes: list[tuple[fx.Node, fx.Node]] = []  # (writing operator, the value it writes)
        for n in ops:
            source = n.args[0] if n.args else None
            if n.target is operator.getitem and isinstance(source, fx.Node):
                self.union(source.name, n.name)  # an element of a list of views (split, unbind)
                continue
            schema = getattr(n.target, "_schema", None)
            for k, arg in enumerate(schema.arguments if schema is not None else ()):
                value = n.args[k] if k < len(n.args) else n.kwargs.get(arg.name)
                if arg.alias_info is None or not isinstance(value, fx.Node):
                    continue
                self.union(value.name, n.name)  # the result is the input, or a view of it
                if arg.alias_info.is_write:
                    self.writes.append((n, value))


def kept_together(ops: list[fx.Node], layer_of: Callable[[str], int | None],
                  upstream: Callable[[int], set[int]]) -> list[set[str]]:
    """Sets of operator names (of ``ops``, in graph order) that must share a layer; empty without in-place writes.

    ``layer_of`` gives an operator's layer as grouped so far (None for a value no operator of ``ops`` makes) and
    ``upstream`` a layer's ancestors among them: a write and a reader already ordered by their layers are safe."""
    aliases = _Aliases(ops)
    writes: dict[str, list[fx.Node]] = defaultdict(list)  # per written tensor (its alias root), the writes
    for w, value in aliases.writes:
        writes[aliases.find(value.name)].append(w)
    if not writes:
        return []
    position = {n.name: i for i, n in enumerate(ops[0].graph.nodes)}
    touchers: dict[str, list[tuple[fx.Node, list[fx.Node]]]] = defaultdict(list)
    for n in ops:
        by_tensor: dict[str, list[fx.Node]] = defaultdict(list)
        for a in n.all_input_nodes:
            if (root := aliases.find(a.name)) in writes:
                by_tensor[root].append(a)
        for root, inputs in by_tensor.items():
            touchers[root].append((n, inputs))

    def reaches(source: fx.Node, target: fx.Node) -> bool:
        """Whether ``target`` is ``source`` or computed from it (only nodes between the two need a look)."""
        floor, seen, stack = position[source.name], {target}, [target]
        while stack:
            n = stack.pop()
            if n is source:
                return True
            for a in n.all_input_nodes:
                if a not in seen and position[a.name] >= floor:
                    seen.add(a)
                    stack.append(a)
        return False

    upstream_of = functools.cache(upstream)

    def ordered(t: fx.Node, w: fx.Node, inputs: list[fx.Node]) -> bool:
        """Whether every cut keeps toucher ``t`` where the graph has it against write ``w``: before it, in its
        layer or one upstream; after it, reading only values computed from it or made in its layer (which cross
        a cut, if they do, once the write is done)."""
        lw = layer_of(w.name)
        if position[t.name] < position[w.name]:
            lt = layer_of(t.name)
            return lt == lw or (lw is not None and lt in upstream_of(lw)) or reaches(t, w)
        return all(layer_of(a.name) == lw or reaches(w, a) for a in inputs)

    def views(inputs: list[fx.Node], root: str) -> set[str]:
        """The operators that made ``inputs`` from the tensor's creator: views and writes, not the creator."""
        found: set[str] = set()
        stack = list(inputs)
        while stack:
            a = stack.pop()
            made_from = [b for b in a.all_input_nodes if aliases.find(b.name) == root]
            if a.op == "call_function" and made_from and a.name not in found:
                found.add(a.name)
                stack.extend(made_from)
        return found

    joined: UnionFind[str] = UnionFind()
    for root, touches in touchers.items():
        inputs_of = {t.name: inputs for t, inputs in touches}
        for w in writes[root]:  # each takes the tensor it writes: a toucher of it too
            for t, inputs in touches:
                # joined already: through pairs that each brought their views along, so nothing is left to add
                if t is w or joined.find(t.name) == joined.find(w.name):
                    continue
                if not ordered(t, w, inputs):
                    for name in {t.name} | views(inputs_of[w.name], root) | views(inputs, root):
                        joined.union(w.name, name)
    together: dict[str, set[str]] = defaultdict(set)
    for name in list(joined.parent):  # every name joined to another, and each set's root
        root = joined.find(name)
        together[root] |= {name, root}
    return list(together.values())
