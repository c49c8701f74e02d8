"""Build the model and its batch iterator for a TrialConfig's workload, and apply activation
checkpointing to it (a property of the model, so every engine gets it the same way).

    built = build_workload(cfg, device)               # the whole model on `device`, initialised
    built = build_workload(cfg, device, deferred=True)  # as the engine wants it (the worker)
    built.checkpointed_layers = apply_checkpointing(built, cfg)
    engine = build_engine(cfg, built.model, device, world, init_module=built.init_module)

No rank holds more of the model than its config says. `deferred=True` builds on the meta
device (shapes, no memory): the engine decides what this rank holds (FSDP2 and TP shards,
ZeRO-3 partitions, DDP the whole model) and `trials.workloads.materialize` allocates and
initialises only that, module by module, on the trial's device, with the model's own init
(`built.init_module`). A user entry point builds its own model: on the meta device
(materialised the same way, with the init it names in `info`), or on a real device (moved
to the trial's device whole; see `autotune.contract.EntryPointWorkload`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from autotune.contract import EntryPointWorkload, GPTWorkload, HFWorkload, TrialConfig
from trials.errors import UnsupportedConfig


@dataclass
class BuiltWorkload:
    model: torch.nn.Module
    batches: Iterator[Any]
    params: int
    shape: dict[str, int] | None = None  # n_layers, d_model[, attention_width] (FLOPs attention term)
    lookup_params: int = 0  # used only as lookup tables: no matmul FLOPs (autotune.contract.flops)
    # A mixture of experts' experts beyond a token's top-k: held, no FLOPs for that token.
    unrouted_expert_params: int = 0
    flops_per_token: float | None = None  # given by the user's entry point, if any
    kind: str = "gpt"
    hf_config: Any = None
    checkpointed_layers: list[int] = field(default_factory=list)
    # The model's own init of one module, run when its meta tensors get memory.
    init_module: Callable[[torch.nn.Module], None] | None = None
    # "meta" (the engine materialises this rank's part) or "device" (whole, on the device).
    built_as: str = "meta"

    @property
    def matmul_params(self) -> int:
        """The N of 6N: parameters that take part in a matmul for every token (a mixture of
        experts: the top-k experts a token is routed to, as autotune.estimate counts it)."""
        return self.params - self.lookup_params - self.unrouted_expert_params


def import_workload_modules(cfg: TrialConfig) -> None:
    """Import what building this workload imports (the worker does it before the build, so
    that the build's time and memory count the model, not module imports)."""
    import importlib

    importlib.import_module("trials.workloads.materialize")
    # An init op on the meta device (nn.init.normal_ in a module's constructor) runs through
    # torch._refs, whose first call imports torch._dynamo: time and host RSS that the build
    # would otherwise count as the model's.
    importlib.import_module("torch._dynamo")
    if isinstance(cfg.workload, GPTWorkload):
        importlib.import_module("trials.workloads.gpt")
    elif isinstance(cfg.workload, HFWorkload):
        _import_hf_model_class(cfg.workload)


def _import_hf_model_class(wl: HFWorkload) -> None:
    """transformers imports a model's modeling module (and accelerate, PIL, ...) lazily, at
    `from_config`: resolve the class now. A config it cannot build is left for the build to
    report as the trial's error."""
    from trials.workloads import hf

    transformers = hf.transformers_module()
    try:
        config = hf.build_hf_config(wl)
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except Exception:  # noqa: BLE001 - the build raises the same error, as the trial's
        transformers.AutoModelForCausalLM  # noqa: B018 - resolves the lazy module


def build_workload(cfg: TrialConfig, device: torch.device, deferred: bool = False) -> BuiltWorkload:
    built = _build(cfg, device)
    if not deferred:
        from trials.workloads.materialize import ensure_materialized

        ensure_materialized(built.model, device, built.init_module)
        built.built_as = "device"
    return built


def _build(cfg: TrialConfig, device: torch.device) -> BuiltWorkload:
    from trials.workloads.materialize import has_meta_tensors

    wl = cfg.workload
    seed = cfg.seed + 1000 * int(os.environ.get("RANK", "0"))  # each rank its own data
    if isinstance(wl, GPTWorkload):
        from trials.workloads.gpt import GPT, random_batches

        shape = wl.resolved_shape()
        if cfg.seq_len > shape.max_seq_len:
            raise UnsupportedConfig(
                f"seq_len {cfg.seq_len} exceeds the preset's max_seq_len {shape.max_seq_len}")
        with torch.device("meta"):
            model = GPT(shape)
        return BuiltWorkload(model, random_batches(shape.vocab_size, cfg.seq_len,
                                                   cfg.micro_batch_size, device, seed),
                             params=shape.num_params(),
                             shape={"n_layers": shape.n_layers, "d_model": shape.d_model},
                             # learned positions; the token embedding is also the (tied) LM head
                             lookup_params=shape.max_seq_len * shape.d_model,
                             init_module=GPT.init_module)
    if isinstance(wl, HFWorkload):
        from trials.workloads import hf

        model, config = hf.build_hf_model(wl, meta=True)
        hf.check_positions(config, cfg.seq_len)
        return BuiltWorkload(model, hf.random_batches(config.vocab_size, cfg.seq_len,
                                                      cfg.micro_batch_size, device, seed),
                             params=count_params(model), shape=hf.shape_of(config), kind="hf",
                             hf_config=config, lookup_params=lookup_params(model),
                             unrouted_expert_params=unrouted_expert_params(model, config),
                             init_module=hf.init_module(model))
    if isinstance(wl, EntryPointWorkload):
        from trials.workloads.entry import build_entry_point

        model, batches, info = build_entry_point(wl, cfg.seq_len, cfg.micro_batch_size, device)
        dims = ({"n_layers": int(info["n_layers"]), "d_model": int(info["d_model"])}
                if info.get("n_layers") and info.get("d_model") else None)
        return BuiltWorkload(model, batches, params=count_params(model), shape=dims,
                             flops_per_token=info.get("flops_per_token"), kind="entry_point",
                             lookup_params=lookup_params(model), init_module=info.get("init_module"),
                             built_as="meta" if has_meta_tensors(model) else "device")
    raise UnsupportedConfig(f"workload kind '{wl.kind}' is not known to this worker")


def count_params(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights once), as the 6N of the FLOPs estimate wants; a
    ZeRO-3 partitioned parameter counts its whole size (`ds_numel`)."""
    return sum(int(getattr(p, "ds_numel", p.numel())) for p in model.parameters())


def lookup_params(model: torch.nn.Module) -> int:
    """Embedding weights that no matmul uses (not tied to an nn.Linear or the model's output
    embeddings): learned positions, an untied input embedding."""
    matmul = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    out = getattr(model, "get_output_embeddings", lambda: None)()
    if out is not None and getattr(out, "weight", None) is not None:
        matmul.add(id(out.weight))
    return sum(m.weight.numel() for m in model.modules()
               if isinstance(m, torch.nn.Embedding) and id(m.weight) not in matmul)


def unrouted_expert_params(model: torch.nn.Module, config: Any) -> int:
    """Expert weights a token is not routed to: in each module holding `num_experts` experts
    as tensors of one row per expert (transformers' mixtures: mixtral, qwen*_moe), all but the
    config's `num_experts_per_tok` rows; 0 for a dense model."""
    top_k = getattr(config, "num_experts_per_tok", None)
    if not isinstance(top_k, int) or top_k <= 0:
        return 0
    skipped = 0
    for module in model.modules():
        n = getattr(module, "num_experts", None)
        own = list(module.parameters(recurse=False))
        if isinstance(n, int) and n > top_k and own and all(p.dim() == 3 and p.shape[0] == n for p in own):
            skipped += sum(p.numel() for p in own) // n * (n - top_k)
    return skipped


def apply_checkpointing(built: BuiltWorkload, cfg: TrialConfig) -> list[int]:
    """Turn on activation checkpointing as the config says; returns the checkpointed layers."""
    mode = cfg.checkpointing.value
    if mode == "none":
        return []
    if built.kind == "gpt":
        from trials.workloads.gpt import checkpointed_blocks

        blocks = checkpointed_blocks(built.model.shape.n_layers, mode, cfg.checkpoint_every)
        built.model.set_checkpointing(blocks)
        return sorted(blocks)
    if built.kind == "hf":
        from trials.workloads import hf

        return hf.apply_checkpointing(built.model, built.hf_config, mode, cfg.checkpoint_every)
    # The user's model: transformers' switch where it has one, else unsupported.
    from trials.workloads.hf import switch_checkpointing

    return switch_checkpointing(built.model, mode, cfg.checkpoint_every)
