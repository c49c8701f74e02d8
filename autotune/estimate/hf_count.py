"""Parameter count of a Hugging Face causal LM from its config.json fields, with no torch or
transformers import (the CLI stays free of both).

    cfg, where = read_hf_config("config.json", {"num_hidden_layers": 2})
    c = count_hf_config(cfg, where)
    c.params, c.unrouted_expert_params, c.how    # all weights; experts a token skips; "exact count"

Exact for the families in autotune.estimate.hf_defaults (their unset fields at the defaults
the worker's transformers fills), counted from what each family's modeling file defines:
transformers 5.25.0, `transformers/models/<family>/modeling_<family>.py`, read 2026-12-07.
tests/test_hf_shape.py pins each count to the model the worker builds; the families outside
the llama layout's blocks (autotune.estimate.hf_moe.FAMILIES) count theirs there. Any other family is
counted with the llama layout and says it is approximate. `autotune.estimate.compute` turns the
count into a ModelShape (`model_from_hf_config`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal, NamedTuple

from autotune.contract import HFWorkload
from autotune.errors import UserError, read_text_file
from autotune.estimate import hf_defaults as hf
from autotune.estimate import hf_moe
from autotune.estimate.dropout import Dropouts, dropouts_of
from autotune.estimate.hf_fields import Experts, hf_size, set_name

# Families by MLP style: gated (gate, up, down; RMSNorm) or plain (up, down; LayerNorm, biases).
GATED = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "mixtral", "phi3", "olmo", "olmo2",
         "granite", "internlm2", "deepseek_v2", "yi", "cohere", "stablelm", "qwen2_moe", "qwen3_moe",
         "gpt_oss", "deepseek_v3"}
PLAIN = {"gpt2", "gpt_neox", "opt", "gpt_neo"}
# The plain families whose activations are measured (PlainLayout).
MEASURED_PLAIN = ("gpt2", "gpt_neox", "opt", "gpt_neo")
MOE = {"mixtral", "qwen2_moe", "qwen3_moe"}
# Families that normalise the query and key (q_norm, k_norm) before the rotary embedding:
# "head" each head apart (qwen3: RMSNorms head_dim wide), "whole" the whole projection (olmo2:
# RMSNorms heads x head_dim and kv_heads x head_dim wide); "none" not at all.
QKNorm = Literal["none", "head", "whole"]
QK_NORM: dict[str, QKNorm] = {"qwen3": "head", "qwen3_moe": "head", "olmo2": "whole"}
# How a model normalises, as its activations count it (autotune.estimate.activations.norm_bytes):
# "layernorm" keeps its input and output (Korthikanti's count: the built-in GPT);
# "hf_layernorm" transformers' nn.LayerNorm (gpt2 / gpt_neo / gpt_neox / opt), its mean and 1/std per
# token besides (PlainLayout); "rmsnorm" is transformers' llama-family RMSNorm, which normalises an fp32 copy;
# "gemma_rmsnorm" gemma's, whose normalised tensor stays fp32; "olmo2_rmsnorm" olmo2's (and
# gpt_oss's), whose normalised tensor stays fp32 too (it multiplies by the weight before casting back);
# "olmo_layernorm" olmo's LayerNorm with no weight or bias, over an fp32 copy.
Norm = Literal["layernorm", "hf_layernorm", "rmsnorm", "gemma_rmsnorm", "olmo2_rmsnorm", "olmo_layernorm"]
# The norm of each family whose modeling file is measured (tests/test_hf_shape.py): llama's
# RMSNorm over an fp32 copy (LlamaRMSNorm and its copies), gemma's, olmo2's, olmo's and the
# plain families' nn.LayerNorm. The approximate families keep the LayerNorm count: what they
# save is not measured.
RMSNORM = {"llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen2_moe", "qwen3_moe", "granite",
           "deepseek_v2", "deepseek_v3"}
FAMILY_NORM: dict[str, Norm] = {**dict.fromkeys(RMSNORM, "rmsnorm"), "gemma": "gemma_rmsnorm",
                                "gemma2": "gemma_rmsnorm", "olmo": "olmo_layernorm",
                                **dict.fromkeys(("olmo2", "gpt_oss"), "olmo2_rmsnorm"),
                                **dict.fromkeys(MEASURED_PLAIN, "hf_layernorm")}
# Where a family's blocks normalise (before, after each of the attention and the MLP); the
# others before only. olmo2 normalises the sublayers' outputs: q, k, v and gate, up read the
# residual stream itself.
NORM_PLACES = {"gemma2": (True, True), "olmo2": (False, True)}
# Families whose attention projections have no bias whatever attention_bias says (their
# modeling files hard-code bias=False); qwen2 / qwen2_moe bias q, k and v (qkv_bias) only.
_UNBIASED_ATTENTION = {"mistral", "mixtral", "phi3"}
# The exact families whose MLP reads mlp_bias (the others hard-code bias=False); a family
# counted with the llama layout reads it as llama does.
_BIASED_MLP = {"llama", "granite"}
_SHAPE_FIELDS = (hf.HIDDEN, hf.LAYERS, hf.HEADS, ("vocab_size",))


class HFCount(NamedTuple):
    """A config's parameters and shape, as `ModelShape` takes them."""

    model_type: str
    params: int
    unrouted_expert_params: int  # experts a token is not routed to, summed over layers
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int  # one attention head's width (a config's head_dim, else hidden / heads)
    qk_norm: QKNorm  # an RMSNorm over each query and key head (qwen3, qwen3_moe) or all of them (olmo2)
    norm: Norm  # the blocks' norm as the activations count it (ModelShape.norm)
    norm_places: tuple[bool, bool]  # norms before, after the attention and the MLP (NORM_PLACES)
    clip_qkv: bool  # q, k and v clamped in place (olmo's clip_qkv)
    rope_fp32: bool  # RoPE's cos and sin stay fp32 whatever the stream's dtype (olmo, olmo2; deepseek_v2 complex64)
    norm_readers: tuple[int, int]  # matmuls reading the attention's and the MLP's norm output
    fused_qkv: bool  # q, k and v are views of one qkv_proj output (phi3)
    # transformers' eager attention (gemma2: it refuses SDPA, which cannot soft-cap), and
    # whether the attention scores and the final logits are soft-capped (tanh, as gemma2).
    eager: bool
    softcap: tuple[bool, bool]
    experts: Experts | None  # a mixture of experts' MLP (None: dense)
    layout: hf_moe.Layout | None  # what an hf_moe family's layers keep (None: the llama layout's)
    plain: PlainLayout | None  # what gpt2 / gpt_neo / gpt_neox / opt keep apart from llama's layout
    dropouts: Dropouts  # the dropouts the config turns on (autotune.estimate.dropout)
    vocab_size: int
    ffn_hidden: int  # the MLP width one token runs through (a mixture: its top-k experts + shared)
    gated_mlp: bool
    tied_embeddings: bool
    lookup_params: int
    largest_layer_params: int
    block_params: int  # the largest decoder layer's
    tp_split: tuple[int, int]  # parameters a TP plan splits: over all blocks, in the largest (_tp_split)
    max_seq_len: int | None
    how: str


class PlainLayout(NamedTuple):
    """What the plain LayerNorm families (gpt2, gpt_neo, gpt_neox, opt) keep for backward beyond the
    llama layout's count, read from transformers 5.25.0's modeling files and measured with
    trials.measure.SavedTensorMeter (tests/test_hf_shape.py). `mlp_kept`: tensors ffn wide the
    MLP's activation keeps (opt's relu its output, which fc2 reads: 1; gelu its input and
    output: 2; gpt2's gelu_new, 0.5 x (1 + tanh(...)) in Python: its input, the tanh, x / 2,
    1 + tanh and the output: 5). `rope_width`: gpt_neox's partial rotary cos and sin width
    (2 x ceil(head_dim x partial_rotary_factor / 2); 0 without RoPE). `positions`: the int64
    ids a learned position embedding keeps: "shared" one row for the batch (gpt2's wpe),
    "batch" one per sequence (opt's, offset by 2), "none". `parallel_residual`: the attention
    and the MLP normalise the same input (gpt_neox's use_parallel_residual), kept once.
    `neo_attention`: gpt_neo's own eager attention (GPTNeoSelfAttention._attn), which casts q
    and k to fp32 before the scores' matmul (kept so: under bf16 weights 2 bytes an element
    more; autocast casts them back to bf16) and casts the probabilities to v's dtype, dropping
    them there; `causal_mask_bytes`: its torch.where keeps each layer's bool `bias` buffer,
    whole (max_position_embeddings squared), whatever the sequence.
    Beside it (HFCount): opt's q_proj, k_proj and v_proj read its norm apart (norm_readers 3);
    gpt_neox counts as phi3's fused_qkv (q and k rotated into new tensors, v a view of the
    fused query_key_value output, the attention output copied before dense)."""

    mlp_kept: int
    rope_width: int
    positions: Literal["none", "shared", "batch"]
    parallel_residual: bool
    neo_attention: bool = False
    causal_mask_bytes: int = 0


# Tensors ffn wide a plain MLP's activation keeps (PlainLayout.mlp_kept); 2 for another.
_ACT_KEPT = {"relu": 1, "gelu": 2, "gelu_pytorch_tanh": 2, "gelu_new": 5}


def _plain(cfg: dict[str, Any], mt: str, h: int, a: int) -> PlainLayout:
    """PlainLayout of a gpt2 / gpt_neo / gpt_neox / opt config (their transformers 5.25.0 defaults
    where a field is left out). gpt_neox's rotary embedding reads a head_dim its attention does not."""
    act = cfg.get("hidden_act" if mt == "gpt_neox" else "activation_function",
                  {"gpt2": "gelu_new", "gpt_neo": "gelu_new", "gpt_neox": "gelu", "opt": "relu"}.get(mt))
    rope = 0
    if mt == "gpt_neox":
        rp = cfg.get("rope_parameters") or {}
        factor = cfg.get("rotary_pct", rp.get("partial_rotary_factor", 0.25))
        rope = 2 * math.ceil(int((cfg.get("head_dim") or h // a) * factor) / 2)
    neo, positions = mt == "gpt_neo", int(cfg.get("max_position_embeddings", 2048))
    return PlainLayout(mlp_kept=_ACT_KEPT.get(str(act), 2), rope_width=rope,
                       positions={"gpt2": "shared", "gpt_neo": "shared", "opt": "batch"}.get(mt, "none"),  # type: ignore[arg-type]
                       parallel_residual=mt == "gpt_neox" and bool(cfg.get("use_parallel_residual", True)),
                       neo_attention=neo, causal_mask_bytes=positions ** 2 if neo else 0)


def read_hf_config(path_or_dict: str | Path | dict[str, Any],
                   overrides: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The config's fields, `overrides` set over them, and where they came from; a path that
    holds no config, a UserError. Resolved as the worker's `load_config_dict` does
    (trials/workloads/hf.py), so that the estimate is of the model the trial trains: a folder
    stands for its config.json, and an override wins over the file's field."""
    where = "config"
    if isinstance(path_or_dict, dict):
        cfg = path_or_dict
    else:
        p = HFWorkload(config_path=str(path_or_dict)).config_file() or Path(path_or_dict)
        text = read_text_file(p, "model config", fix="give a preset name, or the path to a Hugging Face "
                                                     "config.json or to the folder holding one")
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{p}: not valid JSON ({exc})", fix="point --model at a config.json") from None
        if not isinstance(cfg, dict):
            raise UserError(f"{p}: expected a JSON object", fix="point --model at a config.json")
        where = str(p)
    if overrides:
        return {**cfg, **overrides}, f"{where} with config_overrides {sorted(overrides)}"
    return cfg, where


def _hf_dims(cfg: dict[str, Any], where: str, gated: bool) -> tuple[int, int, int, int, int, int]:
    """Hidden size, layers, attention heads, vocabulary, key/value heads and head width of a
    config, each checked (hf_size); the heads must divide what the layout splits among them:
    the hidden size (GPT-2 style: its modeling files refuse the rest) and, in the llama layout,
    the attention heads over the key/value heads (grouped-query attention)."""
    dims = {names[0]: hf_size(cfg, where, *names) for names in _SHAPE_FIELDS}
    missing = [n for n, v in dims.items() if v is None]
    if missing:
        raise UserError(f"{where}: field(s) {', '.join(missing)} missing",
                        fix="use a decoder-only transformer config.json (e.g. llama, gpt2, qwen2)")
    h, L, a, V = (v or 0 for v in dims.values())
    kv = hf_size(cfg, where, *hf.KV_HEADS) or a
    head_dim = hf_size(cfg, where, "head_dim")
    heads = set_name(cfg, *_SHAPE_FIELDS[2])
    if not gated and h % a:
        raise UserError(f"{where}: `{set_name(cfg, *_SHAPE_FIELDS[0])}` {h} is not divisible by `{heads}` {a}",
                        fix="give a head count that divides the hidden size")
    if gated and a % kv:
        raise UserError(f"{where}: `{heads}` {a} is not divisible by "
                        f"`{set_name(cfg, *hf.KV_HEADS)}` {kv}",
                        fix="give a key/value head count that divides the attention heads")
    return h, L, a, V, kv, head_dim or h // a


def _how_counted(model_type: str, filled: list[str], ffn_stated: bool) -> str:
    """How exact an HF config's parameter count is. A family in autotune.estimate.hf_defaults
    is counted exactly, its unset fields at the defaults the worker's transformers fills; any
    other is counted with the llama layout, and where it leaves the MLP width out, that is taken
    as 4 x hidden (its own default is only transformers')."""
    if model_type not in hf.TYPE_DEFAULTS:
        return "approximate: counted with the llama layout" + (
            "" if ffn_stated else ", MLP width not in the config, taken as 4 x hidden")
    # deepseek's CUDA attention is read, not measured (hf_moe.CUDA_NOTE).
    rest = hf_moe.CUDA_NOTE.get(model_type, "")
    if not filled:
        return "exact count" + rest
    named = ", ".join(filled[:3]) + (f" and {len(filled) - 3} more" if len(filled) > 3 else "")
    return f"exact count; {named} at transformers' {model_type} defaults" + rest


def _experts(cfg: dict[str, Any], where: str, mt: str, n_layers: int, ffn: int) -> Experts | None:
    """The mixture of experts a config of a MOE family runs, None for a dense family (or a
    qwen*_moe of 0 experts). Mixtral's every layer is sparse, its experts as wide as
    intermediate_size; qwen*_moe's every decoder_sparse_step-th layer not in mlp_only_layers,
    its experts moe_intermediate_size wide (the other layers a dense intermediate_size MLP)."""
    if mt not in MOE:
        return None if mt in hf.TYPE_DEFAULTS else _unknown_experts(cfg, where, n_layers, ffn)
    count = hf_size(cfg, where, *hf.names("num_experts", mt), least=0) or 0
    if not count:
        return None
    top_k = hf_moe.top_k_of(cfg, where, count, "num_experts_per_tok")
    if mt == "mixtral":
        return Experts(count, top_k, ffn, 0, (True,) * n_layers, ffn, True, True)
    step = hf_size(cfg, where, "decoder_sparse_step") or 1
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise UserError(f"{where}: field `mlp_only_layers` is {json.dumps(dense, default=str)}, not a "
                        "list of layer numbers", fix="give the dense layers' numbers, e.g. [0, 1], or []")
    width = hf_size(cfg, where, "moe_intermediate_size") or ffn
    shared = (hf_size(cfg, where, "shared_expert_intermediate_size") or 0) if mt == "qwen2_moe" else 0
    return Experts(count, top_k, width, shared,
                   tuple(i not in dense and (i + 1) % step == 0 for i in range(n_layers)), ffn,
                   bool(cfg.get("norm_topk_prob")), False)


# What a config of a family outside the table may call its experts (olmoe, granitemoe, llama4,
# glm4_moe, ernie4_5_moe, ...; transformers 5.25.0's config classes): their count, the experts a
# token runs.
_UNKNOWN_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_UNKNOWN_TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk", "moe_k")


def _unknown_experts(cfg: dict[str, Any], where: str, n_layers: int, ffn: int) -> Experts | None:
    """A family outside the table that sets more than one expert: counted as llama-layout
    experts, moe_intermediate_size (else the MLP width) wide, a shared expert where
    n_shared_experts (moe_num_shared_experts) or shared_expert_intermediate_size says, the first
    first_k_dense_replace (moe_layer_start_index) layers dense: approximate, as its attention
    is (before, one dense MLP a layer: OLMoE-1B-7B's 64 experts counted as one)."""
    count = hf_size(cfg, where, *_UNKNOWN_EXPERTS, least=0) or 0
    if count < 2:
        return None
    top_k = hf_moe.top_k_of(cfg, where, count, *_UNKNOWN_TOP_K)
    width = hf_size(cfg, where, "moe_intermediate_size") or ffn
    shared = ((hf_size(cfg, where, "n_shared_experts", "moe_num_shared_experts", least=0) or 0) * width
              or hf_size(cfg, where, "shared_expert_intermediate_size", least=0) or 0)
    dense = hf_size(cfg, where, "first_k_dense_replace", "moe_layer_start_index", least=0) or 0
    return Experts(count, top_k, width, shared, tuple(i >= dense for i in range(n_layers)), ffn, True, False)


def _attention(cfg: dict[str, Any], mt: str, h: int, a: int, kv: int, head_dim: int) -> tuple[int, int]:
    """One gated-family attention block's parameters (q, k, v, o and their biases, q/k norms),
    and those a tensor-parallel plan splits: q, k, v with their biases (column-wise) and o
    (row-wise); o's bias and the q/k norms stay whole on every rank."""
    q_out, kv_out = a * head_dim, kv * head_dim
    split = h * q_out + 2 * h * kv_out + q_out * h  # phi3's fused qkv_proj is the same three
    whole = 0
    if mt == "qwen2" or (mt == "qwen2_moe" and cfg.get("qkv_bias")):  # q/k/v biases, o none
        split += q_out + 2 * kv_out
    elif mt not in _UNBIASED_ATTENTION and cfg.get("attention_bias"):
        split, whole = split + q_out + 2 * kv_out, h
    qk_norm = QK_NORM.get(mt, "none")
    if qk_norm == "head":
        whole += 2 * head_dim  # q_norm, k_norm (RMSNorm over head_dim)
    elif qk_norm == "whole":
        whole += q_out + kv_out  # q_norm, k_norm (RMSNorm over all heads)
    return split + whole, split


def _gated_mlps(cfg: dict[str, Any], mt: str, n_layers: int, h: int, ffn: int,
                moe: Experts | None) -> tuple[list[int], int, list[int]]:
    """Each layer's MLP parameters (gate, up, down; a mixture: router, experts, shared expert and
    its gate), the experts a token skips, summed over layers, and each layer's parameters a
    tensor-parallel plan splits: a dense MLP's gate and up with their biases (column-wise) and
    down (row-wise; its bias whole). transformers' plans (5.25) name no expert, router or
    shared expert, so a sparse layer's MLP stays whole on every rank. Phi3's fused
    gate_up_proj is the same two matrices."""
    biased = cfg.get("mlp_bias") and (mt in _BIASED_MLP or mt not in hf.TYPE_DEFAULTS)
    dense_split = 3 * h * ffn + (2 * ffn if biased else 0)
    dense = dense_split + (h if biased else 0)
    if moe is None:
        return [dense] * n_layers, 0, [dense_split] * n_layers
    expert = 3 * h * moe.width
    # + qwen2_moe's 1-wide sigmoid gate on the shared expert
    shared = 3 * h * moe.shared_width + (h if mt == "qwen2_moe" else 0) if moe.shared_width else 0
    sparse = moe.experts * h + moe.experts * expert + shared  # router: one logit per expert
    mlps = [sparse if s else dense for s in moe.sparse]
    splits = [0 if s else dense_split for s in moe.sparse]
    return mlps, sum(moe.sparse) * (moe.experts - moe.top_k) * expert, splits


def _tp_split(n_layers: int, attn_split: int, mlps: list[int], mlp_splits: list[int],
              embedding: int) -> tuple[int, int]:
    """(parameters a tensor-parallel plan splits: the blocks' and a split `embedding`'s, those
    of the largest block)."""
    largest = max(range(n_layers), key=mlps.__getitem__) if n_layers else 0
    return (n_layers * attn_split + sum(mlp_splits) + embedding,
            attn_split + (mlp_splits[largest] if n_layers else 0))


def _gated_blocks(cfg: dict[str, Any], where: str, mt: str, d: hf_moe.Dims) -> hf_moe.Blocks:
    """The attention and MLPs of a gated config: the llama layout's (with its family's experts,
    biases and q/k norms), or those of a family of autotune.estimate.hf_moe."""
    if mt in hf_moe.FAMILIES:
        return hf_moe.count_blocks(cfg, where, mt, d)
    moe = _experts(cfg, where, mt, d.layers, d.ffn)
    attn, attn_split = _attention(cfg, mt, d.hidden, d.heads, d.kv_heads, d.head_dim)
    mlps, unrouted, mlp_splits = _gated_mlps(cfg, mt, d.layers, d.hidden, d.ffn, moe)
    return hf_moe.Blocks(attn, attn_split, mlps, mlp_splits, unrouted, moe, d.head_dim)


def count_hf_config(cfg: dict[str, Any], where: str) -> HFCount:
    """The parameters and shape of the model a config (read_hf_config) builds; `where` names
    it in errors. The fields it leaves out are at its family's defaults (hf_defaults)."""
    cfg, filled = hf.with_type_defaults(cfg)
    mt = str(cfg.get("model_type", "")).lower()
    gated = mt in GATED or (mt not in PLAIN and cfg.get("hidden_act") in ("silu", "swiglu"))
    h, L, a, V, kv, head_dim = _hf_dims(cfg, where, gated)
    ffn_set = hf_size(cfg, where, *hf.FFN)
    how = _how_counted(mt, filled, ffn_set is not None)
    ffn = ffn_set if ffn_set is not None else 4 * h
    tied = bool(cfg.get("tie_word_embeddings", mt in ("gpt2", "opt", "gpt_neo")))
    moe = layout = None
    if gated:  # llama layout: RMSNorm (weight only), no biases but those the family has
        attn, attn_split, mlps, mlp_splits, unrouted, moe, head_dim, layout = _gated_blocks(
            cfg, where, mt, hf_moe.Dims(L, h, a, kv, head_dim, ffn))
        # RMSNorm weights: two a layer at each place it normalises; olmo's LayerNorm has none.
        weights = 0 if mt == "olmo" else h
        norms = 2 * weights * sum(NORM_PLACES.get(mt, (True, False)))
        final_norm = weights
    else:  # gpt2 / gpt_neo / gpt_neox / opt layout: LayerNorm with bias, biases (gpt_neo: none on q, k, v)
        attn_split = h * 3 * h + (0 if mt == "gpt_neo" else 3 * h) + h * h  # qkv (gpt_neo: no bias), proj
        attn, mlp_splits = attn_split + h, [h * ffn + ffn + ffn * h] * L
        mlps, unrouted = [split + h for split in mlp_splits], 0
        norms = 2 * 2 * h
        final_norm = 0 if mt == "opt" and cfg.get("do_layer_norm_before") is False else 2 * h
    emb = V * h
    pos = 0
    if mt in ("gpt2", "gpt_neo"):
        pos = (hf_size(cfg, where, "n_positions", "max_position_embeddings") or 1024) * h
    elif mt == "opt":  # OPT offsets positions by 2
        pos = ((hf_size(cfg, where, "max_position_embeddings") or 2048) + 2) * h
    head = 0 if tied else V * h
    # A token runs through its top-k experts and the shared one: the width its activations take.
    token_ffn = moe.top_k * moe.width + moe.shared_width if moe else ffn
    # ZeRO-3 gathers one module whole: the embedding, one MLP matrix, or a layer's experts (one
    # module of all of them).
    largest = max(emb, h * ffn + ffn, 3 * h * moe.width * moe.experts if moe else 0)
    if moe:
        how += (f"; mixture of experts: {moe.experts} experts, {moe.top_k} per token: parameters count "
                f"all {moe.experts}, FLOPs the {moe.top_k} a token runs")
    return HFCount(
        model_type=mt, params=L * (attn + norms) + sum(mlps) + final_norm + emb + pos + head,
        unrouted_expert_params=unrouted, n_layers=L, d_model=h, n_heads=a, n_kv_heads=kv,
        # The plain layout splits the hidden size among its heads (a head_dim there is unread).
        head_dim=head_dim if gated else h // a, qk_norm=QK_NORM.get(mt, "none") if gated else "none",
        norm=FAMILY_NORM.get(mt, "layernorm"), norm_places=NORM_PLACES.get(mt, (True, False)),
        clip_qkv=mt == "olmo" and cfg.get("clip_qkv") is not None, rope_fp32=mt in ("olmo", "olmo2", "deepseek_v2"),
        # q, k, v and gate, up read the norms apart; phi3 fuses each. A mixture's sparse layers
        # have their own MLP readers (activations.expert_bytes); these are its dense layers'.
        norm_readers=(1, 1) if mt == "phi3" else (3, 2) if gated else (3, 1) if mt in ("opt", "gpt_neo") else (1, 1),
        fused_qkv=mt in ("phi3", "gpt_neox"), experts=moe, layout=layout, eager=mt in hf.EAGER,
        plain=_plain(cfg, mt, h, a) if mt in MEASURED_PLAIN else None, dropouts=dropouts_of(cfg, mt),
        # gemma2 soft-caps unless a field is null (Gemma2Config's 50.0 and 30.0; not in
        # hf_defaults, whose table would fill a null field too).
        softcap=(mt == "gemma2" and cfg.get("attn_logit_softcapping", 50.0) is not None,
                 mt == "gemma2" and cfg.get("final_logit_softcapping", 30.0) is not None),
        vocab_size=V, ffn_hidden=token_ffn, gated_mlp=gated, tied_embeddings=tied,
        lookup_params=pos + (0 if tied else emb), largest_layer_params=largest,
        block_params=attn + max(mlps) + norms, tp_split=_tp_split(
            L, attn_split, mlps, mlp_splits, emb if mt in hf.TP_EMBEDDING else 0),
        # As a trial refuses (trials/workloads/hf.py, check_positions); None for a family
        # outside autotune.estimate.hf_defaults without the field (only transformers knows it).
        max_seq_len=hf_size(cfg, where, *hf.POSITIONS), how=how)
