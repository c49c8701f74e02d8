"""Inside a Slurm job, a CPU sweep measures on the CPUs the job was given. Where Slurm does not
pin a job to its CPUs (task/none, no cgroup: the project's own test cluster, tests/slurm.py),
the affinity mask is the whole node: two 1-CPU jobs on a 2-core node each ran 2-rank trials
on the same 2 cores, and measured a third of a lone job's tokens/s (cluster audit, 2026-12-05).

The environment here is what sbatch sets in a job (SLURM_JOB_ID, SLURM_CPUS_ON_NODE,
SLURM_CPUS_PER_TASK); no Slurm cluster is needed to read it.
"""

from __future__ import annotations

import os

import pytest

from autotune.contract.hardware import usable_cpu_count


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_a_jobs_cpus_cap_the_usable_cores():
    cores = _affinity()
    assert usable_cpu_count({}) == cores  # outside a job: the affinity mask
    assert usable_cpu_count({"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "1"}) == 1
    assert usable_cpu_count({"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": str(cores + 4),
                             "SLURM_CPUS_PER_TASK": "1"}) == 1
    # More than the mask allows, or unreadable: the mask stands.
    assert usable_cpu_count({"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": str(cores + 4)}) == cores
    assert usable_cpu_count({"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "2(x3)"}) == cores
    # Not in a job (a variable left in a login shell): ignored.
    assert usable_cpu_count({"SLURM_CPUS_ON_NODE": "1"}) == cores


@pytest.mark.e2e
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to see the cap")
def test_a_sweep_in_a_one_cpu_job_runs_one_rank(run_cli, tmp_path):
    env = {"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "1"}
    p = run_cli("sweep", "--trials", "1", "--study", "job", env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 more on cpu" in p.stdout and " x1\n" in p.stdout, p.stdout
    assert "  trial   0  ok" in p.stdout and "1x mb" in p.stdout, p.stdout
