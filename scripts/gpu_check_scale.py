"""The GPU-only paths of the sharded build and FSDP2 (issue 13), as real trials on one GPU:
weights materialised on CUDA from the meta device, FSDP2's MixedPrecisionPolicy (bf16) and
CPUOffloadPolicy on CUDA, ZeRO-3 partitioned module by module on CUDA, a Hugging Face Llama.

    OUT=results python3 scripts/gpu_check_scale.py          # ~2.5 min on an H200
    DRY=1 OUT=/tmp/out python3 scripts/gpu_check_scale.py  # the same trials on CPU (tiny, fp32)

Writes $OUT/summary.json (status, tokens/s, build seconds and allocator peaks, what each
engine saw applied). One GPU: world size 1, so this checks the code paths, not sharding's
savings (the CPU tests measure those on 2 ranks). Run on an H200 on 2026-11-30: all 7 ok
(benchmarks/results/scale_gpu_h200.json).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's autotune

from autotune.contract import DeviceKind, GPTWorkload, HFWorkload, Launcher, Precision, TrialConfig  # noqa: E402
from autotune.run.launch import run_trial  # noqa: E402

DRY = os.environ.get("DRY") == "1"
BASE = dict(workload=GPTWorkload(preset="tiny" if DRY else "small"), seq_len=128 if DRY else 1024,
            micro_batch_size=2 if DRY else 8, num_gpus=1,
            device=DeviceKind.cpu if DRY else DeviceKind.cuda,
            precision=Precision.fp32 if DRY else Precision.bf16, warmup_steps=2, measure_steps=5,
            max_measure_steps=5, timeout_s=240)
LLAMA = HFWorkload(model_type="llama", config_overrides=dict(
    hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
    num_key_value_heads=8, vocab_size=32000, max_position_embeddings=1024))
CONFIGS = {
    "ddp": {},
    "fsdp_full": {"fsdp": "full_shard"},
    "fsdp_offload": {"fsdp": "full_shard", "offload": "optimizer+params"},
    "fsdp_grad_op": {"fsdp": "shard_grad_op"},
    "zero3": {"zero_stage": 3, "launcher": Launcher.deepspeed},
    "hf_llama_fsdp": {"fsdp": "full_shard", "workload": LLAMA},
    "hf_llama_zero3": {"zero_stage": 3, "workload": LLAMA},
}
SEEN = ("engine", "model_built_as", "mp_param_dtype", "linear_output_dtype", "param_devices",
        "param_dtype", "optimizer_state_devices", "cpu_offload", "zero_stage", "ds_zero_config",
        "param_elements_local", "param_elements_total", "reshard_after_forward")


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    runs = Path(os.environ.get("RUNS", "/tmp/scale_runs"))
    summary: dict = {}
    t_all = time.time()
    for name, kw in CONFIGS.items():
        t0 = time.time()
        try:
            r = run_trial(TrialConfig(**{**BASE, **kw}), runs / name)
            m = r.memory
            summary[name] = {
                "status": r.status.value, "error": r.error, "wall_s": time.time() - t0,
                "tokens_per_s": r.tokens_per_s, "final_loss": r.final_loss, "phase_s": r.phase_s,
                "peak_alloc": m.allocator_allocated_peak_bytes, "nvml": m.nvml_device_peak_bytes,
                "build_alloc": m.build_allocator_peak_bytes, "build_rss": m.build_host_rss_peak_bytes,
                "obs": {k: r.observations.get(k) for k in SEEN},
                "log_tail": None if r.ok else (r.log_tail or "")[-3000:],
            }
        except Exception:  # noqa: BLE001 - one broken path must not hide the others
            summary[name] = {"status": "script_error", "error": traceback.format_exc()[-3000:]}
        print(name, summary[name]["status"], round(time.time() - t0, 1), "s",
              summary[name].get("error") or "", flush=True)
    summary["_total_s"] = time.time() - t_all
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0 if all(v["status"] == "ok" for k, v in summary.items() if not k.startswith("_")) else 1


if __name__ == "__main__":
    sys.exit(main())
