"""A node's own HTTP endpoint ([http] bind): /healthz, /readyz with its reasons, and
/metrics in the Prometheus text format (promtool checks it), from a real node."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request

from e2e_support import unique
from mesh_support import free_port

PROMTOOL = "/usr/bin/promtool"
HTTP_ON = "http.bind=127.0.0.1:0"


def http_address(process, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while not (found := re.findall(r"/metrics on (http://\S+)", process.stdout())):
        assert time.monotonic() < deadline, f"no HTTP endpoint in the node's output:\n{process.stdout()[-2000:]}"
        time.sleep(0.02)
    return found[-1]


def get(url: str, method: str = "GET") -> tuple[int, str, str]:
    """(status, content type, body) of a request, 4xx and 5xx included."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["content-type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["content-type"], error.read().decode()


def test_healthz_readyz_and_metrics_of_a_running_node(broker_factory, connect):
    node = broker_factory(sets=[HTTP_ON])
    base = http_address(node)
    assert get(base + "/healthz")[:2] == (200, "application/json")
    status, _, body = get(base + "/readyz")
    ready = json.loads(body)
    assert status == 200 and ready["ready"] and ready["reasons"] == []
    assert f"stomp://127.0.0.1:{node.port}" in ready["listeners"]
    queue = unique("scraped")
    connect(node).send("/queue/" + queue, "waits", receipt=True)
    status, content_type, text = get(base + "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert 'meshgate_node_up{node="n1",' in text
    assert f'meshgate_queue_messages{{node="n1",vhost="/",queue="{queue}"}} 1\n' in text
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_other_paths_and_methods_get_a_json_error(broker_factory):
    base = http_address(broker_factory(sets=[HTTP_ON]))
    status, content_type, body = get(base + "/admin")
    assert (status, content_type) == (404, "application/json") and "/readyz" in json.loads(body)["error"]
    assert get(base + "/readyz", method="POST")[0] == 405
    assert get(base + "/healthz", method="HEAD")[0] == 200


def test_a_node_that_gave_up_dialling_a_peer_is_not_ready_and_says_why(broker_factory):
    gone = f"127.0.0.1:{free_port()}"
    node = broker_factory(sets=[HTTP_ON, f'mesh.static=["{gone}"]', "mesh.reconnect_attempts=1",
                                "mesh.retry_interval_ms=100", "mesh.cluster_password=e2e-secret-pw"])
    base = http_address(node)
    deadline = time.monotonic() + 15
    while (answer := get(base + "/readyz"))[0] == 200:
        assert time.monotonic() < deadline, "still ready after giving up on its only peer"
        time.sleep(0.1)
    status, _, body = answer
    assert status == 503 and json.loads(body)["reasons"] == [
        f"gave up dialling peer {gone} (mesh.reconnect_attempts)"]
