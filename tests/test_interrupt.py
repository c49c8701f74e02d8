"""SIGTERM in a sweep's process (autotune.search.interrupt): raised once as Terminated, which
every `except KeyboardInterrupt` cleanup handles; a second SIGTERM does not cut that cleanup.
Each case runs in its own Python process: the signal and the process-wide flag are real."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from autotune.search.interrupt import EXIT_TERMINATED

PROGRAM = textwrap.dedent("""
    import os, signal, time
    from autotune.search.interrupt import Terminated, sigterm_raises, terminating

    before = signal.getsignal(signal.SIGTERM)
    with sigterm_raises():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("not raised")
        except KeyboardInterrupt as exc:  # the cleanup a second Ctrl-C runs
            print("raised", type(exc).__name__, terminating())
            os.kill(os.getpid(), signal.SIGTERM)  # during the cleanup: ignored
            time.sleep(0.2)
            print("cleanup finished")
    print("restored", signal.getsignal(signal.SIGTERM) is before)
    os.kill(os.getpid(), signal.SIGTERM)  # outside: Python's default, the process ends
    time.sleep(5)
    print("survived")
""")


def test_sigterm_raises_once_then_the_default_is_back():
    p = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert p.stdout.splitlines() == ["raised Terminated True", "cleanup finished", "restored True"], p.stderr
    assert p.returncode == -15  # the default handler: killed by the signal
    assert EXIT_TERMINATED == 143  # what a shell reports for it, and what the CLI exits with
