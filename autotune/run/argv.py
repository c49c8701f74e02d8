"""The launcher's command for a trial, as an argv list (never a shell string), and the
environment its ranks get.

    port = free_port()
    argv = build_argv(cfg, files.config, files.result, port)   # torchrun / deepspeed / accelerate
    env = launch_env(cfg)
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from autotune.contract import ACCELERATE_MIXED_PRECISION, DeviceKind, Launcher, TrialConfig
from autotune.contract.process import CONTROLLER_ENV, controller_env_value
from autotune.contract.rank_env import cpu_rank_env
from autotune.contract.trial_files import TrialFiles

WORKER_MODULE = "trials.worker"


def launcher_log_dir(result_path: Path) -> str:
    """Where torchrun (itself, or under accelerate) keeps a trial's per-rank folders (and a
    failed rank's error.json): beside the trial's result (TrialFiles.launcher_logs)."""
    return str(TrialFiles(Path(result_path).parent).launcher_logs)


def free_port() -> int:
    """A TCP port free right now on loopback. Every launcher defaults to 29500, so two
    trials (or two sweeps) on one machine would collide without this."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_argv(cfg: TrialConfig, config_path: Path, result_path: Path, port: int,
               python: str = sys.executable) -> list[str]:
    """The launcher command for a trial, as an argv list (never a shell string)."""
    worker_args = ["--config", str(config_path), "--result", str(result_path)]
    n = str(cfg.num_gpus)
    if cfg.launcher is Launcher.torchrun:
        return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", n,
                "--master-addr", "127.0.0.1", "--master-port", str(port),
                "--log-dir", launcher_log_dir(result_path), "-m", WORKER_MODULE, *worker_args]
    if cfg.launcher is Launcher.deepspeed:
        # --num_gpus (alias --num_accelerators) sets the ranks per node: on CPU DeepSpeed would
        # otherwise count NUMA nodes as its "accelerators". --module runs the worker as
        # `python -m`, like torchrun; DeepSpeed adds --local_rank, which the worker accepts.
        return [python, "-m", "deepspeed.launcher.runner", "--num_nodes", "1", "--num_gpus", n,
                "--master_addr", "127.0.0.1", "--master_port", str(port),
                "--module", WORKER_MODULE, *worker_args]
    if cfg.launcher is Launcher.accelerate:
        argv = [python, "-m", "accelerate.commands.launch", "--num_processes", n,
                "--num_machines", "1", "--mixed_precision", ACCELERATE_MIXED_PRECISION[cfg.precision],
                "--dynamo_backend", "inductor" if cfg.compile else "no",
                "--num_cpu_threads_per_process", str(cfg.threads_per_rank)]
        if cfg.num_gpus > 1:
            # Several ranks: accelerate's torchrun path. Not --cpu, even on CPU: with --cpu
            # accelerate starts ONE process unless mpirun is set up; ACCELERATE_USE_CPU=true
            # in the environment (launch_env) makes those ranks gloo CPU ranks instead.
            argv += ["--multi_gpu", "--main_process_ip", "127.0.0.1",
                     "--main_process_port", str(port), "--log_dir", launcher_log_dir(result_path)]
        elif cfg.device is DeviceKind.cpu:
            argv.append("--cpu")
        return [*argv, "--module", WORKER_MODULE, *worker_args]
    raise ValueError(f"unknown launcher {cfg.launcher}")


def launch_env(cfg: TrialConfig) -> dict[str, str]:
    # The study's storage URL (and its password) is the controller's business only: trials
    # never open the study, and a launcher that logs its environment must not show it.
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_STORAGE"}
    threads = str(cfg.threads_per_rank)
    # torchrun would otherwise leave every rank free to spawn a thread per core.
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1",
               AUTOTUNE_LAUNCH_TIME=repr(time.time()))
    # The ranks end when this process is gone, however it ends (trials/watchdog.py): they run
    # in a session of their own, so nothing else would stop them.
    env[CONTROLLER_ENV] = controller_env_value()
    if cfg.device is DeviceKind.cpu:
        env.update(cpu_rank_env(cfg.threads_per_rank, os.environ))
        # accelerate under torchrun on CPU runs every rank alone without this.
        env["ACCELERATE_USE_CPU"] = "true"
    # DeepSpeed otherwise probes for an accelerator in every process (and logs a warning on CPU).
    env["DS_ACCELERATOR"] = cfg.device.value
    # The worker must import `trials` and `autotune.contract` from this checkout.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
