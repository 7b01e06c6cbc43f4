"""The next rung of issue 19: a 10,000-operator graph on 64 devices in 8 hosts.

No zoo model is captured below leaf granularity, so the graph is written out operator by operator
with :class:`pipeplan.planner.builder.GraphBuilder`, in the shape ``torch.export`` gives a Hugging Face
mixture-of-experts decoder (Mixtral's layout at Mixtral-8x22B's sizes: hidden 6144, 48 query and 8
key/value heads, 8 experts of 16384, 2 routed per token; bf16):

- per block, 142 operators: two RMSNorms as exported (upcast, pow, mean, add, rsqrt, mul, downcast,
  weight); q, k and v projections in parallel, each viewed and transposed, rotary embedding on q
  and k (cos/sin products, half rotation), grouped-query repeat of k and v, the two attention
  matmuls with scale, mask and an fp32 softmax, the output projection and residual; a router
  (linear, softmax, top-2, renormalise) and 8 expert branches side by side (token gather, gate,
  up, SiLU, product, down, routing weight, scatter-add), then the residual;
- a prologue (embedding, position ids, rotary cos/sin, causal mask) whose position, cos/sin and
  mask tensors every block reads: the broadcast edges that make plans pay for copies;
- an epilogue (final norm, LM head).

Compute is FLOPs and bytes for the roofline; each expert sees its share of tokens (2 of 8).  The
default 71 blocks give 10,103 operators (179B parameters, 333 GiB of bf16 weights).

The cluster: 8 hosts of 8 A100-80GB SXM4 on NVSwitch (300 GB/s per direction, 3 us), hosts joined
by 200 Gbit/s InfiniBand, one NIC per pair of GPUs (25 GB/s, 20 us per transfer).
"""

from __future__ import annotations

from typing import Any

from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.planner.builder import GraphBuilder

__all__ = ["HOSTS", "PER_HOST", "moe_decoder", "pod_cluster"]

HOSTS, PER_HOST = 8, 8
BF16, FP32 = 2, 4


class _Ops:
    """Declares operators on a builder; sizes in elements, bytes from the dtype."""

    def __init__(self, builder: GraphBuilder) -> None:
        self.b = builder

    def op(self, name: str, inputs: dict[str, int], out: int, flops: int = 0, params: int = 0,
           dtype: int = BF16, kind: str = "elementwise") -> str:
        """An operator writing ``out`` elements of ``dtype``; ``inputs``: producer → elements read."""
        self.b.layer(name, flops=flops, param_bytes=params * BF16, activation_bytes=out * dtype,
                     inputs={src: n * dtype for src, n in inputs.items()}, kind=kind)
        return name

    def linear(self, name: str, src: str, tokens: int, d_in: int, d_out: int) -> str:
        return self.op(name, {src: tokens * d_in}, tokens * d_out, 2 * tokens * d_in * d_out, d_in * d_out,
                       kind="linear")

    def rms_norm(self, prefix: str, src: str, tokens: int, hidden: int) -> str:
        """RMSNorm as exported: upcast, pow, mean, add eps, rsqrt, scale, downcast, weight."""
        x = tokens * hidden
        up = self.op(f"{prefix}.to_fp32", {src: x}, x, x, dtype=FP32)
        sq = self.op(f"{prefix}.pow", {up: x}, x, x, dtype=FP32)
        mean = self.op(f"{prefix}.mean", {sq: x}, tokens, x, dtype=FP32, kind="reduction")
        eps = self.op(f"{prefix}.add", {mean: tokens}, tokens, tokens, dtype=FP32)
        rs = self.op(f"{prefix}.rsqrt", {eps: tokens}, tokens, tokens, dtype=FP32)
        scaled = self.op(f"{prefix}.mul", {up: x, rs: tokens}, x, x, dtype=FP32)
        down = self.op(f"{prefix}.to_bf16", {scaled: x}, x, x)
        return self.op(f"{prefix}.weight", {down: x}, x, x, params=hidden)


def _rotary(ops: _Ops, prefix: str, src: str, cos: str, sin: str, n: int, half: int) -> str:
    """q·cos + rotate_half(q)·sin: two slices, a negation, a concatenation, two products, a sum."""
    c = ops.op(f"{prefix}.mul_cos", {src: n, cos: half * 2}, n, n)
    lo = ops.op(f"{prefix}.slice_lo", {src: n}, n // 2)
    hi = ops.op(f"{prefix}.slice_hi", {src: n}, n // 2)
    neg = ops.op(f"{prefix}.neg", {hi: n // 2}, n // 2, n // 2)
    cat = ops.op(f"{prefix}.cat", {neg: n // 2, lo: n // 2}, n)
    s = ops.op(f"{prefix}.mul_sin", {cat: n, sin: half * 2}, n, n)
    return ops.op(f"{prefix}.add", {c: n, s: n}, n, n)


def _block(ops: _Ops, i: int, x: str, rope: tuple[str, str], mask: str, cfg: dict[str, int]) -> str:
    """One decoder block (142 operators); returns the residual stream's last operator."""
    t, h, heads, kv, dim = cfg["tokens"], cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    seq, batch, inter, experts, topk = cfg["seq"], cfg["batch"], cfg["intermediate"], cfg["experts"], cfg["topk"]
    p = f"blocks.{i}"
    cos, sin = rope
    normed = ops.rms_norm(f"{p}.input_norm", x, t, h)
    q, k, v = (ops.linear(f"{p}.attn.{n}_proj", normed, t, h, d)
               for n, d in (("q", h), ("k", kv * dim), ("v", kv * dim)))
    views = {}
    for name, src, width in (("q", q, h), ("k", k, kv * dim), ("v", v, kv * dim)):
        view = ops.op(f"{p}.attn.{name}_view", {src: t * width}, t * width)
        views[name] = ops.op(f"{p}.attn.{name}_transpose", {view: t * width}, t * width)
    q_rot = _rotary(ops, f"{p}.attn.q_rope", views["q"], cos, sin, t * h, seq * dim // 2)
    k_rot = _rotary(ops, f"{p}.attn.k_rope", views["k"], cos, sin, t * kv * dim, seq * dim // 2)
    repeated = {}
    for name, src in (("k", k_rot), ("v", views["v"])):  # grouped-query attention: repeat_kv
        sliced = ops.op(f"{p}.attn.{name}_unsqueeze", {src: t * kv * dim}, t * kv * dim)
        expand = ops.op(f"{p}.attn.{name}_expand", {sliced: t * kv * dim}, t * h)
        repeated[name] = ops.op(f"{p}.attn.{name}_repeat", {expand: t * h}, t * h, t * h)
    scores_n = batch * heads * seq * seq
    kt = ops.op(f"{p}.attn.kt", {repeated["k"]: t * h}, t * h)
    scores = ops.op(f"{p}.attn.qk", {q_rot: t * h, kt: t * h}, scores_n, 2 * batch * heads * seq * seq * dim,
                    kind="matmul")
    scaled = ops.op(f"{p}.attn.scale", {scores: scores_n}, scores_n, scores_n)
    window = ops.op(f"{p}.attn.mask_slice", {mask: batch * seq * seq}, batch * seq * seq)
    masked = ops.op(f"{p}.attn.mask_add", {scaled: scores_n, window: batch * seq * seq}, scores_n, scores_n)
    up = ops.op(f"{p}.attn.to_fp32", {masked: scores_n}, scores_n, scores_n, dtype=FP32)
    soft = ops.op(f"{p}.attn.softmax", {up: scores_n}, scores_n, 5 * scores_n, dtype=FP32)
    down = ops.op(f"{p}.attn.to_bf16", {soft: scores_n}, scores_n, scores_n)
    drop = ops.op(f"{p}.attn.dropout", {down: scores_n}, scores_n)
    ctx = ops.op(f"{p}.attn.av", {drop: scores_n, repeated["v"]: t * h}, t * h, 2 * batch * heads * seq * seq * dim,
                 kind="matmul")
    ctx_t = ops.op(f"{p}.attn.transpose", {ctx: t * h}, t * h)
    ctx_c = ops.op(f"{p}.attn.contiguous", {ctx_t: t * h}, t * h, t * h)
    ctx_r = ops.op(f"{p}.attn.reshape", {ctx_c: t * h}, t * h)
    o = ops.linear(f"{p}.attn.o_proj", ctx_r, t, h, h)
    x = ops.op(f"{p}.attn.residual", {x: t * h, o: t * h}, t * h, t * h)

    # mixture of experts: router, then 8 expert branches side by side
    normed = ops.rms_norm(f"{p}.post_norm", x, t, h)
    flat = ops.op(f"{p}.moe.view", {normed: t * h}, t * h)
    logits = ops.linear(f"{p}.moe.router", flat, t, h, experts)
    probs = ops.op(f"{p}.moe.softmax", {logits: t * experts}, t * experts, 5 * t * experts, dtype=FP32)
    top = ops.op(f"{p}.moe.topk", {probs: t * experts}, t * topk, t * experts, dtype=FP32)
    total = ops.op(f"{p}.moe.sum", {top: t * topk}, t, t * topk, dtype=FP32)
    weights = ops.op(f"{p}.moe.renormalise", {top: t * topk, total: t}, t * topk, t * topk)
    onehot = ops.op(f"{p}.moe.one_hot", {top: t * topk}, t * topk * experts)
    routed = t * topk // experts  # tokens per expert, balanced
    outs = []
    for e in range(experts):
        q_e = f"{p}.moe.experts.{e}"
        where = ops.op(f"{q_e}.where", {onehot: t * topk * experts}, routed, t * topk)
        rows = ops.op(f"{q_e}.gather", {flat: t * h, where: routed}, routed * h)
        gate = ops.linear(f"{q_e}.w1", rows, routed, h, inter)
        upp = ops.linear(f"{q_e}.w3", rows, routed, h, inter)
        act = ops.op(f"{q_e}.silu", {gate: routed * inter}, routed * inter, 4 * routed * inter)
        prod = ops.op(f"{q_e}.mul", {act: routed * inter, upp: routed * inter}, routed * inter, routed * inter)
        dn = ops.linear(f"{q_e}.w2", prod, routed, inter, h)
        wt = ops.op(f"{q_e}.weight", {dn: routed * h, weights: t * topk}, routed * h, routed * h)
        outs.append(ops.op(f"{q_e}.index_add", {wt: routed * h, where: routed}, t * h, routed * h))
    merged = ops.op(f"{p}.moe.combine", dict.fromkeys(outs, t * h), t * h, experts * t * h)
    shaped = ops.op(f"{p}.moe.reshape", {merged: t * h}, t * h)
    return ops.op(f"{p}.moe.residual", {x: t * h, shaped: t * h}, t * h, t * h)


def moe_decoder(blocks: int = 71, batch: int = 4, seq: int = 1024) -> ModelGraph:
    """The operator graph (see the module docstring): 142 operators per block plus 21 around them."""
    cfg = {"blocks": blocks, "batch": batch, "seq": seq, "tokens": batch * seq, "hidden": 6144, "heads": 48,
           "kv_heads": 8, "head_dim": 128, "intermediate": 16384, "experts": 8, "topk": 2, "vocab": 32768}
    t, h, dim = cfg["tokens"], cfg["hidden"], cfg["head_dim"]
    ops = _Ops(GraphBuilder(f"moe-decoder-{blocks}x142ops", batch_size=batch))
    ids = ops.op("input_ids", {}, t, dtype=8)
    x = ops.op("embed_tokens", {ids: t}, t * h, t * h, params=cfg["vocab"] * h, kind="embedding")
    positions = ops.op("position_ids", {}, seq, dtype=8)
    freqs = ops.op("rotary.inv_freq", {}, dim // 2, dtype=FP32)
    outer = ops.op("rotary.outer", {positions: seq, freqs: dim // 2}, seq * dim // 2, seq * dim // 2, dtype=FP32)
    emb = ops.op("rotary.cat", {outer: seq * dim // 2}, seq * dim, dtype=FP32)
    cos = ops.op("rotary.to_bf16_cos", {ops.op("rotary.cos", {emb: seq * dim}, seq * dim, seq * dim, dtype=FP32):
                                        seq * dim}, seq * dim, seq * dim)
    sin = ops.op("rotary.to_bf16_sin", {ops.op("rotary.sin", {emb: seq * dim}, seq * dim, seq * dim, dtype=FP32):
                                        seq * dim}, seq * dim, seq * dim)
    causal = ops.op("mask.triu", {}, seq * seq)
    mask = ops.op("mask.expand", {causal: seq * seq}, batch * seq * seq)
    for i in range(cfg["blocks"]):
        x = _block(ops, i, x, (cos, sin), mask, cfg)
    x = ops.rms_norm("norm", x, t, h)
    ops.linear("lm_head", x, t, h, cfg["vocab"])
    return ops.b.build()


def pod_cluster(hosts: int = HOSTS, per_host: int = PER_HOST) -> Cluster:
    """``hosts`` × ``per_host`` A100-80GB SXM4, NVSwitch inside a host, InfiniBand between (see above)."""
    devices: list[dict[str, Any]] = []
    islands = []
    for h in range(hosts):
        ids = [f"node{h}.gpu{g}" for g in range(per_host)]
        devices += [{"id": d, "type": "A100-80GB-SXM4", "host": f"node{h}", "memory": "80GiB",
                     "peak_flops": "312TFLOPS", "mem_bandwidth": "2039GB/s"} for d in ids]
        islands.append({"devices": ids, "bandwidth": "300GB/s", "latency": "3us"})
    return Cluster.from_dict({"name": f"{hosts * per_host}gpu-{hosts}hosts",
                              "description": f"{hosts}x{per_host} A100-80GB SXM4, NVSwitch, 200 Gbit/s InfiniBand",
                              "devices": devices,
                              "topology": {"islands": islands,
                                           "inter_host": {"bandwidth": "25GB/s", "latency": "20us"}}})
