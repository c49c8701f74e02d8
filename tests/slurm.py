"""A throwaway one-node Slurm cluster on this machine for the Slurm tests (real slurmctld and
slurmd, no mock), as tests/pg.py is a throwaway PostgreSQL.

    with SlurmCluster() as slurm:
        env = slurm.env                   # SLURM_CONF=...: sbatch, squeue, scancel find this cluster
        slurm.wait_idle()

Uses Debian's `slurm-wlm` and `munge` (.ci/install_slurm.sh installs them) and must run as
root (slurmd starts jobs as their user). Everything lives in one temporary folder: its own
munged (own key and socket, so a munged already running is never touched), its own
slurm.conf on free ports, state and logs. One node named after this host with 2 CPUs;
`proctrack/linuxproc` and `task/none` because a container has no cgroup control to give.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")


def missing() -> str | None:
    """Why a Slurm cluster cannot start here, or None."""
    absent = [b for b in BINARIES if shutil.which(b) is None
              and not Path("/usr/sbin", b).is_file()]
    if absent:
        return f"Slurm/munge not installed ({', '.join(absent)}): run .ci/install_slurm.sh"
    if os.geteuid() != 0:
        return "slurmd must run as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    def __init__(self, cpus: int = 2) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="autotune-slurm-"))
        self.root.chmod(0o755)
        self.node = socket.gethostname()
        self.cpus = cpus
        self.conf = self.root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.munged: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm's clients (sbatch, squeue, scancel) to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self) -> "SlurmCluster":
        munge = self.root / "munge"
        munge.mkdir(mode=0o700)  # munged's socket folder must exist before it starts
        key = munge / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        sock = munge / "munge.socket"
        # In the foreground, as this process's child, so that stop() can wait for it: a forked
        # munged writes its seed file as it exits, after the folder was removed, and left
        # /tmp/autotune-slurm-*/munge/munged.seed behind after every Slurm test.
        self.munged = subprocess.Popen(
            [_sbin("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
             f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
             f"--seed-file={munge / 'munged.seed'}"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while not sock.exists():
            if self.munged.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {self.logs()}")
            time.sleep(0.1)
        for d in ("state", "spool"):
            (self.root / d).mkdir()
        self.conf.write_text(self._conf(sock))
        for daemon, extra in (("slurmctld", ["-i"]), ("slurmd", ["-N", self.node])):
            log = open(self.root / f"{daemon}.out", "wb")
            self.procs.append(subprocess.Popen(
                [_sbin(daemon), "-D", "-f", str(self.conf), *extra], stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **self.env}))
        self.wait_idle()
        return self

    def _conf(self, munge_socket: Path) -> str:
        r = self.root
        return "\n".join([
            "ClusterName=autotune-test", f"SlurmctldHost={self.node}(127.0.0.1)", "SlurmUser=root",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}", f"SlurmdLogFile={r / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "ReturnToService=2", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "KillWait=5", "MinJobAge=600",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP", ""])

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, check=check,
                              env={**os.environ, **self.env}, timeout=30)

    def wait_idle(self, timeout_s: float = 60) -> None:
        """Until the node accepts jobs (sinfo says idle or mixed or allocated)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited: {self.logs()}")
            out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
            if out.returncode == 0 and out.stdout.strip().rstrip("*") in ("idle", "mixed", "allocated"):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm node not ready: {out.stdout} {out.stderr} {self.logs()}")
            time.sleep(0.5)

    def wait_job(self, job_id: str, states: tuple[str, ...], timeout_s: float = 120) -> str:
        """Until `job_id` is in one of `states` (scontrol's JobState); returns the state."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
            state = next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")
            if state in states:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is {state or 'unknown'}, not {states}")
            time.sleep(0.5)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.root.rglob("*.log"))
                         if p.is_file())

    def cancel_all(self, timeout_s: float = 60) -> None:
        """scancel every job of this cluster and wait until none is left running, so stopping
        the daemons leaves no job step (slurmstepd) behind."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.run("squeue", "-h", "-o", "%i", check=False)
            jobs = out.stdout.split() if out.returncode == 0 else []
            if not jobs:
                return
            self.run("scancel", *jobs, check=False)
            time.sleep(1)

    def stop(self) -> None:
        if all(p.poll() is None for p in self.procs):
            self.cancel_all()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.munged is not None:  # last: the daemons above authenticate through it
            self.munged.terminate()
            try:
                self.munged.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.munged.kill()
                self.munged.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
