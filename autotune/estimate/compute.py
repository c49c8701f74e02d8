"""Model shapes, parameter counts, FLOPs per token and MFU: the compute side of the estimate.

    m = model_from_preset("7b")                      # or model_from_hf_config("config.json")
    m.params, flops_per_token(m, seq_len=4096)       # 6N + 12*L*d*s (autotune.contract.flops)
    mfu(tokens_per_s=3000.0, flops_per_token_=..., num_devices=8, device_peak_flops=989e12)

Stable public API (imported by `autotune.estimate.scaling` and `autotune plan`):
`ModelShape`, `model_from_preset`, `model_from_hf_config`, `model_from_params`,
`gpt_param_count`, `flops_per_token`, `hardware_flops_per_token`, `mfu`.
Torch-free: the CLI imports this.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from autotune.contract import GPT_PRESETS, GPTShape
from autotune.contract.flops import attention_width, model_flops_per_token, utilization
from autotune.contract.flops import hardware_flops_per_token as _hardware_flops
from autotune.errors import UserError
from autotune.estimate import hf_count, hf_defaults, hf_moe
from autotune.estimate.dropout import Dropouts

Recompute = Literal["none", "selective", "full"]


class Dims(NamedTuple):
    """A model's known shape: layers, hidden size, attention heads, vocabulary."""

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int


# Why TP > 1 is left out for a model the worker does not split (ModelShape.tp_split).
NO_TP_REASON = "the worker does not run this model's tensor-parallel plan, or the plan splits no block"


class ModelShape(BaseModel):
    """What the estimates need to know about a decoder-only transformer.

    `params` is the exact total parameter count where the source allows it (built-in GPT,
    Hugging Face config of a known family) and the user's figure for `--params N`; a mixture
    of experts holds all its experts in `params` and runs `active_params` per token.
    Shape fields are None when unknown (`--params N` alone): activation figures then
    cannot be computed and say so.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    params: int = Field(gt=0)
    n_layers: int | None = None
    d_model: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = Field(
        default=None, gt=0, description="width of one attention head where a config sets it apart "
                                        "from d_model / n_heads (Qwen3, gemma); None: d_model / n_heads")
    qk_norm: hf_count.QKNorm = Field(default="none", description="RMSNorm over each query and key head "
                                     "(qwen3: 'head') or over all of them (olmo2: 'whole')")
    norm: hf_count.Norm = Field(default="layernorm", description="the blocks' norm, as the activations count "
                       "it (autotune.estimate.activations.norm_bytes): transformers' RMSNorm keeps more")
    norm_readers: tuple[int, int] = Field(
        default=(1, 1), description="matmuls reading the attention's and the MLP's norm output "
                                    "(llama: q, k, v and gate, up): under autocast each keeps its own "
                                    "16-bit copy")
    pre_norms: bool = Field(default=True, description="a norm before the attention and the MLP; olmo2 has "
                            "none: q, k, v and gate, up read the residual stream itself")
    post_norms: bool = Field(default=False, description="a norm after the attention and the MLP (gemma2, olmo2)")
    clip_qkv: bool = Field(default=False, description="q, k and v clamped in place (olmo's clip_qkv): each "
                           "clamp_ keeps a copy of its input")
    rope_fp32: bool = Field(default=False, description="RoPE's cos and sin stay fp32 whatever the stream's "
                            "dtype (olmo, olmo2: their rotary embedding does not cast them)")
    fused_qkv: bool = Field(default=False, description="q, k and v are views of one fused projection's "
                            "output (phi3): what they keep holds it whole")
    tp_split: bool = Field(default=True, description="the worker splits it by tensor parallelism; false "
                           "for a Hugging Face family whose TP plan it does not run "
                           "(autotune.estimate.hf_defaults.NO_TP): TP degree 1 only")
    attention: Literal["fused", "eager"] = Field(
        default="fused", description="the attention the worker's transformers runs: torch SDPA, or "
                                     "its eager_attention_forward (gemma2, which refuses SDPA): the "
                                     "estimate's `attention` where the config does not set one")
    attn_softcap: bool = Field(default=False, description="attention scores soft-capped (gemma2's "
                               "attn_logit_softcapping: a tanh whose output is kept)")
    logit_softcap: bool = Field(default=False, description="final logits soft-capped (gemma2's "
                                "final_logit_softcapping: a tanh whose output is kept)")
    experts: hf_count.Experts | None = Field(
        default=None, description="a mixture of experts' MLP (its sparse layers, experts, top-k, shared "
                                  "expert), as its activations count it; None: a dense MLP")
    layout: hf_moe.Layout | None = Field(default=None, description="what the layers of a family outside the "
                                         "llama layout keep (autotune.estimate.family_layers)")
    plain: hf_count.PlainLayout | None = Field(
        default=None, description="what a Hugging Face gpt2 / gpt_neo / gpt_neox / opt keeps beyond the LayerNorm "
                                  "count (its activation, positions, rotary width, parallel residual); "
                                  "set only from their configs: None for the built-in GPT")
    dropouts: Dropouts = Field(default=Dropouts(), description="the dropouts a Hugging Face config turns "
                               "on (autotune.estimate.dropout: their masks, SDPA's path); none for the "
                               "built-in GPT (MemoryConfig.dropout is Korthikanti's count)")
    vocab_size: int | None = None
    ffn_hidden: int | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = True
    lookup_params: int = Field(
        default=0, ge=0,
        description="parameters used only as lookup tables (learned positions; the input "
                    "embedding when untied): they cost no matmul FLOPs",
    )
    largest_layer_params: int | None = Field(
        default=None, description="largest single module's parameters (ZeRO-3 gathers it whole)")
    source: str = ""
    block_params: int | None = Field(
        default=None, description="parameters of one repeated block (FSDP2 gathers a block at a time)")
    tp_split_params: int | None = Field(
        default=None, ge=0,
        description="parameters the tensor-parallel plan splits, over all blocks (attention and dense "
                    "MLP matrices; a mixture's experts and router stay whole on every rank); None: "
                    "every repeated block whole (block_params x n_layers)")
    block_tp_split_params: int | None = Field(
        default=None, ge=0, description="those of them in the largest block; None: all of it")
    tp_gathered: tuple[bool, bool] = Field(
        default=(False, False), description="(attention, MLP): the TP plan gathers the split "
                                            "projections' output whole on every rank, so what follows "
                                            "runs whole (hf_defaults.TP_GATHERED)")
    max_seq_len: int | None = Field(
        default=None, description="the longest sequence the model takes (learned positions, or a "
                                  "config's max_position_embeddings); None where not known")
    unrouted_expert_params: int = Field(
        default=0, ge=0,
        description="a mixture of experts' expert parameters a token is not routed to (beyond its "
                    "top-k), summed over layers: held in memory (in `params`), no FLOPs for that token")

    @property
    def has_shape(self) -> bool:
        return self.dims() is not None

    def dims(self) -> Dims | None:
        """The shape every activation figure needs, or None when a part of it is unknown."""
        if self.n_layers is None or self.d_model is None or self.n_heads is None or self.vocab_size is None:
            return None
        return Dims(self.n_layers, self.d_model, self.n_heads, self.vocab_size)

    @property
    def head_width(self) -> int | None:
        """One attention head's width: `head_dim`, else d_model / n_heads; None unknown."""
        if self.head_dim:
            return self.head_dim
        return self.d_model // self.n_heads if self.d_model and self.n_heads else None

    @property
    def attention_width(self) -> int | None:
        """Heads x head width: the queries' and the attention output's width, and that of the
        FLOPs attention term (autotune.contract.flops.attention_width)."""
        return attention_width(self.d_model, self.n_heads, self.head_width)

    @property
    def tp_why(self) -> str | None:
        """Why TP > 1 is left out for it: where the worker does not split it (`tp_split`)."""
        return None if self.tp_split else NO_TP_REASON

    @property
    def tp_heads(self) -> int | None:
        """What every TP degree must divide: the attention and key/value heads alike (each
        rank holds whole ones of both: a model with one key/value head runs no TP), 1 for a
        model the worker does not split (`tp_split`); None where the heads are not known."""
        if not self.tp_split:
            return 1
        if not self.n_heads:
            return None
        return math.gcd(self.n_heads, self.n_kv_heads or self.n_heads)

    def tp_local_params(self, tp_degree: int) -> float:
        """Parameters one tensor-parallel rank holds: what the plan splits (`tp_split_params`)
        `tp_degree` ways, the rest (embeddings, LM head, norms, row-parallel biases, a mixture's
        experts) whole on every rank, as trials/engines/tp.py splits the built-in GPT and
        Hugging Face models. Where the split is not counted, the repeated blocks split whole;
        without the block size, the whole model split (a lower bound)."""
        if tp_degree <= 1:
            return float(self.params)
        split = self.tp_split_total
        return self.params / tp_degree if split is None else self.params - split * (1 - 1 / tp_degree)

    @property
    def tp_split_total(self) -> int | None:
        """The parameters a TP plan splits: `tp_split_params` where counted, else the repeated
        blocks whole (the built-in GPT, a model known by its shapes); None without the blocks."""
        if self.tp_split_params is not None:
            return self.tp_split_params
        if not self.block_params or not self.n_layers:
            return None
        return min(self.params, self.n_layers * self.block_params)

    def tp_block_params(self, tp_degree: int) -> float:
        """One tensor-parallel rank's share of the largest repeated block (`block_params`,
        which must be known): its split part (`block_tp_split_params`) `tp_degree` ways."""
        block = float(self.block_params or 0)
        split = block if self.block_tp_split_params is None else self.block_tp_split_params
        return block - split * (1 - 1 / max(1, tp_degree))

    @property
    def active_params(self) -> int:
        """Parameters a token uses: all of them but the experts it is not routed to."""
        return self.params - self.unrouted_expert_params

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in a matmul for every token: the N of 6N (a mixture of
        experts: its top-k experts, not all of them)."""
        return self.active_params - self.lookup_params


# fp8 training (torchao float8 with torch.compile) against bf16 with torch.compile, end to end:
# "up to 1.25x at 8 GPU / 8B parameter scale" (up to 1.5x at 512 GPUs / 405B). Source: torchao
# docs, Quantized Training, float8 (docs.pytorch.org/ao/stable/workflows/training.html),
# as of 2026-03-25, read 2026-12-01. An upper figure: smaller models' GEMMs gain less, and eager
# fp8 loses to bf16 (its casts are not fused), so fp8 is planned only together with compile.
FP8_SPEEDUP_OVER_BF16 = 1.25
FP8_SPEEDUP_SOURCE = ("torchao docs, Quantized Training: float8 with torch.compile up to 1.25x bf16 "
                      "at 8 GPUs / 8B params (docs.pytorch.org/ao/stable/workflows/training.html, "
                      "2026-03-25)")


def gpt_param_count(shape: GPTShape, include_embeddings: bool = True) -> int:
    """Exact parameter count of the built-in GPT (`trials.workloads.gpt.GPT`)."""
    return shape.num_params(include_embeddings=include_embeddings)


def model_from_gpt_shape(shape: GPTShape, name: str = "gpt") -> ModelShape:
    d, f = shape.d_model, shape.ffn_mult * shape.d_model
    return ModelShape(
        name=name, params=gpt_param_count(shape), n_layers=shape.n_layers, d_model=d,
        n_heads=shape.n_heads, n_kv_heads=shape.n_heads, vocab_size=shape.vocab_size,
        ffn_hidden=f, gated_mlp=False, tied_embeddings=True,
        lookup_params=shape.max_seq_len * d,  # learned positions; the tied embedding is the head
        largest_layer_params=max(shape.vocab_size * d, d * f + f),
        source="built-in GPT (exact count)",
        block_params=(shape.num_params(include_embeddings=False) - 2 * d) // shape.n_layers,
        max_seq_len=shape.max_seq_len,
    )


def model_from_preset(name: str) -> ModelShape:
    """A built-in GPT preset (`autotune.contract.GPT_PRESETS`) by name."""
    if name not in GPT_PRESETS:
        from autotune.errors import did_you_mean

        raise UserError(f"unknown model preset '{name}'{did_you_mean(name, list(GPT_PRESETS))}",
                        fix=f"use one of {', '.join(GPT_PRESETS)} or a path to a config.json")
    return model_from_gpt_shape(GPT_PRESETS[name], name=name)


def model_from_hf_config(path_or_dict: str | Path | dict[str, Any],
                         overrides: dict[str, Any] | None = None) -> ModelShape:
    """Parameter count and shape from a Hugging Face `config.json` (or the folder holding one),
    with `overrides` set over its fields (no download, no torch).

    Exact for llama / mistral / qwen2 / qwen3 / gemma / gemma2 / phi3 / granite / olmo2 (gated
    MLP, RMSNorm), olmo (gated MLP, LayerNorm without weights),
    mixtral / qwen2_moe / qwen3_moe / gpt_oss / deepseek_v2 / deepseek_v3 (mixtures of experts:
    `params` all experts, the FLOPs those a token runs; the last three's blocks counted in
    autotune.estimate.hf_moe) and gpt2 /
    gpt_neo / gpt_neox / opt (plain MLP, LayerNorm with bias), the fields a
    config leaves out at the defaults the worker's transformers fills
    (autotune.estimate.hf_defaults); other families are counted with the llama layout and
    labelled as approximate in `source` (autotune.estimate.hf_count).
    """
    cfg, where = hf_count.read_hf_config(path_or_dict, overrides)
    c = hf_count.count_hf_config(cfg, where)
    return ModelShape(
        name=str(cfg.get("_name_or_path") or c.model_type or where), params=c.params,
        unrouted_expert_params=c.unrouted_expert_params, n_layers=c.n_layers, d_model=c.d_model,
        n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.head_dim, qk_norm=c.qk_norm,
        norm=c.norm, norm_readers=c.norm_readers, pre_norms=c.norm_places[0], post_norms=c.norm_places[1],
        clip_qkv=c.clip_qkv, rope_fp32=c.rope_fp32,
        fused_qkv=c.fused_qkv, tp_split=c.model_type not in hf_defaults.NO_TP, experts=c.experts, layout=c.layout,
        attention="eager" if c.eager else "fused",
        attn_softcap=c.softcap[0], logit_softcap=c.softcap[1], plain=c.plain, dropouts=c.dropouts,
        vocab_size=c.vocab_size, ffn_hidden=c.ffn_hidden,
        gated_mlp=c.gated_mlp, tied_embeddings=c.tied_embeddings, lookup_params=c.lookup_params,
        largest_layer_params=c.largest_layer_params,
        # "config" names a config given as fields (a spec's model_type): said once, not twice.
        source=f"Hugging Face {where if isinstance(path_or_dict, dict) else 'config ' + where} "
               f"({c.model_type or 'unknown type'}; {c.how})",
        block_params=c.block_params, tp_split_params=c.tp_split[0], block_tp_split_params=c.tp_split[1],
        tp_gathered=hf_defaults.TP_GATHERED.get(c.model_type, (False, False)),
        max_seq_len=c.max_seq_len,
    )


def model_from_params(params: int, n_layers: int | None = None, d_model: int | None = None,
                      n_heads: int | None = None, vocab_size: int | None = None) -> ModelShape:
    """A model known by its parameter count (and optionally its shapes, for activations)."""
    if params <= 0:
        raise UserError(f"--params {params} must be positive", fix="give the parameter count, e.g. 7e9")
    for name, v in (("--layers", n_layers), ("--hidden", d_model), ("--heads", n_heads),
                    ("--vocab", vocab_size)):
        if v is not None and v <= 0:
            raise UserError(f"{name} {v} must be positive", fix=f"give a positive {name}")
    if d_model is not None and n_heads is not None and d_model % n_heads:
        raise UserError(f"--hidden {d_model} is not divisible by --heads {n_heads}",
                        fix="pick a head count that divides the hidden size")
    return ModelShape(
        name=f"{params:.3g} parameters", params=int(params), n_layers=n_layers, d_model=d_model,
        n_heads=n_heads, n_kv_heads=n_heads, vocab_size=vocab_size,
        ffn_hidden=4 * d_model if d_model else None,
        largest_layer_params=(vocab_size * d_model) if vocab_size and d_model else None,
        # A GPT block of this width (attention 4d^2 + 4d, a 4d MLP 8d^2 + 5d, two norms 4d), as the
        # activations assume: without it FSDP2 full_shard counted the whole model as gathered,
        # the same as shard_grad_op, where the same shape from a config gathers two blocks.
        block_params=12 * d_model * d_model + 13 * d_model if n_layers and d_model else None,
        source="given by --params",
    )


def flops_per_token(model: ModelShape, seq_len: int) -> float:
    """Model FLOPs per trained token (the MFU numerator) of a model: 6N + 12 * L * d * s with
    N = `matmul_params` and d the attention width, heads x head width (`autotune.contract.flops`,
    the rule the worker's MFU follows). Without layers/hidden (`--params N` alone) the
    attention term is left out."""
    return model_flops_per_token(model.matmul_params, model.n_layers, model.attention_width, seq_len)


def hardware_flops_per_token(model: ModelShape, seq_len: int, recompute: Recompute = "none",
                             recomputed_layer_fraction: float | None = None) -> float:
    """FLOPs the hardware executes per token (the HFU numerator), recomputation included:
    full recompute runs the blocks' forward twice; selective recomputes a fraction of the
    blocks (default: the worker's every 2nd block). The LM head is never recomputed, so with
    the blocks' share of N known the re-run is that share of one forward, as a trial measures
    it (re-run nn.Linear weights / N: trials/trial_result.py); without it (`--params` alone),
    all of it: 8N + 16*L*d*s for full recompute (PaLM, Appendix B)."""
    f = {"none": 0.0, "full": 1.0}.get(recompute, recomputed_layer_fraction)
    if f is None:
        f = 0.5  # the worker's default: every 2nd block
    if f and model.block_params and model.n_layers and model.matmul_params:
        # The blocks' share of the FLOPs: a mixture's experts a token skips are not re-run either.
        blocks = model.n_layers * model.block_params - model.unrouted_expert_params
        f *= min(1.0, blocks / model.matmul_params)
    return _hardware_flops(model.matmul_params, model.n_layers, model.attention_width, seq_len, f)


def mfu(tokens_per_s: float, flops_per_token_: float, num_devices: int,
        device_peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation (`autotune.contract.flops.utilization`)."""
    return utilization(tokens_per_s, flops_per_token_, num_devices, device_peak_flops)


def tp_rank_flops_share(model: ModelShape, seq_len: int, tp_degree: int) -> float:
    """The share of a token's FLOPs one of `tp_degree` tensor-parallel ranks computes: what the
    plan splits (its matrices, `tp_split_params`, and the attention core over the rank's
    heads) 1/tp of it, the rest whole on every rank (the LM head; a mixture's routed experts,
    router and shared expert, which transformers' plans leave out). Applied to the hardware
    FLOPs, recomputation included (the LM head, never re-run, makes it a little low there)."""
    total = flops_per_token(model, seq_len)
    if tp_degree <= 1 or not total:
        return 1.0
    split = model.tp_split_total
    if split is None:  # without the shapes: the whole model split
        return 1 / tp_degree
    # A gathered attention (tp_gathered) runs its core over all heads on every rank.
    attention = None if model.tp_gathered[0] else model.attention_width
    split_flops = model_flops_per_token(split, model.n_layers, attention, seq_len)
    return 1 - min(1.0, split_flops / total) * (1 - 1 / tp_degree)
