"""Start one launcher agent per node of a multi-node trial and wait for all of them.

    python -m autotune.run.nodes trial_dir/nodes.json     # {"argvs": [[...node 0...], [...node 1...]]}

Written by `autotune.run.launch.template_argv_builder` when the spec's `launcher.per_node` is set
(e.g. `argv: [ssh, "{host}", "{launcher_argv_shell}"]`: ssh hands its arguments to the remote
shell as one string, so the launcher argv goes shell-quoted; or the agents of a two-"node" test on one
machine). The agents stay in this process's group, so the controller's timeout or Ctrl-C kills
them all. The first agent that fails takes the others down, as torchrun does for ranks.
Exit code: 0 if every agent succeeded, else the first failure's code (128 + signal).

This poller is for machines no scheduler starts. On Slurm the cluster's own launcher starts the
nodes instead: `argv: [srun, "--nodes={num_nodes}", "--ntasks={num_nodes}",
--ntasks-per-node=1, --kill-on-bad-exit=1, "{launcher_argv}"]` without `per_node`: srun starts
one torchrun agent per node, the agents meet at a c10d rendezvous, and the controller's timeout
stops srun, which stops the agents on every node (tests/test_slurm.py runs both on a real Slurm).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

POLL_S = 0.2
GRACE_S = 5.0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m autotune.run.nodes NODES_JSON", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        node_argvs = json.load(f)["argvs"]
    procs = [subprocess.Popen(a, stdin=subprocess.DEVNULL) for a in node_argvs]

    def on_term(signum, _frame) -> None:  # the controller's timeout: pass it on, then leave
        _stop(procs)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            _stop(procs)
            code = failed[0]
            return 128 - code if code < 0 else code
        if all(c == 0 for c in codes):
            return 0
        time.sleep(POLL_S)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every agent still running, SIGKILL what is left after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
