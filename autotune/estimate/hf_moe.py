"""Parameter count of the blocks of the mixture-of-experts families whose layout is not llama's:
gpt_oss (biased attention with sinks; experts with biases; a biased router).

    blocks = count_blocks(cfg, "config.json", "gpt_oss", Dims(24, 2880, 64, 8, 64, 2880))
    blocks.attn, blocks.mlps[0], blocks.unrouted      # one layer's attention, MLP; experts skipped

Counted from what each family's modeling file defines: transformers 5.25.0,
`transformers/models/<family>/modeling_<family>.py`, read 2026-12-07. autotune.estimate.hf_count
adds the norms, embeddings and head (the llama layout's: two RMSNorms a layer and a final one);
tests/test_hf_shape.py pins each count to the model the worker builds.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from autotune.errors import UserError
from autotune.estimate.hf_fields import Experts, hf_size

FAMILIES = frozenset({"gpt_oss"})


class Dims(NamedTuple):
    """The sizes hf_count has read: layers, hidden, attention and key/value heads, head width
    and MLP width (an expert's, in gpt_oss)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int


class Blocks(NamedTuple):
    """One layer's attention parameters and those a TP plan splits, each layer's MLP parameters
    and its TP-split ones, the experts a token skips (summed over layers), the mixture, and the
    head width the FLOPs attention term takes (`ModelShape.head_dim`)."""

    attn: int
    attn_split: int
    mlps: list[int]
    mlp_splits: list[int]
    unrouted: int
    experts: Experts | None
    head_dim: int


def _top_k(cfg: dict[str, Any], where: str, count: int, *names: str) -> int:
    """The experts a token runs (1 where the config leaves it out), at most `count`."""
    top_k = hf_size(cfg, where, *names) or 1
    if top_k > count:
        raise UserError(f"{where}: `{names[0]}` {top_k} is more than the {count} experts",
                        fix="route each token to at most as many experts as the model has")
    return top_k


def _gpt_oss(cfg: dict[str, Any], where: str, d: Dims) -> Blocks:
    """GptOssAttention: q, k, v, o, each biased where attention_bias (True by default), and one
    sink logit per head; GptOssMLP: a router (GptOssTopKRouter: a weight and a bias per expert)
    and GptOssExperts, num_local_experts of gate_up (hidden x 2 intermediate, its bias) and
    down (intermediate x hidden, its bias). transformers 5.25.0's plan splits only the
    embedding (`embed_tokens: embedding_rowwise`): no block parameter is split."""
    h, q, kv = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    attn = 2 * h * q + 2 * h * kv + d.heads
    if cfg.get("attention_bias", True):
        attn += q + 2 * kv + h
    count = hf_size(cfg, where, "num_local_experts", "num_experts") or 1
    top_k = _top_k(cfg, where, count, "num_experts_per_tok")
    expert = 3 * h * d.ffn + 2 * d.ffn + h
    mlp = count * h + count + count * expert
    moe = Experts(count, top_k, d.ffn, 0, (True,) * d.layers, d.ffn, True, False)
    return Blocks(attn, 0, [mlp] * d.layers, [0] * d.layers, d.layers * (count - top_k) * expert, moe,
                  d.head_dim)


def count_blocks(cfg: dict[str, Any], where: str, model_type: str, dims: Dims) -> Blocks:
    """The blocks of a config of one of FAMILIES (its unset fields at the family's defaults)."""
    return _gpt_oss(cfg, where, dims)
