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

import json
import math
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from autotune.contract import GPT_PRESETS, GPTShape, GPTWorkload, HFWorkload
from autotune.contract.flops import hardware_flops_per_token as _hardware_flops
from autotune.contract.flops import model_flops_per_token, utilization
from autotune.errors import UserError, read_text_file
from autotune.estimate import hf_defaults as hf

Recompute = Literal["none", "selective", "full"]


class Dims(NamedTuple):
    """A model's known shape: layers, hidden size, attention heads, vocabulary."""

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int


class ModelShape(BaseModel):
    """What the estimates need to know about a decoder-only transformer.

    `params` is the exact total parameter count where the source allows it (built-in GPT,
    Hugging Face config of a known family) and the user's figure for `--params N`.
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
    max_seq_len: int | None = Field(
        default=None, description="the longest sequence the model takes (learned positions, or a "
                                  "config's max_position_embeddings); None where not known")

    @property
    def has_shape(self) -> bool:
        return self.dims() is not None

    def dims(self) -> Dims | None:
        """The shape every activation figure needs, or None when a part of it is unknown."""
        if self.n_layers is None or self.d_model is None or self.n_heads is None or self.vocab_size is None:
            return None
        return Dims(self.n_layers, self.d_model, self.n_heads, self.vocab_size)

    @property
    def tp_heads(self) -> int | None:
        """What every TP degree must divide: the attention and key/value heads alike (each
        rank holds whole ones of both: a model with one key/value head runs no TP); None
        where the heads are not known."""
        if not self.n_heads:
            return None
        return math.gcd(self.n_heads, self.n_kv_heads or self.n_heads)

    def tp_local_params(self, tp_degree: int) -> float:
        """Parameters one tensor-parallel rank holds: the repeated blocks split `tp_degree`
        ways, the rest (embeddings, LM head, final norm) whole on every rank, as
        trials/engines/tp.py splits the built-in GPT and Hugging Face models (the blocks' own
        norms and row-parallel biases, also whole, are a rounding error). Without the block
        size, the whole model split (a lower bound)."""
        if tp_degree <= 1 or not self.block_params or not self.n_layers:
            return self.params / tp_degree
        split = min(self.params, self.n_layers * self.block_params)
        return split / tp_degree + (self.params - split)

    @property
    def matmul_params(self) -> int:
        """Parameters that take part in a matmul for every token: the N of 6N."""
        return self.params - self.lookup_params


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


# Hugging Face families by MLP style and biases; read from config.json with no transformers
# import. Counts follow the modeling files of transformers 5.x (checked against them with
# meta-device instantiation in tests/test_estimate.py).
_GATED = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "mixtral", "phi3", "olmo", "olmo2",
          "granite", "internlm2", "deepseek_v2", "yi", "cohere", "stablelm"}
_PLAIN = {"gpt2", "gpt_neox", "opt", "gpt_neo"}


def _read_hf_config(path_or_dict: str | Path | dict[str, Any],
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


# The largest size field a config may set: a tensor dimension's int32 bound, far over any real
# model's, and low enough that every count and FLOP figure made of them stays a finite float.
MAX_HF_SIZE = 2**31 - 1
_SHAPE_FIELDS = (hf.HIDDEN, hf.LAYERS, hf.HEADS, ("vocab_size",))


def _set_name(cfg: dict[str, Any], *names: str) -> str | None:
    """The first of `names` the config sets (to something other than null)."""
    return next((n for n in names if cfg.get(n) is not None), None)


def _hf_size(cfg: dict[str, Any], where: str, *names: str) -> int | None:
    """The first of `names` the config sets, as an int; None when none is. A value that is not
    a whole number from 1 to MAX_HF_SIZE (0, -100, "x", 1e300, true) is a UserError naming it."""
    name = _set_name(cfg, *names)
    if name is None:
        return None
    v = cfg[name]
    whole = (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if not whole or not 0 < v <= MAX_HF_SIZE:
        raise UserError(f"{where}: field `{name}` is {json.dumps(v, default=str)}, not a whole number "
                        f"from 1 to {MAX_HF_SIZE:,}",
                        fix=f"set `{name}` to a positive integer in the config (or in the spec's "
                            "workload.config_overrides, where it is set there)")
    return int(v)


def _hf_dims(cfg: dict[str, Any], where: str, gated: bool) -> tuple[int, int, int, int, int, int]:
    """Hidden size, layers, attention heads, vocabulary, key/value heads and head width of a
    config, each checked (_hf_size); the heads must divide what the layout splits among them:
    the hidden size (GPT-2 style: its modeling files refuse the rest) and, in the llama layout,
    the attention heads over the key/value heads (grouped-query attention)."""
    dims = {names[0]: _hf_size(cfg, where, *names) for names in _SHAPE_FIELDS}
    missing = [n for n, v in dims.items() if v is None]
    if missing:
        raise UserError(f"{where}: field(s) {', '.join(missing)} missing",
                        fix="use a decoder-only transformer config.json (e.g. llama, gpt2, qwen2)")
    h, L, a, V = (v or 0 for v in dims.values())
    kv = _hf_size(cfg, where, *hf.KV_HEADS) or a
    head_dim = _hf_size(cfg, where, "head_dim")
    heads = _set_name(cfg, *_SHAPE_FIELDS[2])
    if not gated and h % a:
        raise UserError(f"{where}: `{_set_name(cfg, *_SHAPE_FIELDS[0])}` {h} is not divisible by `{heads}` {a}",
                        fix="give a head count that divides the hidden size")
    if gated and a % kv:
        raise UserError(f"{where}: `{heads}` {a} is not divisible by "
                        f"`{_set_name(cfg, *hf.KV_HEADS)}` {kv}",
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
    if not filled:
        return "exact count"
    named = ", ".join(filled[:3]) + (f" and {len(filled) - 3} more" if len(filled) > 3 else "")
    return f"exact count; {named} at transformers' {model_type} defaults"


def model_from_hf_config(path_or_dict: str | Path | dict[str, Any],
                         overrides: dict[str, Any] | None = None) -> ModelShape:
    """Parameter count and shape from a Hugging Face `config.json` (or the folder holding one),
    with `overrides` set over its fields (no download, no torch).

    Exact for llama / mistral / qwen2 / qwen3 (gated MLP, RMSNorm) and gpt2 / gpt_neox / opt
    (plain MLP, LayerNorm with bias), the fields a config leaves out at the defaults the
    worker's transformers fills (autotune.estimate.hf_defaults); other families are counted with
    the llama layout and labelled as approximate in `source`.
    """
    cfg, where = _read_hf_config(path_or_dict, overrides)
    cfg, filled = hf.with_type_defaults(cfg)
    mt = str(cfg.get("model_type", "")).lower()
    gated = mt in _GATED or (mt not in _PLAIN and cfg.get("hidden_act") in ("silu", "swiglu"))
    h, L, a, V, kv, head_dim = _hf_dims(cfg, where, gated)
    ffn = _hf_size(cfg, where, *hf.FFN)
    how = _how_counted(mt, filled, ffn is not None)
    ffn = ffn if ffn is not None else 4 * h
    tied = bool(cfg.get("tie_word_embeddings", mt in ("gpt2", "opt", "gpt_neo")))

    if gated:  # llama layout: RMSNorm (weight only), no biases (qwen2: q/k/v biases)
        q_out, kv_out = a * head_dim, kv * head_dim
        attn = h * q_out + 2 * h * kv_out + q_out * h
        if mt == "qwen2":  # q/k/v projections carry biases, the output projection none
            attn += q_out + 2 * kv_out
        elif cfg.get("attention_bias"):
            attn += q_out + 2 * kv_out + h
        if mt == "qwen3":
            attn += 2 * head_dim  # q_norm, k_norm (RMSNorm over head_dim)
        mlp = 3 * h * ffn + (2 * ffn + h if cfg.get("mlp_bias") else 0)
        norms = 2 * h
        final_norm = h
    else:  # gpt2 / gpt_neox / opt layout: LayerNorm with bias, biases everywhere
        attn = h * 3 * h + 3 * h + h * h + h
        mlp = h * ffn + ffn + ffn * h + h
        norms = 2 * 2 * h
        final_norm = 2 * h
        if mt == "opt" and cfg.get("do_layer_norm_before") is False:
            final_norm = 0
    emb = V * h
    pos = 0
    if mt in ("gpt2", "gpt_neo"):
        pos = (_hf_size(cfg, where, "n_positions", "max_position_embeddings") or 1024) * h
    elif mt == "opt":  # OPT offsets positions by 2
        pos = ((_hf_size(cfg, where, "max_position_embeddings") or 2048) + 2) * h
    head = 0 if tied else V * h
    params = L * (attn + mlp + norms) + final_norm + emb + pos + head
    lookup = pos + (0 if tied else emb)
    return ModelShape(
        name=str(cfg.get("_name_or_path") or mt or where), params=params, n_layers=L, d_model=h,
        n_heads=a, n_kv_heads=kv, vocab_size=V, ffn_hidden=ffn, gated_mlp=gated,
        tied_embeddings=tied, lookup_params=lookup,
        largest_layer_params=max(emb, h * ffn + ffn),
        # "config" names a config given as fields (a spec's model_type): said once, not twice.
        source=f"Hugging Face {where if isinstance(path_or_dict, dict) else 'config ' + where} "
               f"({mt or 'unknown type'}; {how})",
        block_params=attn + mlp + norms,
        # As a trial refuses (trials/workloads/hf.py, check_positions); None for a family
        # outside autotune.estimate.hf_defaults without the field (only transformers knows it).
        max_seq_len=_hf_size(cfg, where, *hf.POSITIONS),
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


def model_from_workload(workload: Any) -> ModelShape | None:
    """The model description of a sweep's workload (`autotune.contract` Workload): the built-in
    GPT's or a Hugging Face config's; None for a user entry point (no shape to reason about).
    UserError when a Hugging Face config cannot be read."""
    if isinstance(workload, GPTWorkload):
        return model_from_gpt_shape(workload.resolved_shape(), name=str(workload.preset or "gpt"))
    if isinstance(workload, HFWorkload):
        # The same config the worker builds (trials/workloads/hf.py, `load_config_dict`).
        if workload.config_path:
            # The spec's field, named with how it is read: the fix of `estimate --model` (a
            # preset name) is no fix for a spec carried away from its model's config.
            read_text_file(workload.config_file() or workload.config_path, "Hugging Face config",
                           fix="point workload.config_path at a local config.json (or the folder holding "
                               "one); a relative path is read from the spec file's folder")
            return model_from_hf_config(workload.config_path, workload.config_overrides)
        return model_from_hf_config({"model_type": workload.model_type}, workload.config_overrides)
    return None


def flops_per_token(model: ModelShape, seq_len: int) -> float:
    """Model FLOPs per trained token (the MFU numerator) of a model: 6N + 12 * L * d * s with
    N = `matmul_params` (`autotune.contract.flops`, the rule the worker's MFU follows). Without
    layers/hidden (`--params N` alone) the attention term is left out."""
    return model_flops_per_token(model.matmul_params, model.n_layers, model.d_model, seq_len)


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
        f *= min(1.0, model.n_layers * model.block_params / model.matmul_params)
    return _hardware_flops(model.matmul_params, model.n_layers, model.d_model, seq_len, f)


def mfu(tokens_per_s: float, flops_per_token_: float, num_devices: int,
        device_peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation (`autotune.contract.flops.utilization`)."""
    return utilization(tokens_per_s, flops_per_token_, num_devices, device_peak_flops)
