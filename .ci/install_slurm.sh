#!/bin/bash
# Debian's Slurm (slurm-wlm: slurmctld, slurmd, sbatch, squeue, scancel) and munge, for the
# real Slurm tests (tests/test_slurm.py starts its own one-node cluster with tests/slurm.py;
# nothing is started here). Needs root; run once per CI machine, from .ci/run.
set -euo pipefail
if command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends slurm-wlm munge
