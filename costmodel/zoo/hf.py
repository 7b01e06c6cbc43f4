"""Real architectures from ``transformers``, built from their configs with random weights.

Nothing is downloaded: each model is constructed from a default config object (the published
architecture's hyper-parameters) and initialised from the seeded RNG.  Needs the ``models`` extra.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pipeplan.costmodel.zoo.catalogue import get_model

__all__ = ["HF_MODELS", "build_hf"]

# name -> (config class, model class); input kinds and descriptions are in the catalogue.
HF_MODELS: dict[str, tuple[str, str]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "bert-base": ("BertConfig", "BertModel"),
    "vit-base": ("ViTConfig", "ViTForImageClassification"),
    "resnet-50": ("ResNetConfig", "ResNetForImageClassification"),
    "convnext-tiny": ("ConvNextConfig", "ConvNextForImageClassification"),
}


_PREFIX = "FirstOutput"
_FIRST_OUTPUT: dict[type, type] = {}


def _first_output_class(base: type) -> type:
    """``base`` with a forward that returns its first output, as a class pickle can find again.

    The class is named ``FirstOutput<Base>`` in this module, and the module's ``__getattr__``
    re-creates it from ``transformers`` on demand, so a process that unpickles such a model (an
    executor stage) finds the same class without having built one first.
    """
    cls = _FIRST_OUTPUT.get(base)
    if cls is None:
        def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
            return base.forward(self, x)[0]  # type: ignore[attr-defined]

        # __name__ stays the architecture's (what users and graphs see); pickle finds the class by
        # its __qualname__ in this module.
        cls = type(base.__name__, (base,), {"forward": forward, "__module__": __name__,
                                            "__qualname__": _PREFIX + base.__name__})
        _FIRST_OUTPUT[base] = cls
    return cls


def __getattr__(name: str) -> Any:
    if name.startswith(_PREFIX):
        import transformers

        base = getattr(transformers, name[len(_PREFIX):], None)
        if isinstance(base, type):
            return _first_output_class(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _first_output(model: nn.Module) -> nn.Module:
    """Make ``model`` return its first output tensor (the logits) instead of a ModelOutput.

    The instance's class is swapped for a subclass rather than wrapped in another module, so module
    paths stay those of the architecture (``transformer.h.0``, not ``model.transformer.h.0``).
    """
    model.__class__ = _first_output_class(type(model))
    return model


def build_hf(name: str, batch_size: int, seq_len: int, image_size: int,
             generator: torch.Generator) -> tuple[nn.Module, tuple[Any, ...]]:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            f"model {name!r} needs the 'transformers' package: pip install 'pipeplan[models]'"
        ) from exc
    config_cls, model_cls = HF_MODELS[name]
    inputs = get_model(name).inputs
    kwargs: dict[str, Any] = {}
    if inputs == "image":
        kwargs["num_labels"] = 1000  # ImageNet head, as published (configs default to 2)
        if config_cls == "ViTConfig":
            kwargs["image_size"] = image_size
    config = getattr(transformers, config_cls)(**kwargs)
    config.use_cache = False  # inference of a whole sequence: no KV cache in the graph
    model = getattr(transformers, model_cls)(config)
    model.eval()
    if inputs == "tokens":
        x = torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=generator)
    else:
        x = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
    return _first_output(model), (x,)
