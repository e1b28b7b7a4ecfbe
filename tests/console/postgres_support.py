"""A real PostgreSQL server of the test's own on loopback, for the console's tests of
``MESHGATE_CONSOLE_DATABASE_URL``: Debian's ``postgresql`` package (scripts/test.sh
installs it; no system service is started), ``initdb`` into a temporary directory and
``postgres`` on a free port of 127.0.0.1, fsync off. PostgreSQL refuses to run as root:
as root, the directory is given to the ``postgres`` user and the server runs as it.

Readiness is a real connection (psycopg), polled; the server is stopped by its PID
(SIGINT: PostgreSQL's fast shutdown)."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from meshgate.redis_server import free_port

HOST = "127.0.0.1"


def binaries() -> Path | None:
    """The directory of ``initdb`` and ``postgres``: Debian's newest
    /usr/lib/postgresql/<version>/bin (not on PATH), else PATH's; None when PostgreSQL is
    not installed."""
    debian = [Path(path).parent for path in glob.glob("/usr/lib/postgresql/*/bin/postgres")]
    debian = [bin_dir for bin_dir in debian if bin_dir.parent.name.isdigit() and (bin_dir / "initdb").exists()]
    if debian:
        return max(debian, key=lambda bin_dir: int(bin_dir.parent.name))
    initdb, postgres = shutil.which("initdb"), shutil.which("postgres")
    return Path(initdb).parent if initdb and postgres and Path(initdb).parent == Path(postgres).parent else None


class PostgresServer:
    """``start()`` it, ``database(name)`` for a role and database of their own (its URL),
    ``stop()`` it. ``superuser()`` connects as the cluster's superuser (autocommit)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.port = free_port(HOST)
        # Not under pytest's tmp dir: that one is root's, mode 0700, and the server runs as postgres.
        self.directory = Path(tempfile.mkdtemp(prefix="meshgate-postgres-"))
        self.password = secrets.token_urlsafe(16)  # the superuser's
        self.process: subprocess.Popen | None = None
        self._as: dict = {}

    def start(self, timeout: float = 30.0) -> PostgresServer:
        data, sockets = self.directory / "data", self.directory / "sockets"
        sockets.mkdir()
        password_file = self.directory / "superuser-password"
        password_file.write_text(self.password + "\n")
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")  # Debian's package makes the user
            for path in (self.directory, sockets, password_file):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            self._as = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        subprocess.run([str(self.bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(password_file),
                        "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8",
                        "--no-sync"], check=True, capture_output=True, cwd=self.directory, **self._as)
        password_file.unlink()
        with open(self.directory / "postgres.log", "wb") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(data), "-k", str(sockets), "-p", str(self.port),
                 "-c", f"listen_addresses={HOST}", "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.directory, **self._as)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.superuser().close()
                return self
            except Exception:  # psycopg.OperationalError until it listens and has recovered
                if self.process.poll() is not None:
                    raise RuntimeError(f"postgres exited with {self.process.returncode}: {self.log()}") from None
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"postgres did not accept connections in {timeout} s: {self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        path = self.directory / "postgres.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def superuser(self, dbname: str = "postgres"):
        import psycopg

        return psycopg.connect(host=HOST, port=self.port, user="postgres", password=self.password, dbname=dbname,
                               connect_timeout=2, autocommit=True)

    def database(self, name: str) -> str:
        """A new login role ``name`` (a password with characters a URL must percent-encode)
        owning a new database ``name``: its ``postgresql://`` URL."""
        from psycopg import sql

        password = "p@ss/w:rd%" + secrets.token_urlsafe(12)
        with self.superuser() as connection:
            connection.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name),
                                                                                sql.Literal(password)))
            connection.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name),
                                                                            sql.Identifier(name)))
        return f"postgresql://{quote(name, safe='')}:{quote(password, safe='')}@{HOST}:{self.port}/{quote(name)}"

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown: clients are disconnected
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGQUIT)  # immediate shutdown
                try:
                    self.process.wait(5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
