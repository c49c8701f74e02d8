#!/usr/bin/env bash
# The wheel files a GPU machine without a package index needs to run autotune (gpu_check.sh
# --wheels DIR): the packages of autotune's install that such a machine's image lacks, at the
# versions this checkout's .venv runs, for its Python and platform. Run it here, where pip
# reaches PyPI; carry the folder to the GPU machine.
#
#   scripts/gpu_wheels.sh                 # into .whl/ (ignored by git), for CPython 3.12 x86_64
#   scripts/gpu_wheels.sh --out DIR --python-version 3.11
#
# Which packages: the ones the lent H200 image lacks (its package list: optuna, pydantic and
# DeepSpeed are not there; torch, accelerate, typer, rich, PyYAML, psutil, nvidia-ml-py,
# numpy, einops, msgpack, ninja and py-cpuinfo are), and torchao 0.17 for fp8 (the version
# the H200 check ran, docs/benchmarks.md). DeepSpeed publishes no wheel: it is built here from
# its source, without its C++/CUDA ops (those build on the GPU machine when a trial needs them).
# Then, on the GPU machine: scripts/gpu_check.sh --python python3 --wheels .whl
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="$ROOT/.whl"
PYVER="3.12"
VENV_PY="$ROOT/.venv/bin/python"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift ;;
    --python-version) PYVER="$2"; shift ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_wheels: unknown option '$1'. To fix: see --help." >&2; exit 2 ;;
  esac
  shift
done
[[ "$PYVER" =~ ^3\.[0-9]+$ ]] || { echo "gpu_wheels: --python-version takes 3.N, got '$PYVER'." >&2; exit 2; }
[[ -x "$VENV_PY" ]] || { echo "gpu_wheels: no $VENV_PY: the versions come from this checkout's venv. To fix: create it as the README says." >&2; exit 2; }

# Pure-Python and binary packages, pinned to what .venv runs (pydantic-core must match pydantic).
PACKAGES=(optuna alembic sqlalchemy mako colorlog pydantic pydantic-core annotated-types
          typing-inspection hjson)
pins=()
for name in "${PACKAGES[@]}"; do
  version="$("$VENV_PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")"
  pins+=("$name==$version")
done
mkdir -p "$OUT_DIR"
tags=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$VENV_PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${tags[@]}" -d "$OUT_DIR" "${pins[@]}" "torchao==0.17.0"
# DeepSpeed: its source built into a wheel with no ops compiled (DS_BUILD_OPS=0, the default).
ds_version="$("$VENV_PY" -c "import importlib.metadata as m; print(m.version('deepspeed'))")"
if ! ls "$OUT_DIR"/deepspeed-"$ds_version"-*.whl >/dev/null 2>&1; then
  "$VENV_PY" -m pip wheel --quiet --no-deps --no-build-isolation -w "$OUT_DIR" "deepspeed==$ds_version"
fi
ls -1 "$OUT_DIR"
du -sh "$OUT_DIR"
