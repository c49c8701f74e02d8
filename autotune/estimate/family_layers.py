"""What one layer of autotune.estimate.hf_moe's families keeps for backward beyond its two
norms, tensor by tensor, from transformers 5.25.0's modeling files
(`transformers/models/<family>/modeling_<family>.py`, read 2026-12-07), and measured to the
byte with trials.measure.SavedTensorMeter on the worker's builds (tests/test_hf_shape.py) in
fp32, bf16 autocast over fp32 weights and bf16 weights.

    sizes = Sizes(s=4096, b=1, h=2880, a=64, kv=8, hd=64, r=2, c=2)
    norm_readers(layout, sparse=True)                    # (3, 1): q, k, v; the router
    block_bytes(layout, sizes, experts, "cuda")          # bytes, the norms left out

gpt_oss: sink_attention_bytes, gpt_oss_expert_bytes; deepseek_v2 / deepseek_v3: mla_bytes (torch
2.13's CPU SDPA kernels, as measured; CUDA's read: hf_moe.CUDA_NOTE), deepseek_mlp_bytes.
autotune.estimate.activations adds the norms (norm_bytes, with these readers), the model-level
tensors (RoPE's cos and sin `Layout.rope_width` wide) and checkpointing. These families run
at TP 1 only (hf_defaults.NO_TP): nothing here is split. gpt_neo, counted with the plain
layout (hf_count.PlainLayout), adds what its own eager attention keeps: plain_attention_bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from autotune.estimate.hf_fields import Experts
from autotune.estimate.hf_moe import Layout

if TYPE_CHECKING:
    from autotune.estimate.hf_count import PlainLayout


class Sizes(NamedTuple):
    """`b` sequences of `s` tokens through `h` hidden, `a` query heads and `kv` key/value heads of
    `hd`; `r` bytes an element of the weights and residual stream, `c` of the compute dtype."""

    s: int
    b: int
    h: int
    a: int
    kv: int
    hd: int
    r: int
    c: int


def norm_readers(layout: Layout, sparse: bool) -> tuple[int, int]:
    """Matmuls reading the attention's and the MLP's norm output (under autocast each keeps its
    own 16-bit copy): gpt_oss's q, k and v; its router (the experts gather rows of it).
    deepseek's q_proj (or q_a_proj) and kv_a_proj_with_mqa; a dense MLP's gate and up, a sparse
    one's router and its shared expert's gate and up (built, and reading, with no shared expert)."""
    if layout.family == "gpt_oss":
        return 3, 1
    return 2, 3 if sparse else 2


def sink_attention_bytes(z: Sizes) -> int:
    """GptOssAttention with its eager_attention_forward (it refuses SDPA): the rotated Q (the
    rotation's torch.cat output), K and V repeated to every query head (repeat_kv copies them;
    with as many key/value heads as query heads the rotated K and V themselves, as wide), and
    the output before o_proj, each a x hd a token in the compute dtype; per score row (a x s x
    b) the max's int64 index, and the softmax over the scores and the sink column (s + 1 wide)
    in the dtype of the cat of the scores with the sinks, a parameter: the weights' `r` (under
    autocast the bf16 scores are promoted to fp32); where that is not the compute dtype, the
    `.to(value dtype)` copy of the s scores the second matmul reads. The scaling, the mask, the
    max subtraction and the slice keep nothing; dropout is 0 (attention_dropout). The sliding
    window changes the mask only: the scores are kept s x s on every layer."""
    tokens, rows = z.s * z.b, z.a * z.s * z.b
    qkvo = 4 * tokens * z.a * z.hd * z.c
    return qkvo + rows * ((z.s + 1) * z.r + 8 + (z.s * z.c if z.c != z.r else 0))


def gpt_oss_expert_bytes(tokens: int, h: int, moe: Experts, c: int, e: int) -> int:
    """GptOssMLP: the router (F.linear with its bias) keeps its top-k indices (int64) and the
    softmax over the top-k logits (in the compute dtype `c`); the grouped_mm experts (the
    worker's default; transformers.integrations.moe, run in the weights' dtype `e`: grouped_mm
    is not autocast) keep four int64 row orders (the gather, the routing weights, the biases'
    expert ids, the un-permute), int32 offsets per expert, the gathered rows (h), gate_up
    (2 x width: its bias is added in place and both clamps keep it), the clamped gate, its
    sigmoid, up + 1, their product glu and the gated output (5 x width: swiglu with
    `swiglu_limit`), the down output (h) and the routing weight per row (`c`)."""
    rows = tokens * moe.top_k
    router = rows * (8 + c)
    return router + 4 * 8 * rows + 4 * moe.experts + rows * (e * (2 * h + 7 * moe.width) + c)


def mla_bytes(layout: Layout, z: Sizes, device: str) -> int:
    """DeepseekV2Attention / DeepseekV3Attention under torch SDPA on CPU (torch 2.13): each
    low-rank RMSNorm (q_a_layernorm, kv_a_layernorm) keeps its fp32 input (in fp32 the
    projection's output itself: kv_a_layernorm's input is a slice of kv_a_proj_with_mqa's,
    which it keeps whole, rope included), its fp32 1/rms per token, the normalised tensor and
    its output in the compute dtype; RoPE keeps only its cos and sin (the model's); the input
    to o_proj (a x v_head_dim a token). SDPA's kernel follows the head widths: where v_head_dim
    is qk_nope + qk_rope the CPU flash kernel keeps Q (the cat of nope and rope) and K (a x qk
    a token), V (a view: kv_b_proj's output whole, a x (qk_nope + v_head)), its output (then
    copied before o_proj) in the compute dtype and an fp32 log-sum-exp per head and token; else
    (the real models: 192 and 128) the math kernel, which on CPU runs 16-bit inputs in fp32,
    keeps fp32 copies of the scaled Q and K and of V (in fp32 at micro-batch 1, a view of
    kv_b_proj's output whole) and the fp32 softmax of the s x s scores.
    On CUDA (`device`) no kernel keeps the scores: flash where the widths are equal, else the
    memory-efficient kernel, which takes a value narrower than the query (PyTorch's CUDA
    sdp_utils.cpp: check_head_dim_size_flash needs q, k and v equally wide,
    check_head_dim_size_mem_efficient only q and k; read, not measured), each keeping Q, K, V,
    its output and a log-sum-exp per head and token as the CPU flash kernel does."""
    t, a, c = z.s * z.b, z.a, z.c
    qk, v = layout.nope + layout.rope, layout.v_dim
    q = t * (layout.q_rank * (4 + 2 * c) + 4) if layout.q_rank else 0
    kv = t * (layout.kv_rank * (4 + 2 * c) + 4 + (layout.rope * 4 if c == 4 else 0))
    if qk == v or device == "cuda":
        core = t * a * c * (2 * qk + layout.nope + 3 * v) + 4 * a * t
    else:  # in fp32 at micro-batch 1 the kernel's V is a view: kv_b_proj's output whole
        v_kept = layout.nope + v if c == 4 and z.b == 1 else v
        core = 4 * (t * a * (2 * qk + v_kept) + a * z.s * t) + t * a * v * c
    return q + kv + core


def deepseek_mlp_bytes(layout: Layout, z: Sizes, moe: Experts | None) -> int:
    """A dense DeepseekV*MLP keeps gate, its SiLU, up and their product (compute dtype). A
    DeepseekV*Moe: the router runs F.linear on fp32 copies of its input and weight (under bf16
    weights both are new tensors, kept; under autocast the matmul's 16-bit copy is the norm's
    reader); v3 keeps its sigmoid scores (in the logits' dtype: fp32, bf16 under autocast), the
    int64 top-k indices, and where norm_topk_prob the gathered weights and their sum; v2 its
    fp32 softmax and top-k indices (group_limited_greedy: and a bool mask per expert). What
    only chooses the groups (v3's top-2 per group, both group top-k's indices, v3's mask) feeds
    no gradient: its graph is freed in the forward, after SavedTensorMeter saw it (counted in
    tests/test_hf_shape.py apart). The float64 routed_scaling_factor (8 bytes) reaches no
    saved-tensor hook: not counted. The grouped_mm experts (in
    the weights' dtype) keep three int64 row orders, int32 offsets per expert, the gathered
    rows, gate_up, the SiLU, the product, the down output and the routing weight per row (the
    router's dtype); the shared expert a dense MLP's four tensors, n_shared x width wide."""
    t, c = z.s * z.b, z.c
    if moe is None:
        return 4 * t * layout.dense_width * c
    k, e = moe.top_k, moe.experts
    rd = (c if z.r != c else 4) if layout.family == "deepseek_v3" else 4
    router = t * (e * rd + 8 * k) + ((t + e) * z.h * 4 if z.r != 4 else 0)
    if layout.groups and layout.family == "deepseek_v2":
        router += t * e  # the mask of the groups left out (masked_fill: its output is the weights')
    if moe.normalise and layout.family == "deepseek_v3":
        router += t * (k + 1) * rd
    rows = t * k
    experts = 3 * 8 * rows + 4 * e + rows * (z.r * (2 * z.h + 4 * moe.width) + rd)
    return router + experts + 4 * t * moe.shared_width * c


def plain_attention_bytes(plain: PlainLayout | None, tokens: int, width: int, r: int, c: int) -> tuple[int, int]:
    """What gpt_neo's eager attention keeps beyond the eager count (activations.eager_scores_bytes),
    as (whole on every rank, split by heads): its causal mask, the bool `bias` buffer whole
    (`PlainLayout.causal_mask_bytes`), and under bf16 weights its fp32 q and k, 2 bytes an element
    more (`neo_attention`; autocast casts them back to bf16, fp32 keeps them as they are). Measured
    with SavedTensorMeter on the worker's tiny gpt_neo (tests/test_hf_shape.py)."""
    if plain is None:
        return 0, 0
    return plain.causal_mask_bytes, 2 * tokens * width * (4 - c) if plain.neo_attention and r == c else 0


def block_bytes(layout: Layout, z: Sizes, experts: Experts | None, device: str) -> int:
    """Bytes one layer keeps beyond its two norms on `device`; `experts` None for a dense layer."""
    if layout.family != "gpt_oss":
        return mla_bytes(layout, z, device) + deepseek_mlp_bytes(layout, z, experts)
    assert experts is not None  # every gpt_oss layer is sparse
    return sink_attention_bytes(z) + gpt_oss_expert_bytes(z.s * z.b, z.h, experts, z.c, z.r)
