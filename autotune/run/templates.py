"""Trials larger than one machine, and trials a cluster scheduler starts: the spec's argv
template (`launcher.argv`), filled field by field, and the torchrun agent each node runs.

    build = template_argv_builder(["srun", "-N", "{num_nodes}", "{launcher_argv}"])
    result = run_trial(cfg, trial_dir, argv_builder=build)
"""

from __future__ import annotations

import re
import shlex
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from autotune.contract import TrialConfig, write_json_atomic
from autotune.contract.trial_files import TrialFiles
from autotune.run.argv import WORKER_MODULE, build_argv, launcher_log_dir

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


def fill_template(template: list[str], fields: Mapping[str, object], launcher_argv: list[str]) -> list[str]:
    """Fill an argv template field by field: no shell ever sees it, so a value with spaces or
    quotes stays one argument and cannot inject another."""
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
            "--log-dir", launcher_log_dir(result_path),
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
        nodes_file = TrialFiles(trial_dir).nodes
        write_json_atomic(nodes_file, {"argvs": per_node_argvs})
        return [python, "-m", "autotune.run.nodes", str(nodes_file)]

    return build
