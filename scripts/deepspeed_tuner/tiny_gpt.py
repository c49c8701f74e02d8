"""The model both tuners are given in the side-by-side (scripts/bench_deepspeed_tuner.py): the
built-in GPT `tiny` (0.94M parameters) with random tokens, as a user's entry point.

    autotune:   workload: {kind: entry_point, entry_point: "tiny_gpt:build", python_path: [...]}
    DeepSpeed:  train.py (next to this file) builds the same model and batches.
"""

from __future__ import annotations

import torch


def make_model(preset: str = "tiny") -> torch.nn.Module:
    from autotune.contract import GPT_PRESETS
    from trials.workloads.gpt import GPT

    torch.manual_seed(0)
    return GPT(GPT_PRESETS[preset])


def batches(seq_len: int, micro_batch_size: int, device, preset: str = "tiny"):
    """Endless micro-batches of random token ids (labels = the ids shifted by the model)."""
    from autotune.contract import GPT_PRESETS

    vocab = GPT_PRESETS[preset].vocab_size
    g = torch.Generator().manual_seed(1)
    while True:
        ids = torch.randint(0, vocab, (micro_batch_size, seq_len), generator=g).to(device)
        yield {"input_ids": ids, "labels": ids}


def build(seq_len: int, micro_batch_size: int, device, preset: str = "tiny"):
    from autotune.contract import GPT_PRESETS

    shape = GPT_PRESETS[preset]
    return (make_model(preset), batches(seq_len, micro_batch_size, device, preset),
            {"n_layers": shape.n_layers, "d_model": shape.d_model})
