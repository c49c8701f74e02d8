#!/usr/bin/env bash
# GPU check: a short real `autotune sweep` on one CUDA GPU, with measured vs predicted memory
# (allocator and NVML), MFU, one JSON summary and a markdown report. The committed run took about
# 5 minutes on one H200 (6 sweep trials, packages from wheel files: benchmarks/results/gpu_check.json,
# elapsed_s); the default 8 trials, or a venv to install, take longer.
#
#   scripts/gpu_check.sh                      # on a CUDA machine, from the repository root
#   OUT=/tmp/out scripts/gpu_check.sh --preset medium --trials 10
#   scripts/gpu_check.sh --dry-run            # the same pipeline on CPU, tiny preset (a test)
#
#   scripts/gpu_check.sh --python python3 --wheels .whl   # offline GPU node: its own torch, no venv
#   scripts/gpu_check.sh --truth-only --truth-s 300       # only the H200 ground truth, 5 minutes of it
#                                                         # (a round of its 16 configs: about 12)
#
# Options: --dry-run, --out DIR (default $OUT, else ./gpu_check_out), --preset NAME (small),
# --trials N (8), --venv DIR (.venv-gpu-check; the dry run uses .venv when it exists),
# --no-fp8 (skip torchao and the fp8 trial), --no-install (use the venv as it is),
# --python PY (run with this interpreter as it is, e.g. an image's python3 that holds a CUDA
# torch, no venv: a venv made from a venv would not see that torch), --wheels DIR (install the
# missing packages from these wheel files, offline, into a temporary folder (not the output:
# a lent machine returns only a few files from it); for machines without an index:
# scripts/gpu_wheels.sh downloads them where pip reaches PyPI),
# --long-steps N (measured steps of the long rerun of the best config; 0 skips it; 100),
# --trial-timeout S (each trial's timeout; 240 on a GPU), --no-compile (skip the compile
# trials), --compile-only (only the compile trials: no sweep, no other direct trials),
# --truth-s S (after the check, measure issue 28's GPU ground truth for S seconds: the `h200`
# bench of scripts/bench_search.py, topping up benchmarks/results/truth_h200_pool.json into
# OUT/truth_h200_pool.json; no run starts after S, and every run is saved as it ends: commit
# the file and replay it anywhere with `scripts/bench_matrix.py --benches h200`),
# --truth-repeats N (runs per config the truth is topped up to; 2), --truth-only (only that).
# Writes into the output folder: gpu_check_summary.json, gpu_check_report.md, report.txt
# (autotune report), sweep.log, nvidia_smi.txt, spec.yaml, space.yaml, runs/ (trial folders),
# extra/ (direct trials: fp8, ZeRO, the long rerun), compile/ (compile trials) and
# compile_check.json / compile_check.md (MFU with and without compile, fp8+compile against
# bf16+compile on the 1B GPT, each trial's wall time split into start, build, compile, steps).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DRY_RUN=0
OUT_DIR="${OUT:-$ROOT/gpu_check_out}"
PRESET=""
TRIALS=""
VENV=""
FP8=1
INSTALL=1

PYTHON=""
WHEELS=""
LONG_STEPS=100
TRIAL_TIMEOUT_S=""
COMPILE=1
COMPILE_ONLY=0
TRUTH_S=0
TRUTH_REPEATS=2
TRUTH_ONLY=0

usage() { sed -n '2,33p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --out) OUT_DIR="$2"; shift ;;
    --preset) PRESET="$2"; shift ;;
    --trials) TRIALS="$2"; shift ;;
    --venv) VENV="$2"; shift ;;
    --no-fp8) FP8=0 ;;
    --no-install) INSTALL=0 ;;
    --python) PYTHON="$2"; shift ;;
    --wheels) WHEELS="$2"; shift ;;
    --long-steps) LONG_STEPS="$2"; shift ;;
    --trial-timeout) TRIAL_TIMEOUT_S="$2"; shift ;;
    --no-compile) COMPILE=0 ;;
    --compile-only) COMPILE_ONLY=1 ;;
    --truth-s) TRUTH_S="$2"; shift ;;
    --truth-repeats) TRUTH_REPEATS="$2"; shift ;;
    --truth-only) TRUTH_ONLY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown option '$1'. To fix: see --help." >&2; exit 2 ;;
  esac
  shift
done

for n in "$TRUTH_S" "$TRUTH_REPEATS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "gpu_check: --truth-s and --truth-repeats take whole numbers, got '$n'. To fix: e.g. --truth-s 300 --truth-repeats 2." >&2; exit 2; }
done
STARTED="$(date +%s)"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
if [[ -n "$WHEELS" ]]; then WHEELS="$(cd "$WHEELS" && pwd)"; fi
cd "$ROOT"

if [[ "$DRY_RUN" == 1 ]]; then
  # CPU stand-in: the tiny preset, 1 rank, fp32/bf16, a few short trials; no GPU figures.
  PRESET="${PRESET:-tiny}"; TRIALS="${TRIALS:-3}"; FP8=0
  SEQ_LEN=64; GLOBAL_BATCH=8; MICROS="[2, 4]"; PRECISIONS="[fp32, bf16]"
  WARMUP=1; MEASURE=2; MAX_MEASURE=3; TIMEOUT_S=600
  export AUTOTUNE_FORCE_CPU=1
  if [[ -z "$VENV" && -x "$ROOT/.venv/bin/python" ]]; then VENV="$ROOT/.venv"; INSTALL=0; fi
else
  PRESET="${PRESET:-small}"; TRIALS="${TRIALS:-8}"
  SEQ_LEN=1024; GLOBAL_BATCH=64; MICROS="[8, 16, 32]"; PRECISIONS="[bf16, fp8]"
  WARMUP=3; MEASURE=10; MAX_MEASURE=20; TIMEOUT_S=240
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: no nvidia-smi: this is not a CUDA machine. To fix: run on a GPU machine, or use --dry-run." >&2
    exit 2
  fi
  nvidia-smi > "$OUT_DIR/nvidia_smi.txt" 2>&1 || true
fi
VENV="${VENV:-$ROOT/.venv-gpu-check}"
TIMEOUT_S="${TRIAL_TIMEOUT_S:-$TIMEOUT_S}"

# --- environment ------------------------------------------------------------------------
if [[ -n "$PYTHON" ]]; then
  # The interpreter as it is, with the repository on the path (no install of autotune itself).
  PY="$(command -v "$PYTHON")"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  if [[ -n "$WHEELS" ]]; then
    SITE="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_site.XXXXXX")"
    trap 'rm -rf "$SITE"' EXIT
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$PYTHONPATH:$SITE"
  fi
  AUTOTUNE=("$PY" -m autotune.cli)
else
  if [[ ! -x "$VENV/bin/python" ]]; then
    # System site packages: reuse a CUDA torch the machine already has (containers, images).
    python3 -m venv --system-site-packages "$VENV"
  fi
  PY="$VENV/bin/python"
  if [[ -n "$WHEELS" ]]; then
    "$PY" -m pip install --quiet --no-index --no-deps "$WHEELS"/*.whl
    "$PY" -m pip install --quiet --no-index --no-deps --no-build-isolation -e "$ROOT"
  elif [[ "$INSTALL" == 1 ]]; then
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet -e "$ROOT"
    # NVML for the device-level memory peak (the worker samples it while a trial runs).
    "$PY" -m pip install --quiet nvidia-ml-py || echo "gpu_check: nvidia-ml-py not installed: NVML peaks will read 'not measured'" >&2
    if [[ "$FP8" == 1 ]]; then
      "$PY" -m pip install --quiet torchao || { echo "gpu_check: torchao not installed: fp8 not tried" >&2; FP8=0; }
    fi
  fi
  AUTOTUNE=("$VENV/bin/autotune")
fi
if [[ "$FP8" == 1 ]] && ! "$PY" -c "import torchao" >/dev/null 2>&1; then
  echo "gpu_check: torchao does not import: fp8 not tried" >&2
  FP8=0
fi
"$PY" -c "import torch, sys; print('gpu_check: torch', torch.__version__, 'cuda', torch.version.cuda)"
if [[ "$DRY_RUN" == 0 ]]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_check: torch in $VENV sees no CUDA device. To fix: install a CUDA build of torch into the venv (or use --venv)." >&2
    exit 2
  }
fi

compile_trials() {
  # torch.compile on the GPU: the 124M GPT (preset small) eager and compiled, at the sweep's
  # fastest config when there is one; fp8+compile against bf16+compile on the 1B GPT (random
  # weights, built from its shape). Each trial compiles cold (a cache of its own), so its
  # compile_s is what a long run's first step pays.
  mkdir -p "$OUT_DIR/compile"
  "$PY" - "$OUT_DIR" "$DRY_RUN" "$FP8" "$TIMEOUT_S" <<'PYEOF'
import sys
from pathlib import Path
from autotune.contract import DeviceKind, GPTWorkload, TrialConfig, TrialResult
out, dry, fp8, timeout = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1", float(sys.argv[4])
device = DeviceKind.cpu if dry else DeviceKind.cuda
steps = dict(warmup_steps=2, measure_steps=3 if dry else 20, max_measure_steps=3 if dry else 20,
             min_measure_s=0.0, timeout_s=max(timeout, 900.0))
best = None
for res in (out / "runs").rglob("result.json") if (out / "runs").is_dir() else []:
    r = TrialResult.read(res)
    if r.ok and r.tokens_per_s and (best is None or r.tokens_per_s > best[0]):
        best = (r.tokens_per_s, TrialConfig.read(res.parent / "config.json"))
base = best[1] if best else TrialConfig(
    workload=GPTWorkload(preset="tiny" if dry else "small"), seq_len=64 if dry else 1024,
    micro_batch_size=2 if dry else 16, precision="fp32" if dry else "bf16", device=device)
base = base.model_copy(update=steps)
configs = {"gpt124m_eager": base, "gpt124m_compiled": base.model_copy(update={"compile": True})}
big = TrialConfig(workload=GPTWorkload(preset="tiny" if dry else "1b"), seq_len=64 if dry else 2048,
                  micro_batch_size=2 if dry else 4, precision="fp32" if dry else "bf16",
                  device=device, compile=True, **steps)
configs["gpt1b_bf16_compiled"] = big
if fp8 and not dry:
    configs["gpt1b_fp8_compiled"] = big.model_copy(update={"precision": "fp8"})
for name, cfg in configs.items():
    cfg.write(out / "compile" / f"{name}_config.json")
    print(name)
PYEOF
  for cfgfile in "$OUT_DIR"/compile/*_config.json; do
    name="$(basename "$cfgfile" _config.json)"
    # A cold cache per trial (beside it): the compile a fresh machine pays.
    TORCHINDUCTOR_CACHE_DIR="$OUT_DIR/compile/cache_$name" "${AUTOTUNE[@]}" trial "$cfgfile" \
      --out "$OUT_DIR/compile/trial_$name" > "$OUT_DIR/compile/$name.txt" 2>&1 \
      || echo "gpu_check: compile trial $name did not succeed (see compile/$name.txt)" >&2
  done
  "$PY" - "$OUT_DIR" <<'PYEOF'
import json, sys
from pathlib import Path
from autotune.contract import TrialResult
out = Path(sys.argv[1])
rows = {}
for res in sorted((out / "compile").glob("trial_*/result.json")):
    r = TrialResult.read(res)
    p = r.phase_s
    start = sum(p.get(k, 0.0) for k in ("launch_to_worker", "worker_imports", "setup"))
    rows[res.parent.name.removeprefix("trial_")] = {
        "status": r.status.value, "error": r.error, "tokens_per_s": r.tokens_per_s, "mfu": r.mfu,
        "compile_s": r.compile_s, "wall_s": r.wall_s,
        "wall_split_s": {"start": start, "build": p.get("build"), "compile": p.get("compile"),
                         "other_warmup": (p.get("warmup") or 0.0) - (p.get("compile") or 0.0),
                         "measured_steps": p.get("measure")}}
def ratio(a, b):
    ta, tb = rows.get(a, {}).get("tokens_per_s"), rows.get(b, {}).get("tokens_per_s")
    return ta / tb if ta and tb else None
doc = {"trials": rows, "compiled_over_eager_124m": ratio("gpt124m_compiled", "gpt124m_eager"),
       "fp8_over_bf16_1b_compiled": ratio("gpt1b_fp8_compiled", "gpt1b_bf16_compiled")}
(out / "compile_check.json").write_text(json.dumps(doc, indent=1))
fmt = lambda v, f: "-" if v is None else format(v, f)
lines = ["| trial | status | tokens/s | MFU | compile s | start s | build s | steps s | wall s |",
         "|---|---|---|---|---|---|---|---|---|"]
for name, r in rows.items():
    w = r["wall_split_s"]
    lines.append(f"| {name} | {r['status']} | {fmt(r['tokens_per_s'], ',.0f')} | {fmt(r['mfu'], '.1%')} | "
                 f"{fmt(r['compile_s'], '.1f')} | {fmt(w['start'], '.1f')} | {fmt(w['build'], '.1f')} | "
                 f"{fmt(w['measured_steps'], '.1f')} | {fmt(r['wall_s'], '.1f')} |")
lines += ["", f"compiled / eager tokens/s (124M): {fmt(doc['compiled_over_eager_124m'], '.3f')}",
          f"fp8+compile / bf16+compile tokens/s (1B): {fmt(doc['fp8_over_bf16_1b_compiled'], '.3f')}"]
(out / "compile_check.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
}

measure_truth() {
  # Issue 28's GPU ground truth: every config of the h200 bench (benchmarks/search_space_h200.yaml)
  # measured with the sweep's pooled trials, round by round, until TRUTH_S seconds have passed.
  # It tops up the committed truth (copied into the output folder, where a lent machine's
  # files come back from even when its command is stopped). The dry run measures a stand-in
  # (the tiny preset at seq_len 64, on CPU) into a file of its own.
  local file="$OUT_DIR/truth_h200_pool.json" standin=()
  if [[ "$DRY_RUN" == 1 ]]; then
    file="$OUT_DIR/truth_h200_dry_run.json"; standin=(--preset tiny --seq-len 64)
  elif [[ -f "$ROOT/benchmarks/results/truth_h200_pool.json" && ! -f "$file" ]]; then
    cp "$ROOT/benchmarks/results/truth_h200_pool.json" "$file"
  fi
  echo "gpu_check: the h200 ground truth for at most $TRUTH_S s into $file"
  "$PY" "$ROOT/scripts/bench_search.py" --bench h200 --measure-only --repeats "$TRUTH_REPEATS" \
    --max-wait-s 0 --deadline-s "$TRUTH_S" --cache "$file" "${standin[@]}" 2>&1 | tee "$OUT_DIR/truth.log" \
    || echo "gpu_check: the ground truth's measurement exited non-zero (see truth.log)" >&2
}

if [[ "$TRUTH_ONLY" == 1 ]]; then
  if [[ "$TRUTH_S" == 0 ]]; then TRUTH_S=300; fi
  measure_truth
  exit 0
fi

if [[ "$COMPILE_ONLY" == 1 ]]; then
  rm -rf "$OUT_DIR/compile"
  compile_trials
  echo "gpu_check: compile trials done in $(( $(date +%s) - STARTED )) s: $OUT_DIR/compile_check.md"
  exit 0
fi

# --- the sweep ----------------------------------------------------------------------------
# Micro-batch, precision, checkpointing, ZeRO stage; one GPU. Choices the worker cannot run
# here (e.g. fp8 without torchao, ZeRO before its engine lands) are dropped by the sweep,
# which prints what it dropped.
cat > "$OUT_DIR/space.yaml" <<EOF
num_gpus: [1]
micro_batch_size: $MICROS
grad_accum_steps: [1]
precision: $PRECISIONS
checkpointing: [none, full]
zero_stage: [0, 1, 3]
offload: [none]
tp_degree: [1]
EOF
cat > "$OUT_DIR/spec.yaml" <<EOF
workload: {kind: gpt, preset: $PRESET}
seq_len: $SEQ_LEN
batch: {global_batch_samples: $GLOBAL_BATCH}
target: {tokens: 1.0e9}
space: $OUT_DIR/space.yaml
trial: {warmup_steps: $WARMUP, measure_steps: $MEASURE, max_measure_steps: $MAX_MEASURE, timeout_s: $TIMEOUT_S}
budget: {trials: $TRIALS}
EOF
rm -rf "$OUT_DIR/runs" "$OUT_DIR/extra" "$OUT_DIR/study.db"
STORAGE="sqlite:///$OUT_DIR/study.db"
echo "gpu_check: sweep of $TRIALS trials, preset $PRESET, into $OUT_DIR"
"${AUTOTUNE[@]}" sweep "$OUT_DIR/spec.yaml" --trials "$TRIALS" --storage "$STORAGE" \
  --study gpu_check --runs-dir "$OUT_DIR/runs" 2>&1 | tee "$OUT_DIR/sweep.log" \
  || echo "gpu_check: the sweep exited non-zero (see sweep.log); the summary reports what ran" >&2
"${AUTOTUNE[@]}" report --study gpu_check --storage "$STORAGE" > "$OUT_DIR/report.txt" 2>&1 || true
"${AUTOTUNE[@]}" report --study gpu_check --storage "$STORAGE" --json > "$OUT_DIR/report.json" 2>/dev/null || true

# --- direct trials: what the sweep may not offer on this machine ----------------------------
# fp8 (the sweep offers it only where it can probe the GPU and torchao), ZeRO 1 / 3 (offered
# once the space's capabilities include them) and FSDP2 (MixedPrecisionPolicy and
# CPUOffloadPolicy on CUDA: GPU-only paths), each as one trial outside the study.
# An item is precision:zero_stage[:fsdp[:offload]].
EXTRA=("bf16:1" "bf16:3" "bf16:0:full_shard" "bf16:0:full_shard:optimizer+params")
if [[ "$FP8" == 1 ]]; then EXTRA=("fp8:0" "${EXTRA[@]}"); fi
if [[ "$DRY_RUN" == 1 ]]; then EXTRA=("fp32:1" "fp32:0:full_shard"); fi
mkdir -p "$OUT_DIR/extra"
for item in "${EXTRA[@]}"; do
  IFS=: read -r prec zero fsdp offload <<< "$item"
  fsdp="${fsdp:-none}"; offload="${offload:-none}"
  name="${prec}_zero${zero}"
  [[ "$fsdp" != none ]] && name="${prec}_fsdp_${fsdp}"
  [[ "$offload" != none ]] && name="${name}_offload"
  "$PY" - "$OUT_DIR/extra/${name}_config.json" "$PRESET" "$SEQ_LEN" "$WARMUP" "$MEASURE" "$prec" "$zero" "$DRY_RUN" "$TIMEOUT_S" "$fsdp" "$offload" <<'PYEOF'
import sys
from autotune.contract import DeviceKind, GPTWorkload, Launcher, TrialConfig
path, preset, seq_len, warmup, measure, prec, zero, dry, timeout, fsdp, offload = sys.argv[1:12]
TrialConfig(workload=GPTWorkload(preset=preset), seq_len=int(seq_len),
            micro_batch_size=2 if dry == "1" else 16, precision=prec, zero_stage=int(zero),
            fsdp=fsdp, offload=offload,
            launcher=Launcher.deepspeed if int(zero) > 0 else Launcher.torchrun,
            device=DeviceKind.cpu if dry == "1" else DeviceKind.cuda, warmup_steps=int(warmup),
            measure_steps=int(measure), max_measure_steps=int(measure), timeout_s=timeout).write(path)
PYEOF
  "${AUTOTUNE[@]}" trial "$OUT_DIR/extra/${name}_config.json" --out "$OUT_DIR/extra/trial_${name}" \
    > "$OUT_DIR/extra/${name}.txt" 2>&1 || echo "gpu_check: direct trial $name did not succeed (see extra/${name}.txt)" >&2
done

# --- the long rerun: the sweep's fastest config, LONG_STEPS measured steps --------------------
# Short trial vs a longer run of the same config: how far a sweep's short window is from what
# a long run sees (the summary sets the two side by side).
if [[ "$LONG_STEPS" -gt 0 ]]; then
  "$PY" - "$OUT_DIR/runs" "$OUT_DIR/extra/long_config.json" "$LONG_STEPS" <<'PYEOF' \
    && "${AUTOTUNE[@]}" trial "$OUT_DIR/extra/long_config.json" --out "$OUT_DIR/extra/trial_long" \
         > "$OUT_DIR/extra/long.txt" 2>&1 \
    || echo "gpu_check: the long rerun did not succeed (see extra/long.txt)" >&2
import sys
from pathlib import Path
from autotune.contract import TrialConfig, TrialResult
runs, out, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
best = None
for res in runs.rglob("result.json"):
    r = TrialResult.read(res)
    if r.ok and r.tokens_per_s and (best is None or r.tokens_per_s > best[0]):
        best = (r.tokens_per_s, res.parent)
if best is None:
    sys.exit("no successful sweep trial to rerun")
cfg = TrialConfig.read(best[1] / "config.json")
cfg.model_copy(update={"measure_steps": steps, "max_measure_steps": steps,
                       "timeout_s": cfg.timeout_s * 3}).write(out)
print(f"gpu_check: long rerun of {best[1].name} ({best[0]:,.0f} tok/s) with {steps} measured steps")
PYEOF
fi

# --- compile: eager against compiled, fp8+compile against bf16+compile ------------------------
rm -rf "$OUT_DIR/compile"
if [[ "$COMPILE" == 1 ]]; then compile_trials; fi

# --- summary ------------------------------------------------------------------------------
MODE=gpu
if [[ "$DRY_RUN" == 1 ]]; then MODE=dry-run; fi
"$PY" "$ROOT/scripts/gpu_check_summary.py" --runs "$OUT_DIR/runs" --extra "$OUT_DIR/extra" \
  --out "$OUT_DIR" --mode "$MODE" --started "$STARTED"
echo "gpu_check: done in $(( $(date +%s) - STARTED )) s; summary: $OUT_DIR/gpu_check_summary.json"
if [[ "$TRUTH_S" != 0 ]]; then measure_truth; fi
