"""Which module owns each exported operator at a capture granularity (see :mod:`pipeplan.costmodel.capture`).

``leaf`` gives an operator to the innermost leaf module that called it; ``block`` to the repeated
block around it (:func:`block_paths`); ``depth:N`` to its ancestor at depth N of the module tree.
An operator no module owns at that level is *functional*: it belongs to the scope that ran it.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict

import torch
from torch import nn

__all__ = ["Owners", "block_paths"]

log = logging.getLogger(__name__)

_BLOCK_MIN_INSTANCES = 8


def _depth(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def _call_index(key: str) -> int:
    m = re.search(r"@(\d+)$", key)
    return int(m.group(1)) if m else 0


def block_paths(model: nn.Module) -> set[str]:
    """Paths of the modules that ``granularity='block'`` treats as one layer each: the outermost
    class of non-leaf modules repeated in ``ModuleList``/``Sequential`` containers at least
    8 times, else the most repeated one."""
    candidates: dict[str, list[str]] = defaultdict(list)
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.named_children())
        classes = Counter(type(c).__name__ for _, c in children)
        for name, child in children:
            if classes[type(child).__name__] >= 2 and any(True for _ in child.children()):
                candidates[type(child).__name__].append(f"{path}.{name}" if path else name)
    # A class of its own (BasicBlock, GPT2Block) names a block better than a bare container.
    named = {c: paths for c, paths in candidates.items() if c not in ("Sequential", "ModuleList")}
    candidates = named or candidates
    if not candidates:
        return set()

    def mean_depth(cls: str) -> float:
        return sum(_depth(p) for p in candidates[cls]) / len(candidates[cls])

    many = [c for c in candidates if len(candidates[c]) >= _BLOCK_MIN_INSTANCES]
    if many:
        chosen = min(many, key=lambda c: (mean_depth(c), -len(candidates[c])))
    else:
        chosen = max(candidates, key=lambda c: (len(candidates[c]), -mean_depth(c)))
    return set(candidates[chosen])


class Owners:
    """Decides which module (or functional scope) owns an operator at the chosen granularity."""

    def __init__(self, model: nn.Module, mode: str, depth: int | None) -> None:
        self.mode, self.depth = mode, depth
        self.modules = dict(model.named_modules())
        self.blocks = block_paths(model) if self.mode == "block" else set()
        if self.mode == "block" and not self.blocks:
            log.warning("no repeated blocks found in %s; using leaf granularity", type(model).__name__)

    def is_leaf(self, path: str) -> bool:
        module = self.modules.get(path)
        return module is not None and not any(True for _ in module.children())

    def owner(self, n: torch.fx.Node) -> tuple[bool, str, int]:
        """(functional?, module path or scope, call index) for one operator."""
        stack = list((n.meta.get("nn_module_stack") or {}).items())
        entries = [(key, path) for key, (path, _cls) in stack]
        if not entries:
            return True, "", 0
        if self.mode == "block":
            for key, path in reversed(entries):
                if path in self.blocks:
                    return False, path, _call_index(key)
        if self.mode == "depth":
            assert self.depth is not None
            for key, path in entries:
                if _depth(path) >= self.depth:
                    cut = ".".join(path.split(".")[: self.depth])
                    return False, cut, _call_index(key)
            key, path = entries[-1]
            if self.is_leaf(path):
                return False, path, _call_index(key)
            return True, path, 0
        key, path = entries[-1]
        if self.is_leaf(path):
            return False, path, _call_index(key)
        return True, path, 0

    def class_name(self, path: str) -> str:
        module = self.modules.get(path)
        return type(module).__name__ if module is not None else "Module"
