"""Each launcher path starts real ranks that train together: torchrun (DDP), the DeepSpeed
launcher (DeepSpeed's engine) and accelerate (its Accelerator). One suite runs over every
launcher, as Optuna's tests run over every storage; plus the argv each launcher gets.
"""

from __future__ import annotations

import json

import pytest

from autotune.contract import DeviceKind, Launcher, Precision, TrialConfig, TrialStatus
from autotune.run.argv import WORKER_MODULE, build_argv, launch_env
from tests.fixtures.engine_trials import CONFIGS, engine_trials

LAUNCHERS = [launcher.value for launcher in Launcher]
ENGINE_OF = {"torchrun": "ddp", "deepspeed": "deepspeed", "accelerate": "accelerate"}
LAUNCHER_MODULE = {"torchrun": "torch.distributed.run", "deepspeed": "deepspeed.launcher.runner",
                   "accelerate": "accelerate.commands.launch"}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "engine_trials"


@pytest.fixture(scope="module")
def launched(root):
    return engine_trials(LAUNCHERS, root)


@pytest.fixture(params=LAUNCHERS)
def trial(request, launched, root):
    """(launcher name, its 2-rank trial's result, the trial's folder)."""
    name = request.param
    return name, launched[name], root / name


# --- the shared suite: every launcher ------------------------------------------------------


def test_two_ranks_train_and_report_ok(trial):
    name, r, _ = trial
    assert r.status is TrialStatus.ok, f"{name}: {r.error}\n{r.log_tail}"
    assert r.world_size == 2
    assert r.optimizer_steps == CONFIGS[name].warmup_steps + r.measured_steps
    assert r.tokens_per_s and r.tokens_per_s > 0


def test_started_by_its_own_launcher(trial):
    name, _, folder = trial
    argv = json.loads((folder / "command.json").read_text())["argv"]
    assert argv[1:3] == ["-m", LAUNCHER_MODULE[name]]
    assert argv[argv.index(WORKER_MODULE) - 1] in ("-m", "--module")


def test_runs_the_engine_of_its_launcher(trial):
    name, r, _ = trial
    obs = r.observations
    assert obs["engine"] == ENGINE_OF[name]
    if name == "deepspeed":
        assert obs["zero_stage"] == 0 and obs["dp_world_size"] == 2
    if name == "accelerate":
        # The CPU trap: without ACCELERATE_USE_CPU and the multi-process launcher each rank
        # would be a world of its own.
        assert obs["num_processes"] == 2 and obs["distributed_type"] == "MULTI_CPU"
        assert obs["wrapped_model"] == "DistributedDataParallel"


def test_deepspeed_trials_leave_no_shared_memory_behind(launched, root):
    """DeepSpeed's CPU all-reduce makes a 66 MiB /dev/shm buffer per rank and never unlinks
    it; the launcher removes the trial's once its ranks are gone (autotune.run.launch) and says
    how many it removed in the result's notes."""
    import os
    from pathlib import Path

    r = launched["deepspeed"]
    assert r.status is TrialStatus.ok
    # One buffer per rank was made and removed: the 2 ranks' (were DeepSpeed to make none, or
    # name them otherwise, the launcher would remove none and say nothing).
    assert "removed 2 shared-memory buffers DeepSpeed's CPU all-reduce left in /dev/shm" in r.notes, r.notes
    argv = json.loads((root / "deepspeed" / "command.json").read_text())["argv"]
    port = argv[argv.index("--master_port") + 1]
    assert not list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
    # A DDP trial under torchrun makes none, and its result says nothing of them.
    assert not any("shared-memory" in n for n in launched["torchrun"].notes)


def test_torchrun_leaves_no_run_folders_behind(tmp_path, monkeypatch):
    """torchrun (itself, and under accelerate's multi-process path) makes a folder per run for
    its ranks; without --log-dir it was a new $TMPDIR/torchelastic_* per trial, never removed
    (5,011 on this machine after two days). It goes in the trial's folder, removed after the
    trial, so `autotune trial --out` leaves only its own files."""
    from autotune.contract.trial_files import LAUNCHER_LOGS
    from autotune.run.launch import run_trial
    from tests.fixtures.trials import tiny

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the launchers' tempfile.mkdtemp would go here
    for launcher in (Launcher.torchrun, Launcher.accelerate):
        trial_dir = tmp_path / launcher.value
        r = run_trial(tiny(num_gpus=2, launcher=launcher), trial_dir)
        assert r.status is TrialStatus.ok, (r.error, r.log_tail)
        argv = json.loads((trial_dir / "command.json").read_text())["argv"]
        assert str(trial_dir / LAUNCHER_LOGS) in argv, argv
        assert not (trial_dir / LAUNCHER_LOGS).exists()
    assert [p.name for p in tmp.iterdir() if p.name.startswith("torchelastic_")] == []


def test_every_launcher_trains_the_same_model_the_same_way(launched):
    """Same seed, same tokens, fp32: DDP, DeepSpeed at stage 0 and accelerate all average the
    two ranks' gradients, so they end at the same loss."""
    losses = {name: r.final_loss for name, r in launched.items()}
    assert all(loss is not None for loss in losses.values()), losses
    ref = losses["torchrun"]
    for loss in losses.values():
        assert loss == pytest.approx(ref, rel=1e-4), losses


# --- argv: a list, a free port, no shell --------------------------------------------------


@pytest.mark.parametrize("launcher", list(Launcher))
@pytest.mark.parametrize("num_gpus", [1, 2])
def test_argv_is_a_list_with_the_port_and_the_worker_module(tmp_path, launcher, num_gpus):
    odd = tmp_path / "a b; rm -rf $HOME" / "config.json"  # one argv element, never parsed
    cfg = TrialConfig(num_gpus=num_gpus, launcher=launcher)
    argv = build_argv(cfg, odd, tmp_path / "result.json", port=40123, python="/py")
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert argv[:3] == ["/py", "-m", LAUNCHER_MODULE[launcher.value]]
    assert str(odd) in argv and "29500" not in argv
    assert argv[-5:] == [WORKER_MODULE, "--config", str(odd), "--result", str(tmp_path / "result.json")]
    if num_gpus > 1:
        assert "40123" in argv  # every launcher defaults to 29500: two trials would collide


def test_deepspeed_argv_sets_ranks_per_node():
    argv = build_argv(TrialConfig(num_gpus=2, launcher=Launcher.deepspeed), "c", "r", port=1, python="p")
    # On CPU DeepSpeed would count NUMA nodes as accelerators without --num_gpus.
    assert argv[argv.index("--num_gpus") + 1] == "2"
    assert argv[argv.index("--master_port") + 1] == "1"


def test_accelerate_argv_on_cpu_uses_the_multi_process_path():
    two = build_argv(TrialConfig(num_gpus=2, launcher=Launcher.accelerate), "c", "r", port=7, python="p")
    # --cpu with several processes would start ONE process (accelerate wants mpirun for that).
    assert "--multi_gpu" in two and "--cpu" not in two
    assert two[two.index("--num_processes") + 1] == "2"
    one = build_argv(TrialConfig(num_gpus=1, launcher=Launcher.accelerate), "c", "r", port=7, python="p")
    assert "--cpu" in one and "--multi_gpu" not in one
    gpu = build_argv(TrialConfig(num_gpus=1, launcher=Launcher.accelerate, device=DeviceKind.cuda),
                     "c", "r", port=7, python="p")
    assert "--cpu" not in gpu


@pytest.mark.parametrize("precision,flag", [(Precision.fp32, "no"), (Precision.bf16, "bf16"),
                                            (Precision.fp16, "fp16")])
def test_accelerate_argv_carries_the_precision(precision, flag):
    argv = build_argv(TrialConfig(launcher=Launcher.accelerate, precision=precision), "c", "r",
                      port=7, python="p")
    assert argv[argv.index("--mixed_precision") + 1] == flag


def test_env_selects_the_device_for_deepspeed_and_accelerate():
    cpu = launch_env(TrialConfig())
    assert cpu["DS_ACCELERATOR"] == "cpu" and cpu["ACCELERATE_USE_CPU"] == "true"
    gpu = launch_env(TrialConfig(device=DeviceKind.cuda))
    assert gpu["DS_ACCELERATOR"] == "cuda"


def test_a_log_tail_keeps_the_start_of_a_long_last_traceback(tmp_path):
    """A deep stack under a long venv path runs past the 4,000 characters of a result's log
    tail; the tail then starts at the traceback's header, so it still says what it is."""
    from autotune.run.results import LOG_TAIL_CHARS, log_tail

    frames = "".join(f'  File "/tmp/tmp.abcdefgh/p/.venv/lib/python3.11/site-packages/torch/m{i}.py", '
                     f"line {i}, in f{i}\n    x = f{i + 1}()\n" for i in range(80))
    log = tmp_path / "stderr.log"
    log.write_text("warming up\n" * 3000 + "Traceback (most recent call last):\n" + frames
                   + "RuntimeError: DefaultCPUAllocator: can't allocate memory\n")
    tail = log_tail(log)
    assert len(frames) > LOG_TAIL_CHARS
    assert tail.startswith("Traceback (most recent call last)") and tail.endswith("allocate memory\n")
    short = tmp_path / "short.log"
    short.write_text("warming up\n" * 3000 + "done\n")
    assert log_tail(short) == short.read_text()[-LOG_TAIL_CHARS:]  # no traceback: the plain tail


def test_a_deepspeed_trial_stopped_by_sigterm_leaves_no_ranks_or_shared_memory(tmp_path):
    """`autotune trial` killed (kill, scancel) mid-trial: before, it died at once and the
    launcher's ranks trained on until the watchdog saw it gone, and DeepSpeed's /dev/shm
    buffers (66 MiB a rank) stayed until reboot; Ctrl-C twice in a sweep left the buffers too.
    Now the trial's process group and its buffers end with it, and it exits 143."""
    import os
    import sys
    import time
    from pathlib import Path

    from tests.fixtures.study_tools import processes_under, sigterm_and_wait, started

    cfg = CONFIGS["deepspeed"].model_copy(update={"measure_steps": 100_000, "max_measure_steps": 100_000,
                                                  "timeout_s": 600})
    (tmp_path / "c.json").write_text(cfg.model_dump_json())
    out = tmp_path / "out"
    with started([sys.executable, "-m", "autotune.cli", "trial", "c.json", "--out", str(out)], tmp_path) as p:
        deadline = time.monotonic() + 180
        buffers: list[Path] = []
        while len(buffers) < 2:  # both ranks have made theirs: DeepSpeed's all-reduce is up
            assert time.monotonic() < deadline and p.poll() is None, "the trial did not start"
            time.sleep(0.3)
            if (out / "command.json").is_file():
                argv = json.loads((out / "command.json").read_text())["argv"]
                port = argv[argv.index("--master_port") + 1]
                buffers = list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
        assert processes_under(out)
        text = sigterm_and_wait(p)
    assert p.returncode == 143, text
    assert "stopped by SIGTERM" in text
    assert [b for b in buffers if b.exists()] == []
    assert processes_under(out) == []
