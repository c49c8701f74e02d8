"""The bare baseline of scripts/bench_overhead.py: the same model and steps as a trial, as a
plain torch training script with no autotune controller, contract, engine or result file.

    python -m torch.distributed.run --nproc-per-node 2 scripts/bench_overhead_bare.py \\
        --preset tiny --seq-len 128 --micro-batch 4 --accum 1 --warmup 2 --steps 5

Rank 0 prints one JSON line (phases in seconds) on stdout.
"""

from __future__ import annotations

import time

_t_start = time.perf_counter()
_wall_start = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    phase: dict[str, float] = {}
    launched = os.environ.get("BENCH_LAUNCH_TIME")
    if launched:
        phase["launch_to_script"] = _wall_start - float(launched)

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    # The same model class as the trial, so both runs do the same arithmetic.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from autotune.contract import GPT_PRESETS
    from trials.workloads.gpt import GPT, random_batches

    phase["imports"] = time.perf_counter() - _t_start
    t = time.perf_counter()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    shape = GPT_PRESETS[args.preset]
    model = GPT(shape)
    ddp = DDP(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    batches = random_batches(shape.vocab_size, args.seq_len, args.micro_batch, torch.device("cpu"),
                             seed=rank)
    phase["build"] = time.perf_counter() - t

    def step() -> float:
        for _ in range(args.accum):
            b = next(batches)
            loss = ddp(b["input_ids"], labels=b["labels"]) / args.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    t = time.perf_counter()
    for _ in range(args.warmup):
        step()
    phase["warmup"] = time.perf_counter() - t
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    phase["measure"] = sum(times)
    t = time.perf_counter()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    phase["teardown_in_script"] = time.perf_counter() - t
    if rank == 0:
        print(json.dumps({"phase_s": phase, "step_times_s": times}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
