"""Export the computation eager runs where a model's code branches on being compiled or exported.

``transformers`` models ask ``is_torchdynamo_exporting()`` and ``is_torchdynamo_compiling()`` (both true under
``torch.export``) and take another path when they are: the gated delta rule of Qwen3-Next, Qwen3.5 and OLMo
Hybrid solves its triangular system with ``torch.linalg.solve_triangular`` in eager and, exported, by forward
substitution in a Python loop, unrolled into about 2,500 small operators where eager runs 500. Such a graph is
another, slower program than the model: OLMo Hybrid's ran 14.9 ms against eager's 8.0 on the model-207 Xeon, so
its stages ran 1.9× the unsplit model and a cost model pricing the graph priced work eager never does.

:func:`eager_branches` makes the modules that define the model's own classes answer False to both questions while
it is exported, so the graph holds eager's branch (OLMo Hybrid's: 513 operators, 9.3 ms, outputs equal). A branch
may exist because its eager path does not export (data-dependent checks): capture then exports again with the
flags as they are.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["FLAGS", "eager_branches"]

# transformers' names for "inside torch.compile" and "inside torch.export"
FLAGS = ("is_torchdynamo_compiling", "is_torchdynamo_exporting")
# the flags are module globals: two captures patching and restoring them at once would undo each other
_LOCK = threading.Lock()


def _eager() -> bool:
    return False


@contextmanager
def eager_branches(model: nn.Module) -> Iterator[list[str]]:
    """Within: every module defining a class of ``model``'s modules answers False to :data:`FLAGS`; yields the
    ``module.flag`` names it changed (empty: nothing to change, the model does not ask)."""
    modules = {sys.modules.get(type(m).__module__) for m in model.modules()}
    with _LOCK:
        saved = [(mod, flag, getattr(mod, flag)) for mod in modules if mod is not None
                 for flag in FLAGS if callable(getattr(mod, flag, None))]
        try:
            for mod, flag, _ in saved:
                setattr(mod, flag, _eager)
            yield sorted(f"{mod.__name__}.{flag}" for mod, flag, _ in saved)
        finally:
            for mod, flag, original in saved:
                setattr(mod, flag, original)
