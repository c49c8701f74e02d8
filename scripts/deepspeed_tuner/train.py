"""A user's DeepSpeed training script for DeepSpeed's autotuner (the side-by-side in
scripts/bench_deepspeed_tuner.py): the model of tiny_gpt.py, trained until the autotuner's
engine stops it after its profiled steps.

    deepspeed --autotuning run --num_gpus 2 train.py --deepspeed_config ds_config.json
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import deepspeed
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_gpt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--seq_len", type=int, default=128)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    deepspeed.init_distributed(dist_backend="gloo")
    model = tiny_gpt.make_model()
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    data = tiny_gpt.batches(args.seq_len, engine.train_micro_batch_size_per_gpu(), torch.device("cpu"))
    for _ in itertools.count():  # the autotuner's engine exits after its last profiled step
        batch = next(data)
        loss = engine(batch["input_ids"], labels=batch["labels"])
        engine.backward(loss)
        engine.step()


if __name__ == "__main__":
    main()
