"""What one layer of autotune.estimate.hf_moe's families keeps for backward beyond its two
norms, tensor by tensor, from transformers 5.25.0's modeling files
(`transformers/models/<family>/modeling_<family>.py`, read 2026-12-07), and measured to the
byte with trials.measure.SavedTensorMeter on the worker's builds (tests/test_hf_shape.py) in
fp32, bf16 autocast over fp32 weights and bf16 weights.

    sizes = Sizes(s=4096, b=1, h=2880, a=64, kv=8, hd=64, r=2, c=2)
    norm_readers(layout, sparse=True)                    # (3, 1): q, k, v; the router
    block_bytes(layout, sizes, experts)                  # bytes, the norms left out

autotune.estimate.activations adds the norms (norm_bytes, with these readers), the model-level
tensors (RoPE's cos and sin `Layout.rope_width` wide) and checkpointing. These families run
at TP 1 only (hf_defaults.NO_TP): nothing here is split.
"""

from __future__ import annotations

from typing import NamedTuple

from autotune.estimate.hf_fields import Experts
from autotune.estimate.hf_moe import Layout


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
    own 16-bit copy): gpt_oss's q, k and v; its router (the experts gather rows of it)."""
    return 3, 1


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


def block_bytes(layout: Layout, z: Sizes, experts: Experts | None) -> int:
    """Bytes one layer keeps beyond its two norms; `experts` None for a dense layer."""
    assert experts is not None  # every gpt_oss layer is sparse
    return sink_attention_bytes(z) + gpt_oss_expert_bytes(z.s * z.b, z.h, experts, z.c, z.r)
