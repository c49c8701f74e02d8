"""SIGTERM and SIGHUP in a sweep's process (autotune.search.interrupt): raised once as
Terminated, which every `except KeyboardInterrupt` cleanup handles; a second signal does not cut
that cleanup; SIGHUP stays ignored where the process started with it ignored (nohup). Each case
runs in its own Python process: the signals and the process-wide flag are real."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.fixtures.study_tools import sighup_as_at_login

PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    from autotune.search.interrupt import Terminated, terminated_exit_code, termination_raises, terminating

    sig = signal.Signals[sys.argv[1]]
    before = signal.getsignal(sig)
    with termination_raises():
        try:
            os.kill(os.getpid(), sig)
            time.sleep(1)
            print("not raised")
        except KeyboardInterrupt as exc:  # the cleanup a second Ctrl-C runs
            print("raised", type(exc).__name__, exc.signum.name, terminating(), terminated_exit_code())
            os.kill(os.getpid(), sig)  # during the cleanup: ignored
            time.sleep(0.2)
            print("cleanup finished")
    print("restored", signal.getsignal(sig) is before)
    os.kill(os.getpid(), sig)  # outside: the handler from before, here Python's default
    time.sleep(1)
    print("survived")
""")


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_the_signal_raises_once_then_the_handler_from_before_is_back(sig, code):
    p = subprocess.run([sys.executable, "-c", PROGRAM, sig.name], capture_output=True, text=True, timeout=60,
                       preexec_fn=sighup_as_at_login)  # the test itself may run under nohup
    assert p.stdout.splitlines() == [f"raised Terminated {sig.name} True {code}", "cleanup finished",
                                     "restored True"], p.stderr
    assert p.returncode == -sig  # the default handler: killed by the signal
    # A shell reports 128 + the signal for a process it ended; the CLI exits with the same.


def test_sighup_ignored_at_start_stays_ignored():
    """nohup starts its command with SIGHUP ignored: the user asked the sweep to outlive its
    terminal, so the block leaves it so, and the process goes on."""
    p = subprocess.run([sys.executable, "-c", PROGRAM, "SIGHUP"], capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert p.stdout.splitlines() == ["not raised", "restored True", "survived"], p.stderr
    assert p.returncode == 0


READER_LEFT = textwrap.dedent("""
    import os, sys
    from autotune.search.interrupt import output_closed, reader_left

    report = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    read_end, write_end = os.pipe()
    os.close(read_end)               # the reader has left
    os.dup2(write_end, 1)
    if sys.argv[2] == "2>&1":
        os.dup2(write_end, 2)        # stderr on the same pipe
    before = output_closed()
    reader_left(1)
    null = os.stat(os.devnull)
    on_null = [os.path.samestat(os.fstat(fd), null) for fd in (1, 2)]
    os.write(report, f"{before} {output_closed()} {on_null}".encode())
""")


@pytest.mark.parametrize("stderr,expected", [("2>&1", "False True [True, True]"),
                                             ("apart", "False True [True, False]")])
def test_a_reader_gone_sends_the_streams_on_its_pipe_to_devnull(tmp_path, stderr, expected):
    """`| head` (stdout alone) or `2>&1 | head` (both on the pipe): every stream on the pipe
    whose reader left writes to /dev/null from then on, so that no later line (an Optuna
    warning on stderr) fails; a stream elsewhere (the terminal) keeps its output."""
    out = tmp_path / "report.txt"
    p = subprocess.run([sys.executable, "-c", READER_LEFT, str(out), stderr], stderr=subprocess.PIPE,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert out.read_text() == expected
