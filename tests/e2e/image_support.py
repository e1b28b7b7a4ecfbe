"""What the tests of the OCI image share (test_e2e_image.py, test_e2e_rolling_upgrade.py):
building it once per session with deploy/container/build.sh, running commands, the
paths inside it, and waiting on a process started from it.

The ``image`` fixture itself is in conftest.py (session scope: one build per run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "container" / "build.sh"
TOOLS = ("buildah", "podman", "debootstrap")
VENV_MESHGATE = "/opt/meshgate/venv/bin/meshgate"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"  # coreutils; /usr/sbin may not be on PATH
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
IMAGE_ENV = {"PATH": "/opt/meshgate/venv/bin:/usr/bin:/bin", "HOME": "/var/lib/meshgate", "LANG": "C.UTF-8",
             "PYTHONUNBUFFERED": "1"}


def tools_or_skip() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.skip(f"{', '.join(missing)} missing, and not root to apt-get install them")
    install = subprocess.run(["apt-get", "install", "-y", "-qq", *TOOLS], capture_output=True, text=True,
                             env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if install.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        install = subprocess.run(["apt-get", "install", "-y", "-qq", *TOOLS], capture_output=True, text=True,
                                 env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if install.returncode != 0 or any(shutil.which(tool) is None for tool in TOOLS):
        pytest.skip(f"buildah/podman/debootstrap not installable: {install.stderr.strip()[-500:]}")


def run(*command: str, timeout: float = 120) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-2000:]}" \
                                 f"\n{done.stderr[-3000:]}"
    return done.stdout


def build_image() -> str:
    """Build the image (build.sh reuses the base and the layers); its tag."""
    if os.geteuid() != 0:
        pytest.skip("building the image needs root (debootstrap, buildah's chroot isolation)")
    tools_or_skip()
    return run("bash", str(BUILD), timeout=1700).strip().splitlines()[-1]


def image_user(root: Path, name: str = "meshgate") -> tuple[int, int]:
    for line in (root / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2]), int(fields[3])
    raise AssertionError(f"no user {name} in the image")


def wait_for(predicate: Callable[[], Any], what: str, timeout: float, process: subprocess.Popen, log: Path) -> Any:
    """``predicate()``'s first true value, polled; fails when ``process`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if process.poll() is not None:
            raise AssertionError(f"the process exited {process.returncode} before {what}:\n{log.read_text()[-3000:]}")
        assert time.monotonic() < deadline, f"no {what} within {timeout}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def http_status(url: str) -> int | None:
    """The status of a GET (an error status too); None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def child_pid(pid: int) -> int | None:
    """The first child of ``pid`` (unshare --fork's child: the process PID 1 of the new namespace)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0]) if children else None
