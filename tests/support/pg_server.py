"""A throwaway PostgreSQL server for the tests, started from the installed binaries.

``initdb`` into a temporary directory, ``pg_ctl start`` on a free port on 127.0.0.1 (and a
Unix socket in that directory), killed and restarted on demand: the store tests and the chaos
test run against this real server, never a mock. As root (CI's containers) the server runs as
the ``postgres`` system user (``initdb`` refuses root). Authentication: ``trust`` for every
user on 127.0.0.1 except ``pw_user``, whose password (``PW_USER_PASSWORD``) the server checks
with SCRAM, so a refused password can be tested.
"""

from __future__ import annotations

import contextlib
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

PW_USER = "pw_user"
PW_USER_PASSWORD = "correct horse battery staple"


def find_bindir() -> Path | None:
    """The directory of ``pg_ctl``/``initdb``/``postgres``, or None when PostgreSQL is absent."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "pg_ctl").exists() and (Path(candidate) / "postgres").exists():
            return Path(candidate)
    found = shutil.which("pg_ctl")
    if found and (Path(found).resolve().parent / "postgres").exists():
        return Path(found).resolve().parent
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL cluster in ``base`` on a free port; ``start``, ``kill``, ``restart``."""

    def __init__(self, base: Path, bindir: Path) -> None:
        """Prepare (not start) a cluster under ``base``.

        As root the cluster goes into a fresh directory of the system's temporary folder
        instead, owned by ``postgres``: pytest's own folders (mode 0700, root's) are closed to
        that user. :meth:`remove` deletes it.
        """
        if os.geteuid() == 0:
            base = Path(tempfile.mkdtemp(prefix="prompt-ledger-pg-"))
        self.base = base
        self.bindir = bindir
        self.data = base / "data"
        self.sock = base / "sock"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self.log = base / "server.log"
        self.start_options = (
            "-c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "
            "-c max_connections=200 -c shared_buffers=32MB"
        )
        """Server settings: the tests' cluster skips fsync (it dies with its test session)."""

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({done.returncode}): {done.stdout}{done.stderr}\n{log}"
            )
        return done

    def remove(self) -> None:
        """Delete the cluster's directory (after :meth:`stop`)."""
        shutil.rmtree(self.base, ignore_errors=True)

    def init(self) -> None:
        """``initdb`` the cluster and write its authentication rules."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (self.base, self.sock):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        hba = (
            f"local all all trust\nhost all {PW_USER} 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 trust\n"
        )
        (self.data / "pg_hba.conf").write_text(hba)
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.data / "pg_hba.conf", entry.pw_uid, entry.pw_gid)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        opts = f"-p {self.port} -k {self.sock} {self.start_options}"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown); no error if it is not running."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def pid(self) -> int | None:
        """The postmaster's process id, or None when it is not running."""
        try:
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster (and its children: they exit when it dies)."""
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            # the backends notice their postmaster died and exit; wait for the port to free up
            time.sleep(0.5)

    def restart_after_kill(self) -> None:
        """Start again after :meth:`kill` (crash recovery replays the WAL)."""
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        self.start()

    def psql(self, sql: str, db: str = "postgres") -> str:
        """Run SQL through ``psql`` over the Unix socket; return its output."""
        out = self._run(
            "psql",
            "-h",
            str(self.sock),
            "-p",
            str(self.port),
            "-U",
            self.user,
            "-d",
            db,
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
        )
        return out.stdout

    def createdb(self, name: str) -> None:
        """Create database ``name`` (no error when it exists)."""
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
        if not exists.strip():
            self.psql(f'CREATE DATABASE "{name}"')

    def url(self, db: str = "ledgers", schema: str | None = None, user: str | None = None) -> str:
        """A libpq URL to ``db`` on this server over TCP, with ``?schema=`` when given."""
        base = f"postgresql://{user or self.user}@127.0.0.1:{self.port}/{db}"
        return base + (f"?schema={schema}" if schema else "")
