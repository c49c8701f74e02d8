"""A throwaway PostgreSQL server on 127.0.0.1 for the storage tests (real server, no mock).

    with PostgresServer() as pg:
        url = pg.url                      # postgresql://autotune:<password>@127.0.0.1:PORT/autotune

Uses the installed binaries (`initdb`, `postgres`: on PATH or /usr/lib/postgresql/*/bin; the
Debian package `postgresql`, which .ci/run installs). initdb refuses to run as root, so as
root the server runs as the `postgres` user (created if absent) with its data dir owned by it.
Password authentication (scram-sha-256) is on, so tests see a real secret in the URL.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

USER = "autotune"
# Characters that need URL quoting, so redaction is tested on the encoded and decoded forms.
PASSWORD = "pg S3cret/pw@42"
DATABASE = "autotune"


def pg_bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(os.path.realpath(found)).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    return Path(dirs[0]) if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self) -> None:
        self.bin = pg_bin_dir()
        if self.bin is None:
            raise FileNotFoundError("PostgreSQL binaries (initdb, postgres) not found: "
                                    "apt-get install postgresql (.ci/run does)")
        self.root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")

    @property
    def url(self) -> str:
        return self.url_for(PASSWORD)

    def connect(self, dbname: str = "postgres"):
        """A psycopg2 connection as the test user, autocommit."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                                dbname=dbname)
        conn.autocommit = True
        return conn

    def create_database(self, name: str) -> None:
        conn = self.connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        conn.close()

    def url_for(self, password: str, port: int | None = None) -> str:
        return (f"postgresql://{USER}:{quote(password, safe='')}@127.0.0.1:"
                f"{port or self.port}/{DATABASE}")

    def start(self) -> "PostgresServer":
        data, pwfile = self.root / "data", self.root / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if self.as_user:
            shutil.chown(pwfile, "postgres")
        subprocess.run([*self.as_user, str(self.bin / "initdb"), "-D", str(data), "-U", USER,
                        "--pwfile", str(pwfile), "--auth", "scram-sha-256", "-E", "UTF8"],
                       check=True, capture_output=True, text=True)
        self._launch()
        self.create_database(DATABASE)
        return self

    def _launch(self) -> None:
        assert self.bin is not None
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            [*self.as_user, str(self.bin / "postgres"), "-D", str(self.root / "data"), "-h", "127.0.0.1",
             "-p", str(self.port), "-k", str(self.root), "-c", "max_connections=200",
             "-c", "fsync=off"],  # fsync off: a throwaway test server, speed over durability
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready()

    def pause(self) -> None:
        """Shut the server down (fast: its clients are cut off), keeping its data: a restart."""
        assert self.proc is not None
        self._signal_postmaster(signal.SIGINT)
        self.proc.wait(timeout=30)

    def resume(self) -> None:
        """The paused server again, on the same port with the same data."""
        self._launch()

    def _wait_ready(self, timeout_s: float = 60) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError("postgres exited: " + (self.root / "server.log").read_text()[-2000:])
            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                                 dbname="postgres", connect_timeout=2).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # SIGINT to the postmaster = fast shutdown: it disconnects the clients a test left
            # open and removes its shared memory. SIGTERM (smart) waited for those clients, and
            # the kill after the wait left the server's segments in /dev/shm, run after run.
            self._signal_postmaster(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def _signal_postmaster(self, sig: int) -> None:
        """The postmaster, not `runuser` above it (as root the server runs under runuser)."""
        try:
            pid = int((self.root / "data" / "postmaster.pid").read_text().split()[0])
            os.kill(pid, sig)
        except (OSError, ValueError, IndexError):
            assert self.proc is not None
            self.proc.send_signal(sig)

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
