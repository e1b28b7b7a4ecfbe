"""The console end to end in real headless Chromium (Debian's chromium, driven by
Playwright): a real redis-server, a real 3-node mesh and the console's two
processes (daphne and the meshwatch worker). Sign in, see the mesh, watch counts
change as messages are sent and consumed without reloading, purge from the queue
page, expand an AMQP connection's channels, kill a node and see it turn red. Each
page's screenshot is saved under the test's output (``MESHGATE_SCREENSHOTS=DIR`` saves
them there too, e.g. docs/console)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from amqp_support import Pika, channels_holding_unacked
from e2e_support import unique
from mesh_support import send_many

from meshgate.redis_server import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PAGES = ["overview", "topology", "queues", "definitions", "redistribution", "connections", "links", "events"]
SHOT_ELSEWHERE = {"definitions", "connections"}  # by test_browser_definitions.py and the AMQP channels test
DJANGO = [sys.executable, "-m", "django"]


class ConsoleProcesses:
    """daphne and the worker, on a data dir of their own, pointed at the test mesh (or,
    with ``stomp``, at other addresses to send management requests to); ``env``: more
    settings (e.g. ``MESHGATE_CONSOLE_DATABASE_URL``). ``password``: the first
    administrator's, None when another console made it (a database they share)."""

    def __init__(self, mesh, workdir: Path, stomp: list[str] | None = None, worker: bool = True,
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        addresses = stomp if stomp is not None else [f"127.0.0.1:{node.stomp}" for node in mesh.nodes]
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings", MESHGATE_CONSOLE_DATA=str(workdir),
                        MESHGATE_REDIS_URL=mesh.redis.url, PYTHONPATH=str(ROOT),
                        MESHGATE_CONSOLE_STOMP=",".join(addresses), **(env or {}))
        subprocess.run([*DJANGO, "migrate", "--verbosity", "0"], env=self.env, cwd=ROOT, check=True)
        subprocess.run([*DJANGO, "ensureadmin"], env=self.env, cwd=ROOT, check=True, capture_output=True)
        password_file = workdir / "admin-password"
        self.password = password_file.read_text().strip() if password_file.exists() else None
        self.processes = [
            subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                              "console.asgi:application"], env=self.env, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
        ]
        if worker:
            self.processes.append(subprocess.Popen([*DJANGO, "meshwatch", "--tick", "0.25"], env=self.env, cwd=ROOT,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

    def add_user(self, name: str, password: str, admin: bool = False) -> None:
        """A console user (a viewer unless ``admin``), as ``consoleuser`` makes one."""
        subprocess.run([*DJANGO, "consoleuser", name, "--password-stdin", *(["--admin"] if admin else [])],
                       input=password + "\n", text=True, env=self.env, cwd=ROOT, check=True, capture_output=True)

    def token(self, name: str) -> str:
        """An API token of the user ``name`` (drf_create_token)."""
        done = subprocess.run([*DJANGO, "drf_create_token", name], env=self.env, cwd=ROOT, check=True,
                              capture_output=True, text=True)
        match = re.search(r"Generated token (\w+) for user", done.stdout)
        assert match, done.stdout + done.stderr
        return match.group(1)

    def listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            if self.processes[0].poll() is not None:
                raise AssertionError(f"daphne exited: {self.processes[0].stderr.read().decode()[-2000:]}") from None
            return False
        return True

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="module")
def console(mesh, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium")
    processes = ConsoleProcesses(mesh, tmp_path_factory.mktemp("console-data"))
    mesh.wait(processes.listening, "daphne to listen", timeout=30)  # slower than ~1 s on a busy machine
    yield processes
    processes.stop()


@pytest.fixture(scope="module")
def browser(console):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def signed_in(browser, console, username: str = "admin", password: str | None = None):
    """A new browser context's page, signed in to ``console``. ``page.errors`` collects
    script errors and console errors, but for those holding a text in ``page.allowed``
    (Chromium logs every 4xx/5xx answer to a fetch as one: "status of 409")."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    allowed = ["404"]

    def on_console(message) -> None:
        if message.type == "error" and not any(text in message.text for text in allowed):
            errors.append(message.text)

    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", on_console)
    page.errors = errors
    page.allowed = allowed
    page.set_default_timeout(15_000)
    page.goto(console.url + "/", wait_until="networkidle")
    page.wait_for_url(re.compile(r"/login/"))
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password if password is not None else console.password)
    page.click("button[type=submit]")
    page.wait_for_url(console.url + "/")
    return page


@pytest.fixture
def page(browser, console, tmp_path):
    page = signed_in(browser, console)
    yield page
    page.context.close()
    assert not page.errors, page.errors


def shot(page, name: str, tmp_path: Path, full_page: bool = False) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    keep = os.environ.get("MESHGATE_SCREENSHOTS")
    if keep:
        shutil.copy(path, Path(keep) / path.name)


def test_signing_in_shows_the_whole_mesh_on_every_page(page, console, tmp_path):
    page.wait_for_selector("text=3 / 3")  # nodes up
    shot(page, "overview", tmp_path)
    page.click("nav >> text=Topology")
    page.wait_for_function("() => document.querySelectorAll('#graph-nodes li[data-state=up]').length === 3")
    assert page.locator("#summary").inner_text().startswith("3 of 3 nodes up · 3 links up")
    shot(page, "topology", tmp_path)
    for name in PAGES[2:]:
        page.click(f"nav >> text={name.capitalize()}")
        page.wait_for_url(re.compile(f"/{name}/"))
        page.wait_for_load_state("networkidle")
        assert page.locator("#problem").is_hidden(), page.locator("#problem").inner_text()
        if name not in SHOT_ELSEWHERE:
            shot(page, name, tmp_path)
    assert page.evaluate("document.getElementById('live').dataset.state") == "live"


def test_counts_change_live_as_messages_are_sent_and_consumed(page, console, mesh, tmp_path):
    queue = unique("browser")
    page.goto(console.url + f"/queues/?name={queue}")
    page.wait_for_selector("text=No queue")  # nothing by that name yet
    send_many(mesh.a.client(), f"/queue/{queue}", [f"m{i}" for i in range(5)])
    row = page.locator("tr", has_text=queue)
    row.locator(".chip", has_text="A").filter(has_text="5").wait_for()  # 5 waiting on A, no reload
    consumer = mesh.c.client()
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    for message in consumer.listener.wait_for(5):
        consumer.ack(message)
    row.locator(".chip", has_text="C").wait_for()  # the consumer's node joined the breakdown
    page.wait_for_function(
        "(q) => [...document.querySelectorAll('tr')].some(r => r.textContent.includes(q) && "
        "[...r.querySelectorAll('.chip')].every(c => c.querySelector('strong').textContent === '0'))", arg=queue)
    shot(page, "queues-live", tmp_path)


def test_purging_from_the_queue_page_empties_it(page, console, mesh, tmp_path):
    queue = unique("purged")
    send_many(mesh.b.client(), f"/queue/{queue}", [f"p{i}" for i in range(7)])
    page.goto(console.url + f"/queues/{queue}/")
    # B's partial queue holds the 7 (the page's text holds a "7" sooner: the chart's clock).
    page.wait_for_function("() => [...document.querySelectorAll('#parts tbody tr')].some((r) => "
                           "r.cells[0].textContent.trim() === 'B' && r.cells[1].textContent.trim() === '7')")
    shot(page, "queue", tmp_path)
    page.click("#purge")
    dialog = page.locator("dialog.dialog")
    dialog.wait_for()
    dialog.locator("button", has_text="Purge").click()
    page.locator("#results").filter(has_text="7").wait_for()  # what was purged, by node
    page.wait_for_function("() => !document.querySelector('dialog.dialog')")
    from console.mesh.sources import mesh_view

    mesh.wait(lambda: (row := mesh_view(fresh=True).frame.queue_index.get(queue)) is not None and row.messages == 0,
              "the queue to be empty")


def test_an_amqp_connections_channels_show_when_it_is_expanded(page, console, mesh, tmp_path):
    clients = Pika()
    stomp = mesh.c.client(headers={"client-id": "billing"})
    try:
        stomp.subscribe(f"/queue/{unique('invoices')}")
        connection = clients(mesh.b.proc)  # a real pika client on B's AMQP listener
        confirming, consuming = channels_holding_unacked(connection, unique("amqp-orders"), published=3, held=3,
                                                         prefetch=10)
        page.goto(console.url + "/connections/")
        row = page.locator("tr[data-connection^='B-amqp-']")
        row.wait_for()
        amqp_id = row.get_attribute("data-connection")
        toggle = row.get_by_role("button", name=f"show the channels of {amqp_id}")
        assert toggle.inner_text() == "▸ 2" and toggle.get_attribute("aria-expanded") == "false"
        # A STOMP connection has no channels: a dash, nothing to expand.
        stomp_row = page.locator(f"tr[data-connection='{stomp.connected_frame.headers['session']}']")
        headers = page.locator("#connections thead th").all_inner_texts()
        channels_cell = stomp_row.locator("td").nth([h.strip().upper() for h in headers].index("CHANNELS"))
        assert channels_cell.inner_text() == "–" and stomp_row.locator("button.expand").count() == 0
        channels = page.locator(f".channels[data-connection='{amqp_id}']")
        assert channels.count() == 0
        toggle.click()
        channels.wait_for()
        # Cells by their text, not the row's innerText: that joins cells with tabs only once laid out.
        lines = channels.locator("tbody tr").evaluate_all(
            "(rows) => rows.map((r) => [...r.cells].map((c) => c.textContent.trim()))")
        # Channel, consumers, unacked, prefetch, global prefetch, confirm, transactional.
        assert lines == [[str(confirming.channel_number), "0", "0", "none", "none", "yes", "no"],
                         [str(consuming.channel_number), "1", "3", "10", "none", "no", "no"]], lines
        hide = row.get_by_role("button", name=f"hide the channels of {amqp_id}")
        assert hide.inner_text() == "▾ 2" and hide.get_attribute("aria-expanded") == "true"
        shot(page, "connections", tmp_path)
        hide.click()
        channels.wait_for(state="detached")
    finally:
        clients.close_all()
        stomp.disconnect()


def test_a_killed_node_turns_red(page, console, mesh, tmp_path):
    page.goto(console.url + "/topology/")
    page.wait_for_function("() => document.querySelectorAll('#graph-nodes li[data-state=up]').length === 3")
    mesh.c.kill9()
    try:
        page.wait_for_selector("#graph-nodes li[data-node=C][data-state=down]", state="attached", timeout=10_000)
        shot(page, "topology-node-down", tmp_path)
        page.goto(console.url + "/")
        page.wait_for_selector("text=2 / 3")
    finally:
        mesh.c.start()
    page.goto(console.url + "/topology/")
    page.wait_for_function("() => document.querySelectorAll('#graph-nodes li[data-state=up]').length === 3",
                           timeout=30_000)
