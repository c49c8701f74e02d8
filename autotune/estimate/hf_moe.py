"""Parameter count of the blocks of the mixture-of-experts families whose layout is not llama's:
gpt_oss (biased attention with sinks; experts with biases; a biased router) and deepseek_v2 /
deepseek_v3 (multi-head latent attention; routed and shared experts after dense first layers).

    blocks = count_blocks(cfg, "config.json", "gpt_oss", Dims(24, 2880, 64, 8, 64, 2880))
    blocks.attn, blocks.mlps[0], blocks.unrouted      # one layer's attention, MLP; experts skipped

Counted from what each family's modeling file defines: transformers 5.25.0,
`transformers/models/<family>/modeling_<family>.py`, read 2026-12-07. autotune.estimate.hf_count
adds the norms, embeddings and head (the llama layout's: two RMSNorms a layer and a final one);
tests/test_hf_shape.py pins each count to the model the worker builds.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from autotune.contract.flops import mla_head_width
from autotune.errors import UserError
from autotune.estimate.hf_fields import Experts, hf_size

FAMILIES = frozenset({"gpt_oss", "deepseek_v2", "deepseek_v3"})
# deepseek's activations are measured on CPU (family_layers.mla_bytes). On CUDA, where v_head_dim
# is not qk_nope + qk_rope (the real models: 128 and 192), SDPA runs its memory-efficient
# kernel, which keeps no s x s scores: PyTorch's CUDA sdp_utils.cpp (check_head_dim_size_flash
# needs q, k and v equally wide, check_head_dim_size_mem_efficient only q and k), read in public
# copies of the source, read 2026-12-07 (the installed CPU wheel has none); no GPU here to check it.
_CUDA_DEEPSEEK = ("; on CUDA its attention is counted as SDPA's memory-efficient kernel keeps it "
                  "(read from PyTorch's sdp_utils.cpp, not measured)")
CUDA_NOTE = dict.fromkeys(("deepseek_v2", "deepseek_v3"), _CUDA_DEEPSEEK)
# The expert count's names in the deepseek configs (their attribute_map, 5.25.0).
DEEPSEEK_EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts")


class Dims(NamedTuple):
    """The sizes hf_count has read: layers, hidden, attention and key/value heads, head width
    and MLP width (an expert's, in gpt_oss)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int


class Layout(NamedTuple):
    """What a family's layers keep for backward depends on beyond the llama layout's sizes
    (autotune.estimate.family_layers): its `family`, the width of its RoPE's cos and sin
    (gpt_oss: half a head, its rotary embedding does not repeat the frequencies; deepseek_v3:
    qk_rope_head_dim; deepseek_v2: half of it, `_mla_layout`), and deepseek's latent attention:
    q_lora_rank (None: a plain q_proj), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
    v_head_dim; its dense MLPs' width and its router's groups: n_group and topk_group (0: v2's
    greedy top-k, no group chosen first)."""

    family: str
    rope_width: int
    q_rank: int | None = None
    kv_rank: int = 0
    nope: int = 0
    rope: int = 0
    v_dim: int = 0
    dense_width: int = 0
    groups: int = 0
    group_top: int = 0


class Blocks(NamedTuple):
    """One layer's attention parameters and those a TP plan splits, each layer's MLP parameters
    and its TP-split ones, the experts a token skips (summed over layers), the mixture, the
    head width the FLOPs attention term takes (`ModelShape.head_dim`) and the family's Layout
    (None: the llama layout's)."""

    attn: int
    attn_split: int
    mlps: list[int]
    mlp_splits: list[int]
    unrouted: int
    experts: Experts | None
    head_dim: int
    layout: Layout | None = None


def top_k_of(cfg: dict[str, Any], where: str, count: int, *names: str) -> int:
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
    top_k = top_k_of(cfg, where, count, "num_experts_per_tok")
    expert = 3 * h * d.ffn + 2 * d.ffn + h
    mlp = count * h + count + count * expert
    moe = Experts(count, top_k, d.ffn, 0, (True,) * d.layers, d.ffn, True, False)
    return Blocks(attn, 0, [mlp] * d.layers, [0] * d.layers, d.layers * (count - top_k) * expert, moe,
                  d.head_dim, Layout("gpt_oss", d.head_dim // 2))


def _mla(cfg: dict[str, Any], where: str, d: Dims) -> tuple[int, int, int]:
    """DeepseekV2Attention / DeepseekV3Attention (5.25.0): q_proj (hidden to heads x qk_head)
    where q_lora_rank is null, else q_a_proj (biased where attention_bias), q_a_layernorm and
    q_b_proj; kv_a_proj_with_mqa (to kv_lora_rank + qk_rope, biased where attention_bias),
    kv_a_layernorm, kv_b_proj (to heads x (qk_nope + v_head)) and o_proj (biased where
    attention_bias). Returns (parameters, those the TP plan splits, the FLOPs head width)."""
    nope, rope, v = (hf_size(cfg, where, n) or 0 for n in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    kv_rank = hf_size(cfg, where, "kv_lora_rank") or 0
    q_rank = hf_size(cfg, where, "q_lora_rank")
    h, a, bias = d.hidden, d.heads, bool(cfg.get("attention_bias"))
    q_out = a * (nope + rope)
    q_split = (q_rank or h) * q_out  # q_proj, else q_b_proj: column-wise
    q = q_split if q_rank is None else h * q_rank + bias * q_rank + q_rank + q_split
    kv_b = kv_rank * a * (nope + v)  # column-wise
    kv_a = h * (kv_rank + rope) + bias * (kv_rank + rope) + kv_rank
    o = a * v * h  # row-wise; its bias whole
    return q + kv_a + kv_b + o + bias * h, q_split + kv_b + o, mla_head_width(nope, rope, v)


def _mla_layout(cfg: dict[str, Any], where: str, mt: str, ffn: int) -> Layout:
    """The sizes family_layers reads of a deepseek config. Its router's groups: v3 always picks
    topk_group of n_group groups first (its config's defaults 8 and 4); v2 only where
    topk_method is "group_limited_greedy" (its default "greedy" picks none)."""
    nope, rope, v, kv_rank = (hf_size(cfg, where, n) or 0 for n in (
        "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))
    groups, group_top = hf_size(cfg, where, "n_group"), hf_size(cfg, where, "topk_group")
    if mt == "deepseek_v3":
        groups, group_top = groups or 8, group_top or 4
    elif cfg.get("topk_method") == "group_limited_greedy":
        groups, group_top = groups or 1, group_top or 1
    else:
        groups = group_top = 0
    # v2's RoPE is one complex64 freqs_cis, s x qk_rope / 2: as much as an fp32 cos and sin half
    # as wide (hf_count's rope_fp32).
    width = rope // 2 if mt == "deepseek_v2" else rope
    return Layout(mt, width, hf_size(cfg, where, "q_lora_rank"), kv_rank, nope, rope, v, ffn, groups, group_top)


def _deepseek(cfg: dict[str, Any], where: str, mt: str, d: Dims) -> Blocks:
    """deepseek_v2 / deepseek_v3 (5.25.0): MLA attention (_mla); the first first_k_dense_replace
    layers a dense MLP intermediate_size wide, the others a DeepseekV*Moe: a router (a weight per
    expert; v3's e_score_correction_bias is a buffer, no parameter), n_routed_experts experts
    and shared experts, one MLP n_shared_experts x moe_intermediate_size wide, each expert
    moe_intermediate_size wide. v2's MLPs (dense and shared) are biased where mlp_bias; v3's
    never. moe_layer_freq is read by neither modeling file. The plan (5.25.0) splits the dense
    and shared MLPs, but its `mla_kv_a_proj` style is not the worker's: NO_TP."""
    h, L = d.hidden, d.layers
    attn, attn_split, head_dim = _mla(cfg, where, d)
    layout = _mla_layout(cfg, where, mt, d.ffn)
    count = hf_size(cfg, where, *DEEPSEEK_EXPERTS, least=0) or 0
    width = hf_size(cfg, where, "moe_intermediate_size") or d.ffn
    shared_width = (hf_size(cfg, where, "n_shared_experts", least=0) or 0) * width
    first_dense = hf_size(cfg, where, "first_k_dense_replace", least=0) or 0
    bias = mt == "deepseek_v2" and bool(cfg.get("mlp_bias"))

    def mlp(f: int) -> tuple[int, int]:  # a gated MLP f wide, and what the plan splits of it
        return 3 * h * f + bias * (2 * f + h), 3 * h * f + bias * 2 * f

    dense, dense_split = mlp(d.ffn)
    if not count:  # the modeling file builds a DeepseekV*Moe all the same; a dense model here
        return Blocks(attn, attn_split, [dense] * L, [dense_split] * L, 0, None, head_dim, layout)
    top_k = top_k_of(cfg, where, count, "num_experts_per_tok")
    sparse = tuple(i >= first_dense for i in range(L))
    shared, shared_split = mlp(shared_width)
    moe_mlp = count * h + count * 3 * h * width + shared
    # norm_topk_prob unset: v3's config defaults it to True (its router renormalises), v2's router
    # never reads it (configuration_deepseek_v3.py, modeling_deepseek_v2.py, 5.25.0).
    normalise = bool(cfg.get("norm_topk_prob", mt == "deepseek_v3"))
    moe = Experts(count, top_k, width, shared_width, sparse, d.ffn, normalise, True)
    return Blocks(attn, attn_split, [moe_mlp if s else dense for s in sparse],
                  [shared_split if s else dense_split for s in sparse],
                  sum(sparse) * (count - top_k) * 3 * h * width, moe, head_dim, layout)


def count_blocks(cfg: dict[str, Any], where: str, model_type: str, dims: Dims) -> Blocks:
    """The blocks of a config of one of FAMILIES (its unset fields at the family's defaults)."""
    if model_type == "gpt_oss":
        return _gpt_oss(cfg, where, dims)
    return _deepseek(cfg, where, model_type, dims)
