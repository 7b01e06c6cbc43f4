"""Small configurations of real ``transformers`` architectures, as model factories.

Each function is a factory as ``pipeplan`` takes them (``tests.tiny_models:llama_gqa``): called
with ``batch_size=`` (and ``seq_len=`` / ``image_size=``), it returns ``(module, args)`` or
``(module, args, kwargs)``.  Random weights from the seeded RNG, nothing downloaded.  Together they
cover what the executor must handle: grouped-query attention, an encoder-decoder with two inputs
and several outputs, a vision transformer, depthwise convolutions, a mixture of experts that calls
a custom operator, and keyword inputs with a tuple of outputs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

VOCAB = 96


def _tokens(batch_size: int, seq_len: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, seq_len))


def llama_gqa(batch_size: int = 2, seq_len: int = 16) -> tuple[nn.Module, tuple[Any, ...]]:
    """Decoder-only, grouped-query attention (4 query heads share 2 key/value heads), RoPE, SwiGLU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
    return LlamaForCausalLM(config).eval(), (_tokens(batch_size, seq_len),)


def t5_encoder_decoder(batch_size: int = 2, seq_len: int = 12) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """Encoder-decoder with cross-attention: two token inputs, logits and encoder states out."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                      num_heads=4, use_cache=False, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(config).eval()
    inputs = {"input_ids": _tokens(batch_size, seq_len), "decoder_input_ids": _tokens(batch_size, seq_len // 2)}
    return model, (), inputs


def vit(batch_size: int = 2, image_size: int = 32) -> tuple[nn.Module, tuple[Any, ...]]:
    """Vision transformer: patch embedding, class token, 2 encoder blocks, classifier."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=image_size, patch_size=8, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, num_labels=10)
    return ViTForImageClassification(config).eval(), (torch.randn(batch_size, 3, image_size, image_size),)


def convnext(batch_size: int = 2, image_size: int = 32) -> tuple[nn.Module, tuple[Any, ...]]:
    """Depthwise 7×7 convolutions in channels-last blocks (permutes at every block boundary)."""
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(num_channels=3, num_stages=3, hidden_sizes=[8, 16, 24], depths=[1, 2, 1], num_labels=10)
    return ConvNextForImageClassification(config).eval(), (torch.randn(batch_size, 3, image_size, image_size),)


def mixtral_moe(batch_size: int = 2, seq_len: int = 8) -> tuple[nn.Module, tuple[Any, ...]]:
    """Mixture of experts: 4 experts, top-2 routing, grouped-query attention."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=64, use_cache=False)
    return MixtralForCausalLM(config).eval(), (_tokens(batch_size, seq_len),)


def bert_masked(batch_size: int = 2, seq_len: int = 16) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """Encoder with keyword inputs (ids, attention mask, token types) and two outputs (states, pooled)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    mask[:, seq_len - 3:] = 0  # padded tail: the mask really changes the result
    kwargs = {"input_ids": _tokens(batch_size, seq_len), "attention_mask": mask,
              "token_type_ids": torch.zeros(batch_size, seq_len, dtype=torch.long)}
    return BertModel(config, add_pooling_layer=True).eval(), (), kwargs


class Transposed(nn.Module):
    """Four Linear layers, each followed by a transpose: every cut sends a non-contiguous tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x).transpose(-1, -2)
        return x


def transposed(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    return Transposed().eval(), (torch.randn(batch_size, 8, 8),)


class WeightNormed(nn.Module):
    """A convolution under ``weight_norm`` (SEW's and wav2vec 2's positional convolution): torch refuses
    to pickle a parametrized module, though its exported graph splits and runs like any other."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(8, 8, 3, padding=1), dim=2)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).transpose(1, 2))


def weight_normed(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(0)
    return WeightNormed().eval(), (torch.randn(batch_size, 8, 16),)


FAMILIES = ("llama_gqa", "t5_encoder_decoder", "vit", "convnext", "mixtral_moe", "bert_masked")


def local_class(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A model whose class is defined inside the factory: it cannot be pickled by reference."""

    class Local(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x).relu())

    return Local().eval(), (torch.randn(batch_size, 4),)
