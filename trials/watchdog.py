"""A rank ends when the process that launched its trial is gone. The controller (`autotune
sweep`, `autotune trial`) starts the launcher in a session of its own, so that it can kill a
trial's whole process group; the price is that a controller killed outright (SIGTERM from
`kill`, `timeout` or a job's time limit, SIGKILL, the OOM killer) left the launcher and its
ranks running to the trial's end, holding the cores or the GPU a next sweep would measure on.

    watch_controller()                       # in each rank, first thing (trials/worker.py)
    watch_controller(on_gone=remove_queue)   # a pool's rank 0 (trials/pool.py)

The controller names itself in AUTOTUNE_CONTROLLER (`autotune.run.argv.launch_env`): host, pid
and start time. A rank on another host (a multi-node trial), or one that cannot see that
process when it starts (a container with its own process ids), does not watch; neither does a
rank started without it (an exported launch.sh, a test).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Callable

from autotune.contract.process import CONTROLLER_ENV, parse_controller, process_alive

# How often a rank looks: once a second costs nothing a trial's tokens/s could show, and a
# dead controller's ranks are gone within seconds.
CHECK_EVERY_S = 1.0
# The exit code of a rank whose controller is gone (nobody reads it: its reader is the one gone).
EXIT_CONTROLLER_GONE = 3


def watch_controller(on_gone: Callable[[], None] | None = None) -> bool:
    """Start a daemon thread that ends this process once the controller named in the
    environment is gone; False (nothing watched) where none is named or it runs elsewhere."""
    ref = parse_controller(os.environ.get(CONTROLLER_ENV, ""))
    if ref is None or ref.host != socket.gethostname():
        return False
    if not process_alive(ref.pid, ref.start_ticks):
        # Not seen from here at all: a container of the same host name with its own process
        # ids, where ending would kill a healthy trial (or a controller gone before this rank
        # began: then its launcher, which nobody reads, is all that is left).
        return False
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(CHECK_EVERY_S):
            if not process_alive(ref.pid, ref.start_ticks):
                sys.stderr.write(f"rank {os.environ.get('RANK', '0')}: the controller (pid {ref.pid}) "
                                 "is gone; ending this trial's rank\n")
                sys.stderr.flush()
                if on_gone is not None:
                    on_gone()
                from trials.alive import clear_alive

                clear_alive()  # ended by its own code, not killed: no marker to say otherwise
                os._exit(EXIT_CONTROLLER_GONE)

    threading.Thread(target=watch, name="autotune-controller-watch", daemon=True).start()
    return True
