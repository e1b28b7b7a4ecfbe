"""STOMP over WebSocket end to end: real ``meshgate broker`` processes in a two-node
mesh, node A with a ``[stomp.websocket]`` listener. stomp.py's WebSocket transport,
and @stomp/stompjs (vendored under tests/e2e/vendor) in headless Chromium, talk to
A while TCP STOMP clients on B send and receive: messages cross both ways."""

from __future__ import annotations

import functools
import http.server
import re
import threading
from pathlib import Path

import pytest
import stomp
from e2e_support import unique
from mesh_support import mesh_fixture, send_many  # noqa: F401
from stomp_client import Client, Collector

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VENDOR = Path(__file__).resolve().parent / "vendor" / "stompjs"
N = 20


def websocket_port(node) -> int:
    match = node.proc.output.wait_for(r"listening on ws://(\S+):(\d+)\s*$", timeout=10)
    assert match is not None, node.proc.describe()
    return int(match.group(2))


def two_nodes(mesh, origins: str = '["*"]'):
    return mesh(2, sets=["stomp.websocket.bind=127.0.0.1:0", f"stomp.websocket.allowed_origins={origins}",
                         "stomp.heartbeat_send_ms=250"])


def ws_client(port: int, heartbeats: tuple[int, int] = (0, 0)) -> Client:
    conn = stomp.WSStompConnection([("127.0.0.1", port)], ws_path="/ws", heartbeats=heartbeats,
                                   reconnect_attempts_max=1, timeout=10)
    listener = Collector()
    conn.set_listener("collector", listener)
    conn.connect(wait=True)
    return Client(conn, listener, "1.2")


def test_stomp_py_over_websocket_sends_and_receives_across_the_mesh(mesh):
    a, b = two_nodes(mesh)
    port = websocket_port(a)
    websocket = ws_client(port, heartbeats=(500, 500))
    try:
        inbound = "/queue/" + unique("ws-in")
        websocket.subscribe(inbound)
        sent = send_many(b.client(), inbound, [f"to-browser-{i}" for i in range(N)])
        assert sorted(m.body for m in websocket.listener.wait_for(N, timeout=20)) == sorted(sent)

        outbound = "/queue/" + unique("ws-out")
        consumer = b.client()
        consumer.subscribe(outbound)
        for i in range(N):
            websocket.send(outbound, f"from-browser-{i}", receipt=True)
        assert sorted(m.body for m in consumer.listener.wait_for(N, timeout=20)) == sorted(
            f"from-browser-{i}" for i in range(N))
        # Heart-beats cross as WebSocket messages too: the server's arrive, ours keep the session.
        websocket.listener.wait_until(lambda: websocket.listener.heartbeats >= 3, "three server heart-beats")
        assert websocket.conn.is_connected() and not websocket.listener.heartbeat_timeouts
    finally:
        websocket.conn.disconnect()


@pytest.fixture
def page_server(tmp_path):
    """The test page and stompjs over HTTP on loopback: a real web origin."""
    (tmp_path / "stomp.umd.min.js").write_bytes((VENDOR / "stomp.umd.min.js").read_bytes())
    (tmp_path / "index.html").write_text('<!doctype html><title>stomp</title><script src="stomp.umd.min.js"></script>')
    handler = functools.partial(QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def browser_page():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = chromium.new_page()
        page.set_default_timeout(20_000)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.errors = errors
        yield page
        chromium.close()


CONNECT = """async ({url, inbound}) => {
  window.received = [];
  window.closed = null;
  const client = new StompJs.Client({brokerURL: url, reconnectDelay: 0, heartbeatIncoming: 1000,
                                     heartbeatOutgoing: 1000});
  window.client = client;
  client.onWebSocketClose = (event) => { window.closed = event.code; };
  await new Promise((resolve, reject) => {
    client.onConnect = () => {
      client.subscribe(inbound, (message) => window.received.push(message.body));
      resolve();
    };
    client.onWebSocketClose = (event) => { window.closed = event.code; reject(new Error("closed " + event.code)); };
    client.activate();
  });
  return client.connectedVersion;
}"""


@pytest.mark.browser
@pytest.mark.slow
def test_stompjs_in_chromium_talks_to_tcp_clients_on_another_node(mesh, page_server, browser_page):
    a, b = two_nodes(mesh, origins=f'["{page_server}"]')
    url = f"ws://127.0.0.1:{websocket_port(a)}/ws"
    page = browser_page
    page.goto(page_server + "/index.html")
    inbound, outbound = "/queue/" + unique("js-in"), "/queue/" + unique("js-out")
    assert page.evaluate(CONNECT, {"url": url, "inbound": inbound}) == "1.2"

    sent = send_many(b.client(), inbound, [f"to-page-{i}" for i in range(N)])
    page.wait_for_function(f"window.received.length >= {N}")
    assert sorted(page.evaluate("window.received")) == sorted(sent)

    consumer = b.client()
    consumer.subscribe(outbound)
    page.evaluate("""(destination) => { for (let i = 0; i < 20; i++)
                       window.client.publish({destination, body: "from-page-" + i}); }""", outbound)
    assert sorted(m.body for m in consumer.listener.wait_for(N, timeout=20)) == sorted(
        f"from-page-{i}" for i in range(N))
    assert page.errors == []

    # The same page from another origin (localhost is not 127.0.0.1 to a browser) is refused.
    page.goto(page_server.replace("127.0.0.1", "localhost") + "/index.html")
    with pytest.raises(Exception, match=re.compile("closed")):
        page.evaluate(CONNECT, {"url": url, "inbound": inbound})
    a.wait_log(r"websocket from .* refused: origin http://localhost:\d+ is not in", timeout=5)
