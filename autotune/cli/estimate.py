"""`autotune estimate`: peak memory per rank and FLOPs per token of a config, before launching.

    autotune estimate --model 7b --seq-len 4096 --micro-batch 2 --zero-stage 2 --dp 8 --gpu A100-40GB
    autotune estimate --model path/to/config.json --precision bf16 --checkpointing full --json
    autotune estimate --params 7e9 --layers 32 --hidden 4096 --heads 32 --vocab 32000

Analytic figures (see autotune/estimate/memory.py); the framework overhead is calibrated by
a sweep on real hardware, so here it is covered only by the stated safety margin. Torch-free.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from autotune.contract import Checkpointing, Offload, Precision
from autotune.cli.common import console
from autotune.errors import UserError

# Headroom `fits` keeps below the GPU's memory for what the analytic model does not count
# without a calibration (CUDA context, allocator fragmentation). A sweep fits it instead.
DEFAULT_SAFETY_MARGIN = 0.10


class _Optimizer(str, Enum):
    adamw = "adamw"
    sgd = "sgd"
    adafactor = "adafactor"


def _parse_count(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"--params '{text}' is not a number", fix="write it as e.g. 7e9 or 6738415616") from None
    if value <= 0 or value != value or value == float("inf"):
        raise UserError(f"--params {text} must be a positive number", fix="write it as e.g. 7e9")
    return int(round(value))


def resolve_model(model: str | None, params: str | None, layers: int | None, hidden: int | None,
                  heads: int | None, vocab: int | None):
    from autotune.contract import GPT_PRESETS
    from autotune.estimate.compute import model_from_hf_config, model_from_params, model_from_preset

    if (model is None) == (params is None):
        raise UserError("give exactly one of --model PRESET|CONFIG.json or --params N",
                        fix=f"e.g. --model 7b (presets: {', '.join(GPT_PRESETS)}) or --params 7e9")
    if model is not None:
        shape_flags = [n for n, v in (("--layers", layers), ("--hidden", hidden), ("--heads", heads),
                                      ("--vocab", vocab)) if v is not None]
        if shape_flags:
            raise UserError(f"{', '.join(shape_flags)} only go with --params",
                            fix="drop them, or describe the model with --params N and its shapes")
        if model in GPT_PRESETS or not (model.endswith(".json") or Path(model).exists()):
            return model_from_preset(model)
        return model_from_hf_config(model)
    return model_from_params(_parse_count(params or "0"), layers, hidden, heads, vocab)


def gpu_memory_bytes(name: str) -> int:
    from autotune.pricing.load import load_catalog

    cat = load_catalog()
    gpus = {k.lower(): k for k in cat.gpus}
    key = gpus.get(name.lower())
    if key is None:
        import difflib

        close = [g for g in gpus if g.startswith(name.lower())] or difflib.get_close_matches(
            name.lower(), list(gpus), n=1)
        hint = f" (did you mean {' or '.join(repr(gpus[c]) for c in close)}?)" if close else ""
        raise UserError(f"--gpu '{name}' is not in the catalog{hint}",
                        fix=f"use one of: {', '.join(sorted(cat.gpus))}")
    mem = cat.gpus[key].memory_bytes
    if not mem:
        raise UserError(f"--gpu '{key}' has no memory figure in the catalog",
                        fix="pick a GPU type with memory_bytes set")
    return int(mem)


def _gib(n: int | None) -> str:
    return "not estimated" if n is None else f"{n / 2**30:,.2f} GiB"


def register(app: typer.Typer) -> None:
    @app.command()
    def estimate(
        model: Optional[str] = typer.Option(None, "--model", help="GPT preset name or a Hugging Face config.json"),
        params: Optional[str] = typer.Option(None, "--params", help="parameter count, e.g. 7e9"),
        layers: Optional[int] = typer.Option(None, "--layers", min=1, help="with --params: transformer layers"),
        hidden: Optional[int] = typer.Option(None, "--hidden", min=1, help="with --params: hidden size"),
        heads: Optional[int] = typer.Option(None, "--heads", min=1, help="with --params: attention heads"),
        vocab: Optional[int] = typer.Option(None, "--vocab", min=1, help="with --params: vocabulary size"),
        seq_len: int = typer.Option(2048, "--seq-len", min=1, help="tokens per sequence"),
        micro_batch: int = typer.Option(1, "--micro-batch", min=1, help="sequences per rank per micro-step"),
        precision: Precision = typer.Option(Precision.bf16, "--precision"),
        checkpointing: Checkpointing = typer.Option(
            Checkpointing.none, "--checkpointing",
            help="activation recompute: none, selective (every 2nd block), full"),
        zero_stage: int = typer.Option(0, "--zero-stage", min=0, max=3, help="ZeRO stage 0..3"),
        offload: Offload = typer.Option(Offload.none, "--offload"),
        dp: int = typer.Option(1, "--dp", min=1, help="data-parallel degree"),
        tp: int = typer.Option(1, "--tp", min=1, help="tensor-parallel degree"),
        optimizer: _Optimizer = typer.Option(_Optimizer.adamw, "--optimizer"),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="catalog GPU type: say whether it fits"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON document"),
    ) -> None:
        """Estimate peak memory per rank (breakdown) and FLOPs per token for a config."""
        from pydantic import ValidationError

        from autotune.contract import Checkpointing, Offload, Precision
        from autotune.estimate.compute import flops_per_token, hardware_flops_per_token
        from autotune.estimate.memory import MemoryConfig, estimate_memory, recomputed_layers

        shape = resolve_model(model, params, layers, hidden, heads, vocab)
        if shape.n_heads and shape.n_heads % tp:
            raise UserError(f"--tp {tp} does not divide the model's {shape.n_heads} attention heads",
                            fix="pick a TP degree that divides the head count")
        try:
            mcfg = MemoryConfig(seq_len=seq_len, micro_batch_size=micro_batch,
                                precision=Precision(precision.value),
                                checkpointing=Checkpointing(checkpointing.value), zero_stage=zero_stage,
                                offload=Offload(offload.value), dp_degree=dp, tp_degree=tp,
                                optimizer=optimizer.value)
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
            text, _, fix = msg.partition(". To fix: ")
            raise UserError(f"--offload {offload.value} with --zero-stage {zero_stage}: {text}",
                            fix=fix or "see --help") from None
        gpu_mem = gpu_memory_bytes(gpu) if gpu else None
        est = estimate_memory(shape, mcfg)
        doc = est.as_dict()
        doc.update(
            model=shape.name, model_source=shape.source,
            flops_per_token=flops_per_token(shape, seq_len),
            hardware_flops_per_token=hardware_flops_per_token(
                shape, seq_len, mcfg.checkpointing.value,
                None if shape.n_layers is None else recomputed_layers(
                    shape.n_layers, mcfg.checkpointing, mcfg.checkpoint_every) / shape.n_layers),
            config=mcfg.model_dump(mode="json"),
            basis="estimated (analytic; framework overhead not calibrated here)",
        )
        if gpu_mem is not None:
            usable = int(gpu_mem * (1 - DEFAULT_SAFETY_MARGIN))
            doc.update(gpu=gpu, gpu_memory_bytes=gpu_mem, safety_margin=DEFAULT_SAFETY_MARGIN,
                       fits=bool(est.total_bytes <= usable))
        if as_json:
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            return
        from rich.table import Table

        con = console()
        con.print(f"[bold]{shape.name}[/]: {shape.params:,} parameters ({shape.source})")
        con.print(f"config: seq {seq_len}, micro-batch {micro_batch}, {precision.value}, "
                  f"checkpointing {checkpointing.value}, ZeRO {zero_stage}, offload {offload.value}, "
                  f"dp {dp}, tp {tp}, {optimizer.value} ({mcfg.resolved_engine} layout)")
        table = Table(title="peak memory per rank (estimated)", title_justify="left")
        table.add_column("part")
        table.add_column("bytes", justify="right")
        for label, key in (("weights", "weights_bytes"), ("gradients", "gradients_bytes"),
                           ("optimizer state", "optimizer_bytes"), ("activations", "activations_bytes"),
                           ("other (logits, buckets, casts)", "other_bytes"), ("total", "total_bytes"),
                           ("host memory (offload)", "host_bytes")):
            table.add_row(label, _gib(doc[key]))
        con.print(table)
        con.print(f"FLOPs per token: {doc['flops_per_token']:.4g} (model, 6N + 12Lds); "
                  f"{doc['hardware_flops_per_token']:.4g} with recomputation")
        for note in est.notes:
            con.print(f"note: {note}")
        con.print("framework overhead (CUDA context, allocator) is not in these figures: a sweep "
                  "calibrates it on real hardware")
        if gpu_mem is not None:
            verdict = "[green]fits[/]" if doc["fits"] else "[red]does not fit[/]"
            con.print(f"{gpu} ({_gib(gpu_mem)}): {verdict} (total within {1 - DEFAULT_SAFETY_MARGIN:.0%} "
                      "of its memory, the rest kept for the uncalibrated overhead)")
