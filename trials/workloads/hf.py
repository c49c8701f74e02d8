"""A Hugging Face transformers causal LM built from a config, with random weights.

    model, config = build_hf_model(HFWorkload(model_type="llama", config_overrides={...}))
    model, config = build_hf_model(HFWorkload(config_path="my_model/config.json"), meta=True)

Never a download: the config is a local file or a model type with given sizes, and the
weights come from `AutoModelForCausalLM.from_config` (random init), so it works offline
(HF_HUB_OFFLINE=1 is set before transformers is imported). transformers is the optional
extra `hf`: without it the trial is `unsupported`, saying how to install it.

Built on the meta device (`meta=True`): transformers skips the init there; the engine
allocates this rank's part and runs `init_module`, the model's own `_init_weights`, on it
(trials/workloads/materialize.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import torch

from autotune.contract import HFWorkload
from autotune.contract.flops import attention_width, mla_head_width
from trials.errors import UnsupportedConfig


def transformers_module():
    # No hub lookups from a trial, ever: the tool must work offline.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise UnsupportedConfig("the Hugging Face workload needs transformers, which is not "
                                "installed. To fix: pip install 'autotune-llm[hf]'") from None
    return transformers


def load_config_dict(wl: HFWorkload) -> dict[str, Any]:
    """The config as a dict: a local config.json (plus overrides), or model_type + overrides."""
    path = wl.config_file()
    if path is not None:
        if not path.is_file():
            raise UnsupportedConfig(f"HF config '{path}' does not exist (it must be a local "
                                    "file: trials never download). To fix: point config_path "
                                    "at a config.json")
        data = json.loads(path.read_text())
        if "model_type" not in data:
            raise UnsupportedConfig(f"{path} has no `model_type`. To fix: add e.g. "
                                    '"model_type": "llama"')
        check_model_type(data["model_type"], wl.config_overrides)
        return {**data, **wl.config_overrides}
    check_model_type(str(wl.model_type), wl.config_overrides)
    return {"model_type": wl.model_type, **wl.config_overrides}


# A few causal LMs' model types, for the fix of a model type that is not one.
CAUSAL_EXAMPLES = "llama, gpt2, mistral, qwen2"


def check_model_type(model_type: Any, overrides: dict[str, Any]) -> None:
    """UnsupportedConfig, in one line with its fix, unless transformers builds `model_type` as
    a causal LM and knows every key of `overrides`. transformers itself would list every model
    type it has (hundreds), build an encoder-decoder's config and fail only at the model, and
    keep a misspelt override as a stray attribute that no layer reads (the model then has the
    model type's default size). Run by the sweep's preflight and by every trial's build."""
    import difflib

    transformers = transformers_module()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    version = transformers.__version__
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        close = difflib.get_close_matches(str(model_type), list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), n=3)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        what = ("has no causal LM (AutoModelForCausalLM) for" if model_type in CONFIG_MAPPING_NAMES
                else "does not know")
        raise UnsupportedConfig(f"transformers {version} {what} model_type '{model_type}'{hint}. "
                                f"To fix: name a causal LM's model_type (e.g. {CAUSAL_EXAMPLES})")
    config_class = CONFIG_MAPPING[model_type]
    unknown = [key for key in overrides
               if _stray(config_class, key, overrides[key]) and not _read_by_modeling(model_type, key)]
    if unknown:
        fields = sorted(config_class().to_dict())
        hints = [f"'{k}' (did you mean '{close[0]}'?)" if close else f"'{k}'"
                 for k in unknown for close in [difflib.get_close_matches(k, fields, n=1)]]
        raise UnsupportedConfig(
            f"config_overrides {', '.join(hints)} is not a field of {config_class.__name__}, nor read "
            f"by transformers {version}'s modeling code: it would change nothing in the model. "
            f"To fix: name one of its fields (transformers.{config_class.__name__}().to_dict() lists "
            "them), or put the key in a config.json given as config_path, whose keys are taken as written")


def _read_by_modeling(model_type: str, key: str) -> bool:
    """Whether transformers' code for this model type, or its code shared by all models (rope,
    attention, the config base), names `key`: a model may read an attribute its config does
    not declare (qwen2's `getattr(config, "head_dim", ...)`), and such a key is applied."""
    import re
    from pathlib import Path

    import transformers
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    root = Path(transformers.__file__).parent
    files = [*(root / "models" / model_type_to_module_name(model_type)).glob("*.py"),
             *(root / name for name in ("modeling_utils.py", "modeling_rope_utils.py",
                                        "configuration_utils.py", "integrations/sdpa_attention.py"))]
    word = re.compile(rf"\b{re.escape(key)}\b")
    return any(f.is_file() and word.search(f.read_text(encoding="utf-8")) for f in files)


def _stray(config_class: Any, key: str, value: Any) -> bool:
    """Whether the config keeps `key` only as an attribute of its own, not one of its fields:
    a field is in the default config's dict or its constructor's parameters (or their
    aliases); a legacy key the constructor turns into a field (rope_theta, torch_dtype) leaves
    no attribute behind."""
    import inspect

    if key in config_class.attribute_map or key in inspect.signature(config_class.__init__).parameters:
        return False
    if key in config_class().to_dict():
        return False
    try:
        return key in config_class(**{key: value}).to_dict()
    except Exception:  # noqa: BLE001 - a value the config refuses: the build says why
        return False


def build_hf_config(wl: HFWorkload) -> Any:
    transformers = transformers_module()
    data = load_config_dict(wl)
    model_type = data.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError) as exc:
        raise UnsupportedConfig(f"transformers {transformers.__version__} cannot build model_type "
                                f"'{model_type}' with this config: {exc}. To fix: correct the config's "
                                "fields (or config_overrides)") from None
    config.use_cache = False  # training: no KV cache (it also conflicts with checkpointing)
    return config


def check_positions(config: Any, seq_len: int) -> None:
    """UnsupportedConfig when `seq_len` is longer than the model takes: its position table
    (learned positions) or the length its rotary scaling is set for. Checked by every trial's
    build and once by the sweep's preflight (trials/preflight.py), before any trial."""
    longest = getattr(config, "max_position_embeddings", None)  # gpt2's n_positions, aliased
    if longest and seq_len > longest:
        raise UnsupportedConfig(f"seq_len {seq_len} exceeds the model's max_position_embeddings "
                                f"{longest}. To fix: set seq_len to at most {longest}, or raise "
                                "max_position_embeddings (config_overrides)")


def build_hf_model(wl: HFWorkload, meta: bool = False, config: Any = None) -> tuple[torch.nn.Module, Any]:
    """(model, config); `meta`: shapes only, no memory and no init; `config`: the workload's
    config built already (build_hf_config), not built again."""
    transformers = transformers_module()
    config = config if config is not None else build_hf_config(wl)
    try:
        with torch.device("meta") if meta else contextlib.nullcontext():
            model = transformers.AutoModelForCausalLM.from_config(config)
    except ValueError as exc:
        raise UnsupportedConfig(f"'{config.model_type}' is not a causal LM in transformers "
                                f"{transformers.__version__}: {exc}") from None
    return model, config


def init_module(model: torch.nn.Module):
    """The model's own init of one module, as `PreTrainedModel.initialize_weights` applies it
    (with transformers' guard that skips weights already initialised)."""
    guard: Any = contextlib.nullcontext
    try:
        from transformers.initialization import guard_torch_init_functions

        guard = guard_torch_init_functions
    except ImportError:  # transformers < 5: no guard, plain `_init_weights`
        pass
    fn = getattr(model, "_initialize_weights", None) or model._init_weights

    def init(module: torch.nn.Module) -> None:
        with guard():
            fn(module)

    return init


def shape_of(config: Any) -> dict[str, int] | None:
    """n_layers, d_model and the attention width (heads x head_dim: the FLOPs attention term's
    width, by the estimate's rule, autotune.contract.flops.attention_width), where the config
    names them."""
    n_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    d_model = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    if not n_layers or not d_model:
        return None
    heads = getattr(config, "num_attention_heads", None)
    # A head_dim transformers reads (llama-layout families); gpt2 / gpt_neox / opt have none.
    # Multi-head latent attention (deepseek_v2 / v3, whose head_dim is the RoPE's): its scores'
    # and weighted sum's widths (mla_head_width).
    head_dim = getattr(config, "head_dim", None)
    if getattr(config, "kv_lora_rank", None) and getattr(config, "v_head_dim", None):
        head_dim = mla_head_width(config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim)
    width = attention_width(int(d_model), heads, head_dim)
    return {"n_layers": int(n_layers), "d_model": int(d_model), "attention_width": int(width or d_model)}


def decoder_layers(model: torch.nn.Module, config: Any) -> list[torch.nn.Module]:
    """The repeated blocks: the ModuleList whose length is the config's layer count."""
    n = (shape_of(config) or {}).get("n_layers")
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return list(module)
    return []


def apply_checkpointing(model: torch.nn.Module, config: Any, mode: str, every: int) -> list[int]:
    """Activation checkpointing through transformers' own switch; returns the layers it
    applies to. Selective (every k-th layer) sets the per-layer flag that transformers'
    `GradientCheckpointingLayer` reads; older versions without it only do all or nothing."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise UnsupportedConfig(f"{type(model).__name__} does not support activation checkpointing")
    switch_checkpointing(model, "full", 1)  # every layer on; selective turns some off below
    layers = decoder_layers(model, config)
    per_layer = [layer for layer in layers if hasattr(layer, "gradient_checkpointing")]
    if mode == "full":
        return list(range(len(layers)))
    if len(per_layer) != len(layers) or not layers:
        raise UnsupportedConfig(
            f"selective checkpointing needs per-layer switches, which {type(model).__name__} "
            f"in this transformers version lacks. To fix: use checkpointing full or none")
    chosen = [i for i in range(len(layers)) if i % every == 0]
    for i, layer in enumerate(layers):
        layer.gradient_checkpointing = i in chosen
    return chosen


def switch_checkpointing(model: torch.nn.Module, mode: str, every: int) -> list[int]:
    """Checkpointing on a user's model (an entry point) through transformers' own switch,
    `full` or `selective` (every `every`-th decoder layer); returns the layers it checkpoints
    (those transformers marks per layer; [] where it marks none). Selective needs the
    switch's `every_n_layers` (transformers >= 5.16); the switch is
    `activation_checkpointing_enable` from 5.23, `gradient_checkpointing_enable` before.
    Without a switch, or selective without `every_n_layers`, the trial is unsupported, and
    says which settings the workload runs."""
    import inspect

    found = [(getattr(model, name), kwargs_name) for name, kwargs_name in (
        ("activation_checkpointing_enable", "activation_checkpointing_kwargs"),
        ("gradient_checkpointing_enable", "gradient_checkpointing_kwargs")) if callable(getattr(model, name, None))]
    if not found:
        raise UnsupportedConfig(
            f"checkpointing '{mode}' cannot be applied to the entry point's {type(model).__name__}: it "
            "has no gradient_checkpointing_enable. To fix: checkpoint inside your model, and set "
            "checkpointing none", workload_allows={"checkpointing": ["none"]})
    switch, kwargs_name = found[0]
    try:
        takes_every = "every_n_layers" in inspect.signature(switch).parameters
    except (TypeError, ValueError):  # a builtin or C-implemented switch: no signature to read
        takes_every = False
    if mode == "selective" and not takes_every:
        raise UnsupportedConfig(
            f"checkpointing 'selective' cannot be applied to the entry point's {type(model).__name__}: "
            "its checkpointing switch (transformers') turns on full only (every_n_layers needs "
            "transformers >= 5.16). To fix: checkpoint inside your model, and set checkpointing "
            "none or full", workload_allows={"checkpointing": ["none", "full"]})
    args: dict[str, Any] = {kwargs_name: {"use_reentrant": False}}
    if takes_every:
        args["every_n_layers"] = every if mode == "selective" else 1
    switch(**args)
    per_layer = [m for m in model.modules()
                 if any(c.__name__ == "GradientCheckpointingLayer" for c in type(m).__mro__)]
    return [i for i, m in enumerate(per_layer) if getattr(m, "gradient_checkpointing", False)]


def random_batches(vocab_size: int, seq_len: int, micro_batch_size: int,
                   device: torch.device, seed: int):
    """Endless random token batches. transformers shifts labels inside the loss, so the
    labels are the inputs themselves."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    while True:
        ids = torch.randint(0, vocab_size, (micro_batch_size, seq_len), generator=g).to(device)
        yield {"input_ids": ids, "labels": ids}
