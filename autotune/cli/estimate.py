"""`autotune estimate`: peak memory per rank and FLOPs per token of a config, before launching.

    autotune estimate --model 7b --seq-len 4096 --micro-batch 2 --zero-stage 2 --dp 8 --gpu A100-40GB
    autotune estimate --model path/to/config.json --precision bf16 --checkpointing full --json
    autotune estimate --params 7e9 --layers 32 --hidden 4096 --heads 32 --vocab 32000

Analytic figures (see autotune/estimate/memory.py); the framework overhead is calibrated by
a sweep on real hardware, so here it is covered only by the stated safety margin. Torch-free.
"""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

from autotune.cli.common import console, print_json
from autotune.contract import Checkpointing, FSDPMode, Offload, Precision


class _Optimizer(str, Enum):
    adamw = "adamw"
    sgd = "sgd"
    adafactor = "adafactor"


def _bytes_text(n: int | None) -> str:
    """Bytes in the unit that shows them (a tiny model read "0.00 GiB" on every row)."""
    from autotune.format import fmt_bytes

    return "not estimated" if n is None else fmt_bytes(n)


def register(app: typer.Typer) -> None:
    @app.command()
    def estimate(
        model: Optional[str] = typer.Option(None, "--model", help="GPT preset name or a Hugging Face config.json"),
        params: Optional[str] = typer.Option(None, "--params", help="parameter count, e.g. 7e9"),
        layers: Optional[int] = typer.Option(None, "--layers", min=1, help="with --params: transformer layers"),
        hidden: Optional[int] = typer.Option(None, "--hidden", min=1, help="with --params: hidden size"),
        heads: Optional[int] = typer.Option(None, "--heads", min=1, help="with --params: attention heads"),
        vocab: Optional[int] = typer.Option(None, "--vocab", min=1, help="with --params: vocabulary size"),
        seq_len: Optional[int] = typer.Option(
            None, "--seq-len", min=1, show_default=False,
            help="tokens per sequence [default: 2048, or the model's longest if shorter]"),
        micro_batch: int = typer.Option(1, "--micro-batch", min=1, help="sequences per rank per micro-step"),
        precision: Precision = typer.Option(Precision.bf16, "--precision"),
        checkpointing: Checkpointing = typer.Option(
            Checkpointing.none, "--checkpointing",
            help="activation recompute: none, selective (every 2nd block), full"),
        zero_stage: int = typer.Option(0, "--zero-stage", min=0, max=3, help="ZeRO stage 0..3"),
        offload: Offload = typer.Option(Offload.none, "--offload"),
        dp: int = typer.Option(1, "--dp", min=1, help="data-parallel degree"),
        tp: int = typer.Option(1, "--tp", min=1, help="tensor-parallel degree"),
        fsdp: FSDPMode = typer.Option(FSDPMode.none, "--fsdp",
                                      help="FSDP2 sharding instead of ZeRO: full_shard, shard_grad_op"),
        optimizer: _Optimizer = typer.Option(_Optimizer.adamw, "--optimizer"),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="catalog GPU type: say whether it fits"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON document"),
    ) -> None:
        """Estimate peak memory per rank (breakdown) and FLOPs per token for a config."""
        from autotune.api.plan import estimate as estimate_

        doc = estimate_(model, params, layers, hidden, heads, vocab, seq_len, micro_batch, precision.value,
                        checkpointing.value, zero_stage, offload.value, dp, tp, optimizer.value, gpu,
                        fsdp=fsdp.value)
        if as_json:
            print_json(doc)
            return
        seq = doc["config"]["seq_len"]  # the one estimated: 2048 or the model's longest
        print_estimate(doc, gpu, console(), f"seq {seq}, micro-batch {micro_batch}, {precision.value}, "
                       f"checkpointing {checkpointing.value}, ZeRO {zero_stage}, offload {offload.value}, "
                       f"dp {dp}, tp {tp}, {optimizer.value} ({doc['engine']} layout"
                       + (f", FSDP2 {fsdp.value})" if fsdp is not FSDPMode.none else ")"))


def print_estimate(doc: dict, gpu: str | None, con, config_text: str) -> None:
    """The estimate on the terminal: the config, memory per rank by part, FLOPs, the verdict."""
    from rich.table import Table

    from autotune.api.plan import DEFAULT_SAFETY_MARGIN

    gpu_mem = doc.get("gpu_memory_bytes")
    # A model given by --params is named by its count ("7e+09 parameters"): said once, in full.
    name = "" if doc["model"].endswith(" parameters") else f"[bold]{doc['model']}[/]: "
    con.print(f"{name}{doc['model_params']:,} parameters ({doc['model_source']})")
    con.print(f"config: {config_text}")
    table = Table(title="peak memory per rank (estimated)", title_justify="left")
    table.add_column("part")
    table.add_column("bytes", justify="right")
    for label, key in (("weights (own shard)", "weights_bytes"), ("gradients", "gradients_bytes"),
                       ("optimizer state", "optimizer_bytes"), ("activations", "activations_bytes"),
                       ("other (gathered parameters, logits, buckets, casts)", "other_bytes"),
                       ("total" if doc["activations_bytes"] is not None else "total (without activations)",
                        "total_bytes"), ("host memory (offload)", "host_bytes")):
        table.add_row(label, _bytes_text(doc[key]))
        if key == "other_bytes" and doc["detail"]["gathered_params_bytes"]:  # a part of "other"
            table.add_row("  of which gathered parameters", _bytes_text(doc["detail"]["gathered_params_bytes"]))
    con.print(table)
    con.print(f"FLOPs per token: {doc['flops_per_token']:.4g} (model, {doc['flops_rule']}); "
              f"{doc['hardware_flops_per_token']:.4g} with recomputation")
    for note in doc["notes"]:
        con.print(f"note: {note}")
    con.print("framework overhead (CUDA context, allocator) is not in these figures: a sweep "
              "calibrates it on real hardware")
    if gpu_mem is not None:
        if doc["fits"] is None:  # activations not estimated: the total is a lower bound
            con.print(f"{gpu} ({_bytes_text(gpu_mem)}): not decided: the total without activations is "
                      f"within {1 - DEFAULT_SAFETY_MARGIN:.0%} of its memory, but the activations are not "
                      "estimated (give --layers, --hidden, --heads and --vocab)")
            return
        verdict = "[green]fits[/]" if doc["fits"] else "[red]does not fit[/]"
        con.print(f"{gpu} ({_bytes_text(gpu_mem)}): {verdict} (total within {1 - DEFAULT_SAFETY_MARGIN:.0%} "
                  "of its memory, the rest kept for the uncalibrated overhead)")
        if doc["fits"] is False:
            print_fits_with(doc["fits_with"], con)


def print_fits_with(changes: list[dict], con) -> None:
    """What would make it fit (autotune.estimate.savers), each change with its estimate."""
    if not changes:
        con.print("no memory saver tried makes it fit (full checkpointing, micro-batch 1, sharding over "
                  "up to 1,024 ranks, offload, and these together): a GPU with more memory, or tensor "
                  "parallelism (--tp)")
        return
    con.print("it fits with any one of these (estimated):")
    for c in changes:
        host = f", {_bytes_text(c['host_bytes'])} in host memory" if c["host_bytes"] else ""
        con.print(f"  {c['flags']}: {_bytes_text(c['total_bytes'])} per rank{host}", highlight=False)
