"""Launch one trial: TrialConfig in a folder -> launcher argv -> process group -> TrialResult.

    result = run_trial(cfg, trial_dir)            # never raises for a failed trial
    runner = launcher_runner(argv_builder)        # a TrialRunner: what a sweep runs trials with

Each trial gets a folder holding config.json, command.json (the exact argv), stdout.log and
stderr.log, and result.json written atomically by rank 0 of the worker. How a trial ended is
read from that file and the exit code, never by grepping logs. The launcher runs in its own
process group, which is killed whole on timeout, so no rank survives its trial.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Protocol

from autotune.contract import (
    ACCELERATE_MIXED_PRECISION,
    DeviceKind,
    Launcher,
    TrialConfig,
    TrialResult,
    TrialStatus,
    write_json_atomic,
)
from autotune.contract.rank_env import cpu_rank_env
from autotune.run.shm import remove_deepspeed_shm

WORKER_MODULE = "trials.worker"
LOG_TAIL_CHARS = 4000
# What a trial's ranks write beside config.json: result.json, result.rankN.json, fatal.rankN.log.
_OWN_OUTPUT = re.compile(r"result(\.rank\d+)?\.json|fatal\.rank\d+\.log")
KILL_GRACE_S = 5.0


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
                "-m", WORKER_MODULE, *worker_args]
    if cfg.launcher is Launcher.deepspeed:
        # --num_gpus (alias --num_accelerators) sets the ranks per node: on CPU DeepSpeed would
        # otherwise count NUMA nodes as its "accelerators". --module runs the worker as
        # `python -m`, like torchrun; DeepSpeed adds --local_rank, which the worker accepts.
        return [python, "-m", "deepspeed.launcher.runner", "--num_nodes", "1", "--num_gpus", n,
                "--master_addr", "127.0.0.1", "--master_port", str(port),
                "--module", WORKER_MODULE, *worker_args]
    if cfg.launcher is Launcher.accelerate:
        argv = [python, "-m", "accelerate.commands.launch", "--num_processes", n, "--num_machines", "1",
                "--mixed_precision", ACCELERATE_MIXED_PRECISION[cfg.precision], "--dynamo_backend",
                "inductor" if cfg.compile else "no", "--num_cpu_threads_per_process", str(cfg.threads_per_rank)]
        if cfg.num_gpus > 1:
            # Several ranks: accelerate's torchrun path. Not --cpu, even on CPU: with --cpu
            # accelerate starts ONE process unless mpirun is set up; ACCELERATE_USE_CPU=true
            # in the environment (launch_env) makes those ranks gloo CPU ranks instead.
            argv += ["--multi_gpu", "--main_process_ip", "127.0.0.1",
                     "--main_process_port", str(port)]
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


TRACEBACK_LOOKBACK_CHARS = 4 * LOG_TAIL_CHARS


def _tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    """The last `chars` of a log, or from its last traceback's header when that began within
    TRACEBACK_LOOKBACK_CHARS of the end (deep stacks under long venv paths run past `chars`)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max(chars, TRACEBACK_LOOKBACK_CHARS)))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    tail = text[-chars:]
    header = "Traceback (most recent call last)"
    if header not in tail and header in text:
        return text[text.rindex(header):]
    return tail


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the whole process group, then SIGKILL whatever is left after a grace period."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        proc.poll()  # reap the launcher, so a zombie does not count as alive
        if not group_alive(proc.pid):
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def run_trial(cfg: TrialConfig, trial_dir: str | Path, python: str = sys.executable,
              on_start=None, argv_builder=None) -> TrialResult:
    """Run one trial to its end and return its result; a failed trial is a result too."""
    trial_dir = Path(trial_dir).resolve()  # the launcher runs with the trial folder as cwd
    trial_dir.mkdir(parents=True, exist_ok=True)
    config_path, result_path = trial_dir / "config.json", trial_dir / "result.json"
    # A previous run's own outputs in this folder (exactly their names: a user's
    # result_backup.json is not ours to delete).
    for stale in trial_dir.iterdir():
        if _OWN_OUTPUT.fullmatch(stale.name) and stale.is_file():
            stale.unlink()
    cfg.write(config_path)
    # argv_builder: e.g. a cluster scheduler's template (see template_argv_builder below).
    port = free_port()
    argv = (argv_builder or build_argv)(cfg, config_path, result_path, port, python=python)
    write_json_atomic(trial_dir / "command.json", {"argv": argv})
    out_path, err_path = trial_dir / "stdout.log", trial_dir / "stderr.log"
    t0 = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=launch_env(cfg), cwd=trial_dir, start_new_session=True)
        if on_start is not None:
            on_start(proc.pid)
        try:
            rc = proc.wait(timeout=cfg.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            rc = proc.wait()
        except BaseException:  # Ctrl-C or the controller's own death: take the ranks with us
            _kill_group(proc)
            raise
        # Ranks that outlived a launcher that exited by itself must not outlive the trial.
        if group_alive(proc.pid):
            _kill_group(proc)
    remove_deepspeed_shm(port)
    wall_s = time.monotonic() - t0
    result = read_result(result_path, rc, timed_out, err_path, out_path, cfg)
    result.wall_s = wall_s
    result.write(result_path)
    return result


class TrialRunner(Protocol):
    """Runs one trial to its end and returns its result (a failed trial is a result too): the
    only way a sweep measures. `on_start(pid)` is called once the trial's process group
    exists (pid = its leader), so a later sweep can kill what a dead controller left. The
    default is `launcher_runner()`; benchmark replays and tests pass their own."""

    def __call__(self, cfg: TrialConfig, trial_dir: Path,
                 on_start: Callable[[int], None] | None = None) -> TrialResult: ...


def launcher_runner(argv_builder=None, python: str = sys.executable) -> TrialRunner:
    """The TrialRunner that launches real trials (`run_trial`), through `argv_builder` when
    given (a cluster template: `template_argv_builder`)."""

    def run(cfg: TrialConfig, trial_dir: Path, on_start: Callable[[int], None] | None = None) -> TrialResult:
        return run_trial(cfg, trial_dir, python=python, on_start=on_start, argv_builder=argv_builder)

    return run


def read_result(result_path: Path, rc: int, timed_out: bool, err_path: Path, out_path: Path,
                cfg: TrialConfig) -> TrialResult:
    """Classify how a trial ended from the result files and the exit code."""
    tail = (_tail(err_path) + "\n" + _tail(out_path, 1000)).strip()
    if timed_out:
        return TrialResult(status=TrialStatus.timeout, world_size=cfg.num_gpus,
                           error=f"trial exceeded timeout_s={cfg.timeout_s:g}; process group killed",
                           log_tail=tail)
    results: list[TrialResult] = []
    unreadable: TrialResult | None = None
    for path in [result_path] + sorted(result_path.parent.glob(result_path.stem + ".rank*.json")):
        if path.is_file():
            try:
                results.append(TrialResult.read(path))
            except (ValueError, OSError) as exc:
                unreadable = unreadable or TrialResult(
                    status=TrialStatus.crash, error_type=type(exc).__name__,
                    error=f"unreadable result file {path.name}: {exc}", log_tail=tail)
    if results and result_path.is_file() and results[0].status is TrialStatus.ok:
        result = results[0]
        if rc != 0:
            result.notes.append(f"launcher exited {rc} after rank 0 wrote an ok result")
        return result
    failures = [r for r in results if r.status is not TrialStatus.ok] + _fatal_signals(result_path.parent)
    if failures:
        # When one rank fails, its peers fail after it (a closed connection, a kill): the
        # cause is a specific failure (oom, nan, unsupported) before any crash, else the earliest.
        failures.sort(key=lambda r: (r.status is TrialStatus.crash,
                                     r.observations.get("failed_at_unix_s", float("inf"))))
        result = failures[0]
        for other in failures[1:]:
            result.notes.append(f"then rank {other.observations.get('rank', '?')}: "
                                f"{other.status.value} {other.error_type or ''}".rstrip())
        if not result.log_tail:
            result.log_tail = tail
        return result
    if unreadable is not None:
        return unreadable
    reason = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
    return TrialResult(status=TrialStatus.crash, world_size=cfg.num_gpus, error_type="NoResult",
                       error=f"worker ended ({reason}) without writing a result", log_tail=tail)


def _fatal_signals(trial_dir: Path) -> list[TrialResult]:
    """Ranks killed by a fatal signal (SIGSEGV, SIGABRT, ...): the worker's faulthandler wrote
    their stack to fatal.rankN.log, which is empty for every rank that did not die that way."""
    out = []
    for path in sorted(trial_dir.glob("fatal.rank*.log")):
        text = path.read_text(errors="replace") if path.stat().st_size else ""
        if not text.strip():
            continue
        rank = path.name.removeprefix("fatal.rank").removesuffix(".log")
        first = text.strip().splitlines()[0]  # e.g. "Fatal Python error: Segmentation fault"
        out.append(TrialResult(status=TrialStatus.crash, error_type="FatalSignal",
                               error=f"rank {rank} died: {first}", log_tail=text[-LOG_TAIL_CHARS:],
                               observations={"rank": int(rank) if rank.isdigit() else rank,
                                             "failed_at_unix_s": path.stat().st_mtime}))
    return out


def config_from_json(text: str) -> TrialConfig:
    return TrialConfig.model_validate(json.loads(text))


# ---------------------------------------------------------------------------------------
# Trials larger than one machine, and trials a cluster scheduler starts
# ---------------------------------------------------------------------------------------

# Fields an argv template (the spec's `launcher.argv`) may use, each as `{name}` inside an
# element. "{launcher_argv}" must be a whole element: it becomes the node launcher's argv.
# "{launcher_argv_shell}" is that argv as ONE shell-quoted string, for a program that hands
# its arguments to a remote shell: ssh joins them with spaces and the remote shell splits them
# again, so a trial path with a space or ';' would break apart (or run as a command).
TEMPLATE_FIELDS = ("launcher_argv", "launcher_argv_shell", "num_nodes", "gpus_per_node", "world_size", "node_rank",
                   "host", "rdzv_host", "rdzv_port", "rdzv_endpoint", "rdzv_id", "trial_dir",
                   "config", "result", "python", "job_name")
_FIELD = re.compile(r"\{(\w+)\}")


def template_fields(argv: list[str]) -> set[str]:
    return {m.group(1) for el in argv for m in _FIELD.finditer(el)}


def fill_template(template: list[str], fields: dict[str, str], launcher_argv: list[str]) -> list[str]:
    """Fill an argv template field by field: no shell ever sees it, so a value with spaces or
    quotes stays one argument and cannot inject another."""
    import shlex

    fields = {**fields, "launcher_argv_shell": shlex.join(str(a) for a in launcher_argv)}
    out: list[str] = []
    for el in template:
        if el == "{launcher_argv}":
            out.extend(launcher_argv)
        elif "{launcher_argv}" in el:
            raise ValueError("{launcher_argv} must be a whole element of the argv template")
        else:
            out.append(_FIELD.sub(lambda m: str(fields[m.group(1)]), el))
    return out


# Programs that pass their arguments to a (remote) shell as one joined string.
REMOTE_SHELLS = ("ssh", "rsh", "autossh")


def check_remote_shell_template(argv: list[str]) -> None:
    """ssh re-parses what it is given: the launcher argv must reach it shell-quoted."""
    if argv and Path(argv[0]).name in REMOTE_SHELLS and "{launcher_argv}" in argv:
        raise ValueError(f"{Path(argv[0]).name} joins its arguments into one string that the remote "
                         "shell splits again, so {launcher_argv} would break paths with spaces or "
                         "';' apart; use \"{launcher_argv_shell}\" (the argv shell-quoted), e.g. "
                         "[ssh, \"{host}\", \"{launcher_argv_shell}\"]")


def node_argv(cfg: TrialConfig, config_path: Path, result_path: Path, rdzv_endpoint: str,
              rdzv_id: str, python: str = sys.executable) -> list[str]:
    """The torchrun agent every node of a multi-node trial runs: `cfg.num_gpus` ranks here,
    `cfg.num_nodes` agents meeting at a c10d rendezvous (the agent on the rendezvous host
    serves its store). DeepSpeed and accelerate engines run under it too: they read the
    same RANK / WORLD_SIZE / MASTER_ADDR environment torchrun sets."""
    return [python, "-m", "torch.distributed.run", "--nnodes", str(cfg.num_nodes),
            "--nproc-per-node", str(cfg.num_gpus), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", rdzv_endpoint, "--rdzv-id", rdzv_id,
            "-m", WORKER_MODULE, "--config", str(config_path), "--result", str(result_path)]


def template_argv_builder(template: list[str] | None, per_node: bool = False,
                          hosts: list[str] | None = None, rdzv_host: str | None = None,
                          job_name: str = "autotune-trial"):
    """An `argv_builder` for `run_trial` that starts a trial through a template.

    One node without a template: the ordinary launcher (`build_argv`). Several nodes: every
    node runs `node_argv`; with `per_node` the controller starts the template once per node
    (through `python -m autotune.run.nodes`, in the trial's process group, so a timeout or Ctrl-C
    still kills every agent it started), otherwise once (a scheduler such as `srun` fans out).
    A multi-node trial's folder must be on a filesystem every node sees (rank 0 writes
    result.json there)."""
    hosts = list(hosts or [])

    def build(cfg: TrialConfig, config_path: Path, result_path: Path, port: int,
              python: str = sys.executable) -> list[str]:
        trial_dir = config_path.parent
        host = rdzv_host or (hosts[0] if hosts else socket.gethostname())
        rdzv_id = f"{job_name}-{port}"
        fields = dict(num_nodes=cfg.num_nodes, gpus_per_node=cfg.num_gpus,
                      world_size=cfg.num_gpus * cfg.num_nodes, node_rank=0,
                      host=hosts[0] if hosts else host, rdzv_host=host, rdzv_port=port,
                      rdzv_endpoint=f"{host}:{port}", rdzv_id=rdzv_id, trial_dir=trial_dir,
                      config=config_path, result=result_path, python=python, job_name=job_name)
        if cfg.num_nodes == 1:
            inner = build_argv(cfg, config_path, result_path, port, python=python)
            return fill_template(template, fields, inner) if template else inner
        if not template:
            raise ValueError("a multi-node trial needs an argv template (spec `launcher.argv`)")
        inner = node_argv(cfg, config_path, result_path, f"{host}:{port}", rdzv_id, python)
        if not per_node:
            return fill_template(template, fields, inner)
        per_node_argvs = [
            fill_template(template, {**fields, "node_rank": r,
                                     "host": hosts[r] if r < len(hosts) else host}, inner)
            for r in range(cfg.num_nodes)]
        nodes_file = trial_dir / "nodes.json"
        write_json_atomic(nodes_file, {"argvs": per_node_argvs})
        return [python, "-m", "autotune.run.nodes", str(nodes_file)]

    return build


def prebuild_deepspeed_ops(device: DeviceKind, offload: bool = True,
                          timeout_s: float = 3600.0) -> tuple[bool, str]:
    """Build DeepSpeed's JIT ops once, in a subprocess, before any DeepSpeed trial: built
    inside a trial, the compile (minutes on a small CPU machine) would count against the
    trial's timeout. About 5 s when already cached. `offload=False` skips the ops only
optimizer offload loads. Returns (ok, what it printed)."""
    env = launch_env(TrialConfig(device=device))
    env["DS_ACCELERATOR"] = "cuda" if device is DeviceKind.cuda else "cpu"
    try:
        argv = [sys.executable, "-m", "trials.prebuild", *([] if offload else ["--no-offload"])]
        p = subprocess.run(argv, env=env, capture_output=True,
                           text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout_s:.0f} s"
    return p.returncode == 0, (p.stdout + p.stderr).strip()[-2000:]
