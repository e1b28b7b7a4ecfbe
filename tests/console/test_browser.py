"""The console end to end in real headless Chromium (Debian's chromium, driven by
Playwright): a real redis-server, a real 3-node mesh and the console's two
processes (daphne and the meshwatch worker). Sign in, see the mesh, watch counts
change as messages are sent and consumed without reloading, purge from the queue
page, kill a node and see it turn red. Each page's screenshot is saved under the
test's output (``MESHGATE_SCREENSHOTS=DIR`` saves them there too, e.g. docs/console)."""

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
from e2e_support import unique
from mesh_support import send_many

from meshgate.redis_server import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PAGES = ["overview", "topology", "queues", "redistribution", "connections", "links", "events"]


class ConsoleProcesses:
    """daphne and the worker, on a data dir of their own, pointed at the test mesh."""

    def __init__(self, mesh, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings", MESHGATE_CONSOLE_DATA=str(workdir),
                        MESHGATE_REDIS_URL=mesh.redis.url, PYTHONPATH=str(ROOT),
                        MESHGATE_CONSOLE_STOMP=",".join(f"127.0.0.1:{node.stomp}" for node in mesh.nodes))
        django = [sys.executable, "-m", "django"]
        subprocess.run([*django, "migrate", "--verbosity", "0"], env=self.env, cwd=ROOT, check=True)
        subprocess.run([*django, "ensureadmin"], env=self.env, cwd=ROOT, check=True, capture_output=True)
        self.password = (workdir / "admin-password").read_text().strip()
        self.processes = [
            subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                              "console.asgi:application"], env=self.env, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
            subprocess.Popen([*django, "meshwatch", "--tick", "0.25"], env=self.env, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
        ]

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


@pytest.fixture
def page(browser, console, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and "404" not in message.text
            and errors.append(message.text))
    page.errors = errors
    page.set_default_timeout(15_000)
    page.goto(console.url + "/", wait_until="networkidle")
    page.wait_for_url(re.compile(r"/login/"))
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", console.password)
    page.click("button[type=submit]")
    page.wait_for_url(console.url + "/")
    yield page
    context.close()
    assert not errors, errors


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
    page.wait_for_function("document.querySelectorAll('#graph-nodes li[data-state=up]').length === 3")
    assert page.locator("#summary").inner_text().startswith("3 of 3 nodes up · 3 links up")
    shot(page, "topology", tmp_path)
    for name in PAGES[2:]:
        page.click(f"nav >> text={name.capitalize()}")
        page.wait_for_url(re.compile(f"/{name}/"))
        page.wait_for_load_state("networkidle")
        assert page.locator("#problem").is_hidden(), page.locator("#problem").inner_text()
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
    page.wait_for_function("(n) => document.body.textContent.includes(n)", arg="7")
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


def test_a_killed_node_turns_red(page, console, mesh, tmp_path):
    page.goto(console.url + "/topology/")
    page.wait_for_function("document.querySelectorAll('#graph-nodes li[data-state=up]').length === 3")
    mesh.c.kill9()
    try:
        page.wait_for_selector("#graph-nodes li[data-node=C][data-state=down]", state="attached", timeout=10_000)
        shot(page, "topology-node-down", tmp_path)
        page.goto(console.url + "/")
        page.wait_for_selector("text=2 / 3")
    finally:
        mesh.c.start()
    page.goto(console.url + "/topology/")
    page.wait_for_function("document.querySelectorAll('#graph-nodes li[data-state=up]').length === 3",
                           timeout=30_000)
