"""A redis-server of our own on loopback, for the local mesh (and the tests):
a free port, stopped with its owner; no persistence unless asked (an append-only
file in its directory, for a test that restarts it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


class RedisServerError(Exception):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class RedisServer:
    def __init__(self, directory: Path, port: int | None = None, host: str = "127.0.0.1",
                 persistent: bool = False) -> None:
        self.directory = Path(directory).resolve()  # redis-server reads --logfile relative to --dir
        self.persistent = persistent
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self, timeout: float = 10.0) -> RedisServer:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RedisServerError("redis-server is not installed (Debian: apt-get install redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [executable, "--bind", self.host, "--port", str(self.port), "--save", "",
             "--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always",
             "--dir", str(self.directory), "--daemonize", "no", "--loglevel", "warning",
             "--logfile", str(self.directory / "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.process.poll() is not None:
                raise RedisServerError(f"redis-server exited with status {self.process.returncode}; see "
                                       f"{self.directory / 'redis.log'}")
            if time.monotonic() > deadline:
                self.stop()
                raise RedisServerError(f"redis-server did not answer PING on {self.host}:{self.port} in {timeout} s")
            time.sleep(0.02)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
