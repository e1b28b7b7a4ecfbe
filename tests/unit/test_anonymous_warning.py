"""Anonymous mode warns only when a listener is reachable beyond loopback."""

from __future__ import annotations

import pytest

from meshgate.node import _loopback


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("broker.example.com", False),
])
def test_which_binds_count_as_loopback(host, loopback):
    assert _loopback(host) is loopback
