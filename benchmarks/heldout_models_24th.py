"""The twenty-fourth to twenty-seventh held-out sets (``heldout_models_28th.py`` holds those after,
``heldout_models_21st.py`` the twenty-first to twenty-third, ``heldout_models_more.py`` the fourteenth to the
twentieth, ``heldout_models.py`` the first thirteen).

The twenty-fourth (``TWENTY_FOURTH``) was written on 2026-11-29 at 07:38 UTC, on the Zen 4 EPYC (cpu family 25,
model 17), before anything was done about mixtures of experts, which the Zen 5 priced low on the twenty-third set
(OLMoE, Jamba: their grouped matmuls run one matmul per expert). Five of its models are mixtures, so that what is
done for OLMoE and Jamba is judged on mixtures nobody tuned on: Qwen2-MoE (a shared expert beside 8 routed ones),
GraniteMoE (top-2 of 8, scaled logits), PhiMoE (sparse-mixer routing), DeepSeek-V2 (latent attention through low-rank
key-value projections, group-limited routing, a dense first layer) and GPT-OSS (attention sinks, alternating
sliding-window attention, experts with biases and a clamped SwiGLU). The other three are new kinds of work:
ModernBERT (alternating local and global attention, GeGLU), Bamba (Mamba-2's chunked scan in PyTorch beside
attention) and xLSTM (matrix-memory LSTM cells in PyTorch).

The twenty-fifth (``TWENTY_FIFTH``) was written on 2026-11-29 at 09:12 UTC, on the Zen 4, after the Mixtral tuning
family was added and that CPU's model retrained and shipped, and before either model was scored on it: six more
mixtures, to judge that change again on architectures nobody tuned on or looked at — Qwen3-MoE (top 4 of 16),
HunYuan-MoE, ERNIE 4.5 MoE (a shared expert, a dense first layer), GLM-4 MoE (a shared expert, sigmoid routing with
a bias), FlexOlmo and Llama 4's text model (top-1 experts by a batched matmul over all experts, a shared expert,
chunked attention). DBRX was tried first and dropped before anything was scored (its config did not run).

The twenty-sixth (``TWENTY_SIXTH``) was written on 2026-11-29 at 10:28 UTC, on a Xeon of cpu family 6, model 207,
before that CPU had a model of its own and before a layer holding a custom operator was named by it wherever it
runs (GPT-OSS's experts, one layer of 39 kernels from the routing's sort to the grouped matmuls, were named a
sort): mixtures whose experts ``transformers`` runs another way than the twenty-fourth and twenty-fifth sets' —
Aria's text decoder (weights stored transposed), OpenAI's privacy filter (transposed, with biases: GPT-OSS's kind,
the only other one in ``transformers``), Nemotron-H (gateless ReLU² experts beside a Mamba-2 block) and MuseSpark's
text model (experts between projections of the residual stream, normed after). Chosen from the experts' declared
layout, without scoring any of them.

The twenty-seventh (``TWENTY_SEVENTH``) was written on 2026-11-29 at 13:46 UTC, on the Xeon of cpu family 6, model
167 (the one ``learned-xeon`` was profiled on), before that CPU's model was brought up to the other CPUs' kinds and
tuning families, and before anything was scored on it: architectures of kinds no set has held, none a mixture —
RoFormer (rotary positions in a BERT encoder), MPT (ALiBi biases), Zamba2 (Mamba-2 blocks and one attention block
shared between depths through low-rank adapters), StableLM (rotary on a quarter of each head, layer norms),
Parakeet's FastConformer encoder (depthwise-separable subsampling convolutions, relative-position attention) and
AIMv2's vision encoder (SwiGLU, RMS norms). Each was checked to build, run and capture; none was timed or predicted
before it went in. T5's encoder was in first and swapped for Zamba2 before anything was scored: T5 is a family of
the executor's tests (``tests/tiny_models.py``), and the sets hold architectures outside the tests.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _ids(batch_size: int, seq_len: int = 64) -> tuple[torch.Tensor]:
    return (torch.randint(0, 1000, (batch_size, seq_len)),)


def qwen2_moe(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer Qwen2-MoE over 64 tokens: 8 routed experts (top 2) beside a gated shared expert, grouped-query
    attention."""
    from transformers import Qwen2MoeConfig, Qwen2MoeModel

    config = Qwen2MoeConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                            shared_expert_intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, use_cache=False)
    return Qwen2MoeModel(config), _ids(batch_size)


def granitemoe(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer GraniteMoE over 64 tokens: top-2 of 8 experts, scaled embeddings, residuals and logits."""
    from transformers import GraniteMoeConfig, GraniteMoeModel

    config = GraniteMoeConfig(vocab_size=1000, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=4, num_local_experts=8,
                              num_experts_per_tok=2, use_cache=False)
    return GraniteMoeModel(config), _ids(batch_size)


def phimoe(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer PhiMoE over 64 tokens: top-2 of 4 experts chosen by the sparse mixer (a masked softmax per
    choice), grouped-query attention."""
    from transformers import PhimoeConfig, PhimoeModel

    config = PhimoeConfig(vocab_size=1000, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                          use_cache=False)
    return PhimoeModel(config), _ids(batch_size)


def deepseek_v2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer DeepSeek-V2 over 64 tokens: multi-head latent attention (queries and keys-values through low-rank
    projections, a rotary part apart), a dense first layer, then 8 routed experts (top 2 of groups chosen first)
    and a shared one."""
    from transformers import DeepseekV2Config, DeepseekV2Model

    config = DeepseekV2Config(vocab_size=1000, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                              num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
                              num_key_value_heads=4, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                              n_group=2, topk_group=1, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16,
                              qk_nope_head_dim=16, v_head_dim=32, use_cache=False)
    return DeepseekV2Model(config), _ids(batch_size)


def gpt_oss(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer GPT-OSS over 64 tokens: sliding-window (16) and full attention alternating, learned attention
    sinks, top-2 of 8 experts with biases and a clamped SwiGLU."""
    from transformers import GptOssConfig, GptOssModel

    config = GptOssConfig(vocab_size=1000, hidden_size=128, intermediate_size=128, num_hidden_layers=2, head_dim=32,
                          num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
                          sliding_window=16, layer_types=["sliding_attention", "full_attention"], use_cache=False)
    return GptOssModel(config), _ids(batch_size)


def modernbert(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer ModernBERT over 128 tokens: local (32-token window) and global attention alternating, GeGLU
    feed-forwards, no biases."""
    from transformers import ModernBertConfig, ModernBertModel

    config = ModernBertConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                              num_attention_heads=4, global_attn_every_n_layers=2, local_attention=32,
                              max_position_embeddings=512, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                              cls_token_id=2, sep_token_id=1)
    return ModernBertModel(config), _ids(batch_size, 128)


def bamba(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Bamba over 64 tokens: Mamba-2 mixers (the chunked scan in PyTorch, chunks of 16) with attention
    in layers 1 and 3."""
    from transformers import BambaConfig, BambaModel

    config = BambaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, attn_layer_indices=[1, 3], mamba_n_heads=8,
                         mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_chunk_size=16, use_cache=False)
    return BambaModel(config), _ids(batch_size)


def xlstm(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-block xLSTM over 64 tokens: matrix-memory LSTM cells (the native PyTorch kernels), gated
    feed-forwards."""
    from transformers import xLSTMConfig, xLSTMModel

    config = xLSTMConfig(vocab_size=1000, hidden_size=128, embedding_dim=128, num_blocks=2, num_heads=4,
                         mode="inference", chunkwise_kernel="chunkwise--native_autograd",
                         sequence_kernel="native_sequence__native", step_kernel="native", use_cache=False)
    return xLSTMModel(config), _ids(batch_size)


TWENTY_FOURTH = ("qwen2_moe", "granitemoe", "phimoe", "deepseek_v2", "gpt_oss", "modernbert", "bamba", "xlstm")


def qwen3_moe(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer Qwen3-MoE over 64 tokens: top 4 of 16 experts, query and key norms."""
    from transformers import Qwen3MoeConfig, Qwen3MoeModel

    config = Qwen3MoeConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                            num_experts=16, num_experts_per_tok=4, use_cache=False)
    return Qwen3MoeModel(config), _ids(batch_size)


def hunyuan_moe(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer HunYuan-MoE over 64 tokens: top 2 of 8 experts beside a shared MLP, query and key norms."""
    from transformers import HunYuanMoEV1Config, HunYuanMoEV1Model

    config = HunYuanMoEV1Config(vocab_size=1000, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, moe_topk=2,
                                use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return HunYuanMoEV1Model(config), _ids(batch_size)


def ernie_moe(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer ERNIE 4.5 MoE over 64 tokens: a dense first layer, then top 2 of 8 experts and a shared one."""
    from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeModel

    config = Ernie4_5_MoeConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                moe_num_experts=8, moe_k=2, moe_layer_start_index=1, moe_num_shared_experts=1,
                                use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return Ernie4_5_MoeModel(config), _ids(batch_size)


def glm4_moe(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer GLM-4 MoE over 64 tokens: a dense first layer, then top 2 of 8 experts (sigmoid scores with a
    bias) and a shared one."""
    from transformers import Glm4MoeConfig, Glm4MoeModel

    config = Glm4MoeConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                           num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                           n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                           n_group=1, topk_group=1, use_cache=False, pad_token_id=0)
    return Glm4MoeModel(config), _ids(batch_size)


def flex_olmo(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer FlexOlmo over 64 tokens: top 2 of 4 experts, norms after attention and experts."""
    from transformers import FlexOlmoConfig, FlexOlmoModel

    config = FlexOlmoConfig(vocab_size=1000, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=4, num_experts=4, num_experts_per_tok=2,
                            use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return FlexOlmoModel(config), _ids(batch_size)


def llama4_text(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Llama 4's 2-layer text model over 64 tokens: the top-1 of 8 experts by one batched matmul over all experts,
    a shared expert, chunked attention with rotary and no-rotary layers."""
    from transformers import Llama4TextConfig, Llama4TextModel

    config = Llama4TextConfig(vocab_size=1000, hidden_size=128, intermediate_size=128, intermediate_size_mlp=256,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                              num_local_experts=8, num_experts_per_tok=1, interleave_moe_layer_step=1,
                              use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return Llama4TextModel(config), _ids(batch_size)


TWENTY_FIFTH = ("qwen3_moe", "hunyuan_moe", "ernie_moe", "glm4_moe", "flex_olmo", "llama4_text")


def aria_text(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Aria's 2-layer text decoder over 64 tokens: top 2 of 8 experts whose weights are stored transposed (no
    transpose before the grouped matmul), one shared expert."""
    from transformers import AriaTextConfig, AriaTextModel

    config = AriaTextConfig(vocab_size=1000, hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, moe_num_experts=8, moe_topk=2,
                            moe_num_shared_experts=1, pad_token_id=0, use_cache=False)
    return AriaTextModel(config), _ids(batch_size)


def privacy_filter(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """OpenAI's privacy-filter encoder, 2 layers over 64 tokens: bidirectional sliding-window attention with
    sinks, top 2 of 8 experts with biases, stored transposed, as grouped matmuls."""
    from transformers import OpenAIPrivacyFilterConfig, OpenAIPrivacyFilterModel

    config = OpenAIPrivacyFilterConfig(vocab_size=1000, hidden_size=128, intermediate_size=128, head_dim=32,
                                       num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                                       num_local_experts=8, num_experts_per_tok=2, sliding_window=16,
                                       pad_token_id=0, eos_token_id=1, use_cache=False)
    # Its default experts are a Python loop over the experts hit, which torch.export cannot trace.
    config._experts_implementation = "grouped_mm"
    return OpenAIPrivacyFilterModel(config), _ids(batch_size)


def nemotron_h(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-block Nemotron-H over 64 tokens: a Mamba-2 block (PyTorch scan), a mixture of 8 gateless ReLU²
    experts (top 2, one shared), attention, a dense ReLU² feed-forward."""
    from transformers import NemotronHConfig, NemotronHModel

    config = NemotronHConfig(vocab_size=1000, hidden_size=128, layers_block_type=["mamba", "moe", "attention", "mlp"],
                             num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                             intermediate_size=256, mamba_num_heads=8, mamba_head_dim=32, n_groups=1,
                             ssm_state_size=16, chunk_size=32, use_mamba_kernels=False, n_routed_experts=8,
                             moe_intermediate_size=64, moe_shared_expert_intermediate_size=64, use_cache=False)
    return NemotronHModel(config), _ids(batch_size)


def muse_spark_text(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """MuseSpark's text model, 2 layers over 64 tokens: experts between a down-projection and an up-projection
    of the residual stream, normed after the experts; sliding-window and full attention alternating."""
    from transformers import MuseSparkTextConfig, MuseSparkTextModel

    config = MuseSparkTextConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=16,
                                 moe_intermediate_size=64, moe_hidden_size=96, num_local_experts=8,
                                 num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"],
                                 pad_token_id=0, use_cache=False)
    return MuseSparkTextModel(config), _ids(batch_size)


TWENTY_SIXTH = ("aria_text", "privacy_filter", "nemotron_h", "muse_spark_text")


def roformer(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer RoFormer encoder over 128 tokens: BERT's layout with rotary positions applied to queries and keys
    by interleaved sine and cosine tables (no learned positions)."""
    from transformers import RoFormerConfig, RoFormerModel

    config = RoFormerConfig(vocab_size=1000, hidden_size=128, embedding_size=128, num_hidden_layers=3,
                            num_attention_heads=4, intermediate_size=512, max_position_embeddings=256)
    return RoFormerModel(config), _ids(batch_size, 128)


def mpt(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer MPT decoder over 64 tokens: ALiBi biases instead of positions, layer norms and linears without
    biases, a GELU feed-forward of 4× the width."""
    from transformers import MptConfig, MptModel

    config = MptConfig(vocab_size=1000, d_model=128, n_heads=4, n_layers=3, expansion_ratio=4, max_seq_len=128,
                       use_cache=False)
    return MptModel(config), _ids(batch_size)


def zamba2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Zamba2 over 64 tokens: Mamba-2 blocks (PyTorch scan), and twice one shared attention block over the
    hidden state concatenated with the embeddings (twice the width), each use with its own low-rank adapters."""
    from transformers import Zamba2Config, Zamba2Model

    config = Zamba2Config(vocab_size=1000, hidden_size=128, num_hidden_layers=4,
                          layers_block_type=["linear_attention", "hybrid", "linear_attention", "hybrid"],
                          mamba_d_state=16, n_mamba_heads=8, chunk_size=32, use_mamba_kernels=False,
                          num_attention_heads=4, intermediate_size=256, num_mem_blocks=1,
                          use_shared_attention_adapter=True, adapter_rank=16, use_cache=False)
    return Zamba2Model(config), _ids(batch_size)


def stablelm(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer StableLM over 64 tokens: rotary positions on a quarter of each head, layer norms (not RMS),
    grouped-query attention, a SwiGLU feed-forward."""
    from transformers import StableLmConfig, StableLmModel

    config = StableLmConfig(vocab_size=1000, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, partial_rotary_factor=0.25,
                            use_cache=False)
    return StableLmModel(config), _ids(batch_size)


def parakeet_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Parakeet's FastConformer encoder, 2 layers over 200 mel frames: 8× subsampling by strided depthwise-separable
    2-D convolutions, then conformer blocks (half-step feed-forwards, relative-position attention, a depthwise
    1-D convolution module with batch norm)."""
    from transformers import ParakeetEncoder, ParakeetEncoderConfig

    config = ParakeetEncoderConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=512, num_mel_bins=80, subsampling_conv_channels=64)
    return ParakeetEncoder(config), (torch.randn(batch_size, 200, 80),)


def aimv2_vision(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """AIMv2's 4-layer vision encoder on 112×112 images: a patch convolution, RMS norms, a SwiGLU feed-forward,
    attention without biases."""
    from transformers import Aimv2VisionConfig, Aimv2VisionModel

    config = Aimv2VisionConfig(hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                               num_attention_heads=4, image_size=112, patch_size=14)
    return Aimv2VisionModel(config), (torch.randn(batch_size, 3, 112, 112),)


TWENTY_SEVENTH = ("roformer", "mpt", "zamba2", "stablelm", "parakeet_encoder", "aimv2_vision")
