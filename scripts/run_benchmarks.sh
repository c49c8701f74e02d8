#!/usr/bin/env bash
# Regenerate docs/benchmarks.md with one command: search (pick accuracy on three spaces,
# replayed from the committed ground truths in benchmarks/results/truth_*.json; the noise
# analysis and the side by side with DeepSpeed's autotuner from their committed raw runs),
# trial overhead and fidelity on this machine (about 25 minutes on an idle 2-core machine).
# Measuring a ground truth again, with the sweep's worker pool on an otherwise idle machine:
# `scripts/bench_search.py --bench ds --measure --repeats 16` (~25 min per 8 rounds added), `--bench big --measure
# --repeats 3` (~1 h; runs are added to the committed truths), `--bench mem --measure --repeats 6` (GPT small,
# 12 configs, ~6 min per round added), `--bench gpt390 --measure --repeats 6` (the 389.5M GPT, ~15 min per round added); every space under memory limits: ONLY=search_matrix, its held-out cells on resampled truths: ONLY=resample, the headroom rule's constants on every cell: ONLY=headroom, the race's block size on every cell: ONLY=race_block, and the pick's projected tokens/s on every cell: ONLY=level; the side by side with DeepSpeed's
# tuner runs on request (~30 min):
# ONLY=deepspeed_tuner; so do the interleaved noise pairs (ONLY=noise) and the noise levers
# (ONLY=noise_levers).
#
#   scripts/run_benchmarks.sh                   # the full run
#   SMOKE=1 scripts/run_benchmarks.sh           # tiny settings, minutes; labelled a smoke run
#   BENCH_SEARCH_ARGS="--seeds 50" BENCH_OVERHEAD_ARGS="--repeats 5" \
#     BENCH_FIDELITY_ARGS="--long-factor 10" scripts/run_benchmarks.sh
#   ONLY="search overhead" scripts/run_benchmarks.sh   # a subset (others keep their last section)
#   ONLY=none scripts/run_benchmarks.sh                # only reassemble the document from the sections
#
# Every script takes --runner where it runs trials (benchmarks/results keep the runner and the
# seconds of every run), so that a cheaper runner (a worker pool) can be measured the same way.
#
# Each script also writes its raw figures to benchmarks/results/<name>.json. A GPU check
# report copied to benchmarks/gpu_check_report.md (from scripts/gpu_check.sh) is included.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
SMOKE="${SMOKE:-0}"
ONLY="${ONLY:-search overhead fidelity}"
RESULTS="$ROOT/benchmarks/results"
SECTIONS="$ROOT/benchmarks/sections"
DOC="$ROOT/docs/benchmarks.md"
mkdir -p "$RESULTS" "$SECTIONS" "$ROOT/docs"

# Word splitting of the *_ARGS variables is intended: they hold extra flags.
read -r -a SEARCH_ARGS <<< "${BENCH_SEARCH_ARGS:-}"
read -r -a DS_TUNER_ARGS <<< "${BENCH_DS_TUNER_ARGS:---repeats 2}"
read -r -a NOISE_ARGS <<< "${BENCH_NOISE_ARGS:---pairs 12}"
# noise_levers (scripts/bench_noise_levers.py, ~8 min: longer windows, huge pages) runs on request
read -r -a NOISE_LEVERS_ARGS <<< "${BENCH_NOISE_LEVERS_ARGS:---rounds 8}"
read -r -a OVERHEAD_ARGS <<< "${BENCH_OVERHEAD_ARGS:-}"
read -r -a FIDELITY_ARGS <<< "${BENCH_FIDELITY_ARGS:-}"
# memory (scripts/bench_memory.py, ~30 min) runs on request: ONLY="memory" scripts/run_benchmarks.sh
read -r -a MEMORY_ARGS <<< "${BENCH_MEMORY_ARGS:---runs ${TMPDIR:-/tmp}/autotune_bench_memory_runs}"
# scale (scripts/bench_scale.py, ~30 min, up to ~20 GB of RAM) runs on request: ONLY="scale" ...
read -r -a SCALE_ARGS <<< "${BENCH_SCALE_ARGS:-}"
# pool (scripts/bench_pool.py, ~8 min: pooled vs fresh-launcher trials, issue 15) runs on request: ONLY="pool" ...
read -r -a POOL_ARGS <<< "${BENCH_POOL_ARGS:-}"
if [[ "$SMOKE" == 1 ]]; then
  SEARCH_ARGS=(--seeds 6 "${SEARCH_ARGS[@]}")
  OVERHEAD_ARGS=(--repeats 1 --warmup-steps 1 --measure-steps 2 "${OVERHEAD_ARGS[@]}")
  FIDELITY_ARGS=(--configs "4,1,fp32,none" "8,1,fp32,none" "4,1,fp32,full" --warmup-steps 1
                 --measure-steps 2 --max-measure-steps 2 "${FIDELITY_ARGS[@]}")
  SCALE_ARGS=(--sizes 29M --no-ablations "${SCALE_ARGS[@]}")
  POOL_ARGS=(--rounds 1 --warmup-steps 1 --measure-steps 2 "${POOL_ARGS[@]}")
fi

STARTED="$(date +%s)"
[[ "$ONLY" == none ]] && ONLY=""
run_one() {  # name, script, args...: one script, raw figures and section under its name
  local name="$1" script="$2"; shift 2
  echo "== $script $*"
  local t0; t0="$(date +%s)"
  "$PY" "scripts/$script.py" "$@" --json-out "$RESULTS/$name.json" --md-out "$SECTIONS/$name.md" \
    > "$RESULTS/$name.log" 2>&1 || {
      echo "run_benchmarks: $script failed; see $RESULTS/$name.log" >&2; tail -20 "$RESULTS/$name.log" >&2; exit 1; }
  echo "   done in $(( $(date +%s) - t0 )) s"
}

for name in $ONLY; do
  case "$name" in
    search)  # replays of the committed ground truths (BENCH_SEARCH_ARGS="--measure" tops them up)
      for bench in cpu40 big mem gpt390; do run_one "search_$bench" bench_search --bench "$bench" "${SEARCH_ARGS[@]}"; done
      # ds has 16 rounds: judged in-sample (as cpu40's and big's 3) and on held-out rounds
      run_one search_ds bench_search --bench ds --holdout no "${SEARCH_ARGS[@]}"
      run_one search_ds_heldout bench_search --bench ds --holdout yes "${SEARCH_ARGS[@]}"
      run_one noise bench_noise --analyse-only
      run_one noise_levers bench_noise_levers --analyse-only
      run_one deepspeed_tuner bench_deepspeed_tuner --analyse-only
      "$PY" scripts/bench_search.py --summary "$RESULTS"/search_{big,ds,cpu40,ds_heldout,mem,gpt390}.json --md-out "$SECTIONS/search.md" > /dev/null
      # every space under memory limits, from the committed search_<bench>_limit<Q>.json (ONLY=search_matrix replays them)
      "$PY" scripts/bench_matrix.py --summary-only --json-out "$RESULTS/search_matrix.json" --md-out "$SECTIONS/search_matrix.md" > /dev/null
      "$PY" scripts/bench_resample.py --summary-only --json-out "$RESULTS/resample.json" --md-out "$SECTIONS/resample.md" > /dev/null
      "$PY" scripts/bench_headroom.py --summary-only --json-out "$RESULTS/headroom.json" --md-out "$SECTIONS/headroom.md" > /dev/null
      "$PY" scripts/bench_race_block.py --summary-only --json-out "$RESULTS/race_block.json" --md-out "$SECTIONS/race_block.md" > /dev/null
      "$PY" scripts/bench_level.py --summary-only --json-out "$RESULTS/level.json" --md-out "$SECTIONS/level.md" > /dev/null
      "$PY" scripts/bench_real_limit.py --summary-only > /dev/null ;;
    search_matrix)  # every space at every memory limit (~1 min of CPU per space and limit)
      run_one search_matrix bench_matrix ;;
    resample)  # the held-out matrix cells on resampled truths (~2 min of CPU per cell)
      run_one resample bench_resample ;;
    headroom)  # the headroom rule's constants on every matrix cell (~40 s of CPU per cell)
      run_one headroom bench_headroom ;;
    race_block)  # the race's block size on every matrix cell (~3 min of CPU per cell)
      run_one race_block bench_race_block ;;
    level)  # the pick's projected tokens/s against its truth on every matrix cell (~10 s of CPU per cell)
      run_one level bench_level ;;
    noise) run_one noise bench_noise "${NOISE_ARGS[@]}" ;;
    noise_levers) run_one noise_levers bench_noise_levers "${NOISE_LEVERS_ARGS[@]}" ;;
    deepspeed_tuner) run_one deepspeed_tuner bench_deepspeed_tuner "${DS_TUNER_ARGS[@]}" ;;
    overhead) run_one overhead bench_overhead "${OVERHEAD_ARGS[@]}" ;;
    fidelity) run_one fidelity bench_fidelity "${FIDELITY_ARGS[@]}" ;;
    memory) run_one memory bench_memory "${MEMORY_ARGS[@]}" ;;
    scale) run_one scale bench_scale "${SCALE_ARGS[@]}" ;;
    pool) run_one pool bench_pool "${POOL_ARGS[@]}" ;;
    pool_scale) run_one pool_scale bench_pool_scale ;;  # ~22 min: pooled vs fresh trials of the 389.5M GPT
    real_limit)  # real sweeps under a memory limit (~25 min; the gpt390 truths first: bench_search --bench gpt390 --measure,
      # and the fitting configs in fresh ranks, the sweep's runner, which judges the pick: --measure-only --runner launcher
      # --repeats 8 --configs KEY... (~40 min; scripts/bench_real_limit.py FRESH_TRUTH)
      "$PY" scripts/bench_real_limit.py > "$RESULTS/real_limit.log" 2>&1 || {
        echo "run_benchmarks: bench_real_limit failed; see $RESULTS/real_limit.log" >&2; exit 1; } ;;
    *) echo "run_benchmarks: unknown benchmark '$name'. To fix: ONLY takes search, search_matrix, resample, headroom, race_block, level, real_limit, noise, noise_levers, deepspeed_tuner, overhead, fidelity, memory, scale, pool, pool_scale." >&2; exit 2 ;;
  esac
done

{
  echo "# Benchmarks"
  echo
  echo "Generated by \`scripts/run_benchmarks.sh\` (one command; raw figures in"
  echo "\`benchmarks/results/\`). Each section carries its own date, machine, commit and load."
  if [[ "$SMOKE" == 1 ]]; then
    echo
    echo "**SMOKE RUN**: tiny settings (few steps, a small search space, one repeat), not the"
    echo "benchmark's sizes; figures show that the scripts work, not what the tool achieves."
  fi
  echo
  echo "This invocation's machine: $("$PY" -c 'import sys; sys.path.insert(0, "scripts"); from bench_common import machine_line; from autotune.run.hardware import local_hardware; print(machine_line(local_hardware()))')"
  echo "This invocation ran: ${ONLY:-nothing (document reassembled)} ($(( $(date +%s) - STARTED )) s); other sections are from earlier runs when their dates differ."
  echo
  for name in search search_matrix resample headroom race_block level real_limit search_big search_ds search_ds_heldout search_cpu40 search_mem search_gpt390 fit_priors side_by_side deepspeed_tuner noise noise_levers overhead fidelity memory scale pool pool_scale observations; do
    if [[ -f "$SECTIONS/$name.md" ]]; then cat "$SECTIONS/$name.md"; else echo "## $name: not run yet"; fi
    echo
  done
  echo "## GPU check (\`scripts/gpu_check.sh\`)"
  echo
  if [[ -f "$ROOT/benchmarks/gpu_check_report.md" ]]; then
    cat "$ROOT/benchmarks/gpu_check_report.md"
  else
    echo "Not run on a GPU yet (no GPU machine was available to this project's sessions). The"
    echo "script is ready: on a CUDA machine run \`scripts/gpu_check.sh\` (about 5 minutes on one"
    echo "H200 with 6 sweep trials), then copy its \`gpu_check_report.md\` to"
    echo "\`benchmarks/gpu_check_report.md\` and rerun this script. \`scripts/gpu_check.sh --dry-run\`"
    echo "runs the same pipeline on CPU with the tiny preset."
  fi
  if [[ -f "$ROOT/benchmarks/gpu_check_dryrun_report.md" ]]; then
    echo
    echo "Last \`scripts/gpu_check.sh --dry-run\` (pipeline check on CPU, copied to"
    echo "\`benchmarks/gpu_check_dryrun_report.md\`; no GPU figures):"
    echo
    sed 's/^## /### /' "$ROOT/benchmarks/gpu_check_dryrun_report.md"
  fi
} > "$DOC.tmp"
mv "$DOC.tmp" "$DOC"
echo "wrote $DOC"
