"""The Definitions page in real headless Chromium (the fixtures of test_browser.py: a
real Redis, a real 3-node mesh with AMQP listeners, daphne and the meshwatch worker).

An admin defines a queue's settings in the page's form and sees them in the table and
through the REST API; a bad value shows the API's error in the form and changes
nothing; deleting asks first; a durable subscription shows where its subscriber is and
a refused deletion (409) says why; a viewer sees no edit controls; what another client
defines through the API shows without a reload; AMQP exchanges, bindings and declared
queues show read-only; with no node to ask the page says so. The screenshot
``definitions`` is saved like test_browser.py's (``MESHGATE_SCREENSHOTS=DIR``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from amqp_support import Pika
from e2e_support import unique
from mesh_support import send_many
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from meshgate.redis_server import free_port
from tests.console import test_browser as browser_tests

# test_browser.py's fixtures, for this module's own console and browser.
console, browser, page, shot = browser_tests.console, browser_tests.browser, browser_tests.page, browser_tests.shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]
QUEUES, DURABLES = "#queue-list", "#durable-list"

# Every row of a table (under the box selector) with a data-name: {name: {header: cell text}}.
ROWS_JS = r"""(box) => {
  const root = document.querySelector(box);
  const out = {};
  if (!root) return out;
  const heads = [...root.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  for (const tr of root.querySelectorAll("tbody tr[data-name]")) {
    const cells = [...tr.children].map((td) => td.innerText.replace(/\s+/g, " ").trim());
    out[tr.dataset.name] = Object.fromEntries(heads.map((head, i) => [head, cells[i]]));
  }
  return out;
}"""


class Rest:
    """Another client of the console's REST API: HTTP with a token, as a script would be."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(self.url + "/api/v1/" + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Authorization": "Token " + self.token, "Accept": "application/json",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def ok(self, method: str, path: str, body: dict | None = None) -> dict:
        status, answer = self.call(method, path, body)
        assert status == 200, (method, path, status, answer)
        return answer

    def define(self, queue: str, settings: dict) -> dict:
        return self.ok("PUT", "definitions/queues/" + urllib.parse.quote(queue, safe=""), settings)

    def definition(self, name: str) -> dict | None:
        """The definition named ``name`` as GET /api/v1/definitions lists it (None: none)."""
        items = self.ok("GET", "definitions?page_size=500&name=" + urllib.parse.quote(name))["items"]
        return next((row for row in items if row["name"] == name), None)

    def undefine(self, kind: str, name: str) -> None:
        status, answer = self.call("DELETE", f"definitions/{kind}/" + urllib.parse.quote(name, safe=""))
        assert status in (200, 404), answer


@pytest.fixture(scope="module")
def rest(console) -> Rest:
    return Rest(console.url, console.token("admin"))


def rows(page, box: str) -> dict[str, dict[str, str]]:
    return page.evaluate(ROWS_JS, box)


def wait_row(page, box: str, name: str, expected: dict[str, str], timeout: float = 15_000) -> dict[str, str]:
    """Wait until the row ``name`` of the table in ``box`` shows ``expected`` ({header: text})."""
    try:
        page.wait_for_function(f"([box, name, expected]) => {{ const row = ({ROWS_JS})(box)[name]; "
                               "return Boolean(row) && Object.entries(expected).every(([k, v]) => row[k] === v); }",
                               arg=[box, name, expected], timeout=timeout)
    except PlaywrightTimeout:
        raise AssertionError(f"{name} in {box} is {rows(page, box).get(name)}, not {expected}") from None
    return rows(page, box)[name]


def open_definitions(page, console) -> None:
    page.goto(console.url + "/definitions/")
    page.locator(f"{QUEUES} .loading").wait_for(state="detached")
    page.locator(f"{DURABLES} .loading").wait_for(state="detached")


def row_of(page, box: str, name: str):
    return page.locator(f"{box} tbody tr[data-name='{name}']")


def test_without_definitions_the_page_says_queues_use_the_node_defaults(page, console, tmp_path):
    page.click("nav >> text=Definitions")
    page.wait_for_url(console.url + "/definitions/")
    assert page.locator("nav a.active").inner_text() == "Definitions"
    empty = page.locator(QUEUES).filter(has_text="No queue settings defined")
    empty.wait_for()
    assert "queues use the node defaults" in empty.inner_text()
    page.locator(DURABLES).filter(has_text="No durable subscriptions").wait_for()
    assert page.locator("#exchanges").is_hidden() and page.locator("#problem").is_hidden()
    assert page.locator("#queue-count").inner_text() == "0 queues with settings"
    shot(page, "definitions-empty", tmp_path)


def test_an_admin_defines_a_queues_settings_in_the_form_and_edits_them(page, console, rest):
    queue = unique("orders")
    try:
        open_definitions(page, console)
        form = page.locator("#queue-form")
        assert form.is_hidden()
        page.click("#new-queue")
        form.wait_for()
        form.locator("[name=queue]").fill(queue)
        form.locator("[name=max_delivery_attempts]").fill("3")
        form.locator("[name=dead_letter_queue]").fill(queue + ".dlq")
        form.locator("[name=expiry_mode]").select_option("discard")
        form.locator("[name=message_ttl_ms]").fill("600000")
        form.locator("[name=max_length]").fill("1000")
        page.click("#form-save")
        wait_row(page, QUEUES, queue, {"Max deliveries": "3", "Dead-letter queue": queue + ".dlq",
                                       "Expiry queue": "discard", "Message TTL": "10.0 min", "Max length": "1,000"})
        assert form.is_hidden()
        assert "Saved the settings of " + queue in page.locator("#queue-results .result.ok").inner_text()
        # The same settings, through the API.
        record = rest.definition(queue)
        assert record["queue"] == {"max_delivery_attempts": 3, "dead_letter_queue": queue + ".dlq", "expiry_queue": "",
                                   "message_ttl_ms": 600000, "max_length": 1000}
        assert record["kind"] == "queue" and record["deleted"] is False and record["origin_name"] == "A"
        row = rows(page, QUEUES)[queue]
        assert row["Version"] == f"v{record['version']} · A" and row["Changed"] == "now"

        # Edit: the form holds the settings; a cleared field goes back to the node default.
        row_of(page, QUEUES, queue).locator("button[data-action=edit]").click()
        form.wait_for()
        assert form.locator("[name=queue]").input_value() == queue and not form.locator("[name=queue]").is_editable()
        assert [form.locator(f"[name={field}]").input_value() for field in
                ("max_delivery_attempts", "dead_letter_queue", "expiry_mode", "message_ttl_ms", "max_length")] == \
            ["3", queue + ".dlq", "discard", "600000", "1000"]
        form.locator("[name=max_length]").fill("")
        form.locator("[name=expiry_mode]").select_option("queue")
        form.locator("[name=expiry_queue]").fill(queue + ".expired")
        page.click("#form-save")
        wait_row(page, QUEUES, queue, {"Max length": "", "Expiry queue": queue + ".expired", "Max deliveries": "3"})
        edited = rest.definition(queue)
        assert edited["queue"] == {"max_delivery_attempts": 3, "dead_letter_queue": queue + ".dlq",
                                   "expiry_queue": queue + ".expired", "message_ttl_ms": 600000}
        assert edited["version"] > record["version"]
        wait_row(page, QUEUES, queue, {"Version": f"v{edited['version']} · A"})
    finally:
        rest.undefine("queues", queue)


def test_a_bad_value_shows_the_apis_error_in_the_form_and_changes_nothing(page, console, rest, tmp_path):
    page.allowed.append("status of 400")  # Chromium logs the refused PUTs
    queue = unique("limits")
    try:
        rest.define(queue, {"max_length": 5})
        before = rest.definition(queue)
        open_definitions(page, console)
        wait_row(page, QUEUES, queue, {"Max length": "5", "Message TTL": ""})
        row_of(page, QUEUES, queue).locator("button[data-action=edit]").click()
        form, error = page.locator("#queue-form"), page.locator("#form-error")
        form.locator("[name=message_ttl_ms]").fill("soon")
        page.click("#form-save")
        error.wait_for()
        assert "message_ttl_ms" in error.inner_text() and "valid integer" in error.inner_text(), error.inner_text()
        assert "[HTTP 400]" in error.inner_text()
        assert form.locator("[name=message_ttl_ms]").get_attribute("aria-invalid") == "true"
        assert form.is_visible()
        # A whole number out of range: the API's own words, on that field.
        form.locator("[name=message_ttl_ms]").fill("")
        form.locator("[name=max_delivery_attempts]").fill("0")
        page.click("#form-save")
        page.locator("#form-error", has_text="max_delivery_attempts").wait_for()
        assert "greater than or equal to 1" in error.inner_text(), error.inner_text()
        assert form.locator("[name=max_delivery_attempts]").get_attribute("aria-invalid") == "true"
        assert form.locator("[name=message_ttl_ms]").get_attribute("aria-invalid") is None
        # Nothing changed: not in the table, not in the mesh.
        assert rows(page, QUEUES)[queue]["Max length"] == "5" and rows(page, QUEUES)[queue]["Max deliveries"] == ""
        assert rest.definition(queue) == before
        shot(page, "definitions-form-error", tmp_path)
        # A name that is no queue's: the node's refusal, in the form.
        page.click("#form-cancel")
        form.wait_for(state="hidden")
        page.click("#new-queue")
        assert error.is_hidden() and form.locator("[name=queue]").input_value() == ""
        form.locator("[name=queue]").fill("news.*")
        form.locator("[name=max_length]").fill("1")
        page.click("#form-save")
        page.locator("#form-error", has_text="invalid queue name").wait_for()
        assert form.locator("[name=queue]").get_attribute("aria-invalid") == "true"
        assert rest.definition("news.*") is None and "news.*" not in rows(page, QUEUES)
    finally:
        rest.undefine("queues", queue)


def test_deleting_a_queue_definition_asks_first(page, console, rest, mesh):
    queue = unique("retired")
    rest.define(queue, {"max_delivery_attempts": 2})
    send_many(mesh.a.client(), f"/queue/{queue}", ["one", "two"])
    mesh.wait(lambda: rest.call("GET", "queues/" + queue)[1].get("messages") == 2, "the two messages in the view")
    open_definitions(page, console)
    wait_row(page, QUEUES, queue, {"Max deliveries": "2"})
    dialog = page.locator("dialog.dialog")
    row_of(page, QUEUES, queue).locator("button[data-action=delete]").click()
    dialog.wait_for()
    assert dialog.locator("h2").inner_text() == f"Delete the settings of {queue}?"
    assert "on every node" in dialog.inner_text() and "2 messages over the mesh" in dialog.inner_text()
    dialog.get_by_role("button", name="Cancel").click()
    dialog.wait_for(state="detached")
    assert rest.definition(queue)["deleted"] is False and queue in rows(page, QUEUES)

    row_of(page, QUEUES, queue).locator("button[data-action=delete]").click()
    dialog.get_by_role("button", name="Delete definition").click()
    row_of(page, QUEUES, queue).wait_for(state="detached")
    assert "Deleted the definition of " + queue in page.locator("#queue-results .result.ok").inner_text()
    assert rest.definition(queue)["deleted"] is True
    # On each node the queue went with it (no consumer held it).
    mesh.wait(lambda: rest.call("GET", "queues/" + queue)[0] == 404, "the queue gone")
    # A deletion is a record too: shown on request, without buttons.
    page.check("#show-deleted")
    deleted = row_of(page, QUEUES, queue)
    deleted.wait_for()
    assert "deleted" in deleted.inner_text() and "deleted" in deleted.get_attribute("class")
    assert deleted.locator("button").count() == 0


def test_an_admin_traces_a_destination_from_the_form_and_stops_it(page, console, rest):
    """A trace definition (docs/journeys.md), kept and shipped even where journeys are off: a bad
    rate shows the API's error and adds nothing; a good one lists with its rate; Stop asks first."""
    page.allowed.append("status of 400")  # Chromium logs the refused PUT
    destination = "/queue/" + unique("traced")
    odd = "/queue/" + unique("odd") + "<img src=x onerror=window.pwned=1 &amp;"  # no ">": no wildcard
    form, error, traces = page.locator("#trace-form"), page.locator("#trace-form-error"), "#trace-list"
    try:
        open_definitions(page, console)
        page.locator(f"{traces} .loading").wait_for(state="detached")
        assert page.locator("#trace-help a", has_text="Message page's search").get_attribute("href") == "/messages/"
        page.click("#new-trace")
        form.wait_for()
        assert [form.locator(f"[name={f}]").input_value() for f in ("rate", "minutes")] == ["1", "10"]
        # A rate above 1: the API's words in the form, the field marked, nothing traced.
        form.locator("[name=destination]").fill(destination)
        form.locator("[name=rate]").fill("2")
        page.click("#trace-save")
        error.wait_for()
        assert "rate" in error.inner_text() and "[HTTP 400]" in error.inner_text(), error.inner_text()
        assert form.locator("[name=rate]").get_attribute("aria-invalid") == "true"
        assert rest.definition(destination) is None and destination not in rows(page, traces)

        form.locator("[name=rate]").fill("0.5")
        page.click("#trace-save")
        row = wait_row(page, traces, destination, {"Rate": "one in 2 (rate 0.5)"})
        assert form.is_hidden() and "Tracing " + destination in page.locator("#trace-results .result.ok").inner_text()
        assert row["Ends"].endswith("· in 10.0 min") or row["Ends"].endswith("· in 9.9 min"), row
        record = rest.definition(destination)
        assert record["kind"] == "trace" and record["trace"]["rate"] == 0.5 and "admin" in record["trace"]["by"]
        assert row["Turned on by"] == record["trace"]["by"], row
        assert 590 <= record["trace"]["until"] - record["changed_at"] <= 610, record

        # A name holding HTML shows as the text it is.
        rest.ok("PUT", "definitions/traces/queue/" + urllib.parse.quote(odd.removeprefix("/queue/"), safe=""),
                {"rate": 0.01, "for_s": 60})
        wait_row(page, traces, odd, {"Rate": "one in 100 (rate 0.01)"})
        assert row_of(page, traces, odd).locator("td").first.inner_text() == odd
        assert page.evaluate("window.pwned") is None and row_of(page, traces, odd).locator("img").count() == 0

        dialog = page.locator("dialog.dialog")
        row_of(page, traces, destination).locator("button[data-action=stop]").click()
        dialog.wait_for()
        assert dialog.locator("h2").inner_text() == f"Stop tracing {destination}?"
        dialog.get_by_role("button", name="Stop tracing").click()
        row_of(page, traces, destination).wait_for(state="detached")
        assert "Stopped tracing " + destination in page.locator("#trace-results .result.ok").first.inner_text()
        assert rest.definition(destination)["deleted"] is True
        assert odd in rows(page, traces)
    finally:
        for name in (destination, odd):
            rest.undefine("traces", name.removeprefix("/"))


def test_a_durable_subscription_shows_its_subscriber_and_a_refused_deletion_says_why(page, console, rest, mesh):
    page.allowed.append("status of 409")  # Chromium logs the refused DELETE
    client_id, topic = unique("app"), unique("prices")
    durable = f"{client_id}.feed"
    open_definitions(page, console)  # before the subscription: it shows without a reload
    subscriber = mesh.b.client(headers={"client-id": client_id})
    subscriber.subscribe("/topic/" + topic, headers={"activemq.subscriptionName": "feed", "selector": "priority > 3"})
    session = subscriber.connected_frame.headers["session"]
    wait_row(page, DURABLES, durable, {"Topic": "/topic/" + topic, "Selector": "priority > 3",
                                       "Subscriber": f"connected on B {session}"})
    dialog = page.locator("dialog.dialog")
    row_of(page, DURABLES, durable).locator("button[data-action=delete]").click()
    dialog.wait_for()
    assert "A subscriber is connected on B" in dialog.inner_text()
    dialog.get_by_role("button", name="Delete subscription").click()
    refused = page.locator("#durable-results .result.error")
    refused.wait_for()
    assert "subscriber" in refused.inner_text() and "[HTTP 409]" in refused.inner_text(), refused.inner_text()
    assert rest.definition(durable)["deleted"] is False and durable in rows(page, DURABLES)

    subscriber.disconnect()
    wait_row(page, DURABLES, durable, {"Subscriber": "away"})
    row_of(page, DURABLES, durable).locator("button[data-action=delete]").click()
    assert "A subscriber is connected" not in dialog.inner_text()
    dialog.get_by_role("button", name="Delete subscription").click()
    row_of(page, DURABLES, durable).wait_for(state="detached")
    assert "Deleted " + durable in page.locator("#durable-results .result.ok").inner_text()
    assert rest.definition(durable)["deleted"] is True


def test_a_viewer_sees_the_definitions_but_no_edit_controls(browser, console, rest, mesh, tmp_path):
    queue, client_id = unique("viewed"), unique("viewer-app")
    console.add_user("vera", "vera-secret-1")
    rest.define(queue, {"max_length": 7})
    subscriber = mesh.c.client(headers={"client-id": client_id})
    subscriber.subscribe("/topic/" + unique("news"), headers={"activemq.subscriptionName": "feed"})
    viewer = browser_tests.signed_in(browser, console, "vera", "vera-secret-1")
    try:
        open_definitions(viewer, console)
        wait_row(viewer, QUEUES, queue, {"Max length": "7"})
        wait_row(viewer, DURABLES, f"{client_id}.feed", {"Subscriber": "connected on C " +
                                                           subscriber.connected_frame.headers["session"]})
        assert viewer.locator("#new-queue").count() == 0 and viewer.locator("#queue-form").count() == 0
        assert viewer.locator("#definitions button").count() == 0  # no Edit…, no Delete…
        assert viewer.get_by_text("need an admin account").is_visible()
        assert "(admin)" not in viewer.locator("header .who").inner_text()
        shot(viewer, "definitions-viewer", tmp_path)
        assert not viewer.errors, viewer.errors
    finally:
        viewer.context.close()
        subscriber.disconnect()
        rest.undefine("queues", queue)
        mesh.wait(lambda: rest.call("DELETE", f"definitions/durable/{client_id}.feed")[0] in (200, 404),
                  "the subscription deleted once its subscriber left")


def test_a_definition_made_by_another_client_shows_without_a_reload(page, console, rest):
    queue = unique("live")
    open_definitions(page, console)
    page.evaluate("window.sameDocument = true")
    # The page polls every 10 s besides; an admin_action event brings it well before.
    rest.define(queue, {"max_delivery_attempts": 4, "expiry_queue": ""})
    wait_row(page, QUEUES, queue, {"Max deliveries": "4", "Expiry queue": "discard"}, timeout=7_000)
    rest.undefine("queues", queue)
    row_of(page, QUEUES, queue).wait_for(state="detached", timeout=7_000)
    assert page.evaluate("window.sameDocument") is True


def test_amqp_exchanges_bindings_and_declared_queues_show_read_only(page, console, rest, mesh, tmp_path):
    """Also the documentation's screenshot: a few queues' settings, what an AMQP client
    declared, a connected durable subscriber, a traced destination, and the form open on a queue."""
    rest.define("orders", {"max_delivery_attempts": 5, "dead_letter_queue": "orders.dlq", "message_ttl_ms": 86_400_000})
    rest.define("payments", {"max_delivery_attempts": 10, "expiry_queue": "", "max_length": 50_000})
    rest.define("audit", {"expiry_queue": "audit.expired", "message_ttl_ms": 3_600_000})
    rest.ok("PUT", "definitions/traces/queue/orders", {"rate": 0.01, "for_s": 7200})
    clients = Pika()
    subscriber = mesh.c.client(headers={"client-id": "reports"})
    try:
        subscriber.subscribe("/topic/sales.>", headers={"activemq.subscriptionName": "daily",
                                                        "selector": "region = 'eu'"})
        channel = clients(mesh.a.proc).channel()  # a real pika client on A's AMQP listener
        channel.exchange_declare("events", "topic", durable=True)
        channel.exchange_declare("events.dlx", "fanout", durable=True)
        channel.queue_declare("billing", durable=True, arguments={"x-max-length": 10000,
                                                                  "x-dead-letter-exchange": "events.dlx"})
        channel.queue_bind("billing", "events", routing_key="invoice.*")
        open_definitions(page, console)
        billing = wait_row(page, QUEUES, "billing", {"Max length": "10,000", "DL exchange": "events.dlx"})
        assert "x-max-length=10000" in billing["AMQP arguments"], billing
        wait_row(page, QUEUES, "orders", {"Max deliveries": "5", "Dead-letter queue": "orders.dlq",
                                          "Message TTL": "24.0 h", "DL exchange": ""})
        # Its x-arguments would be lost by a save here: no editing, but it may be deleted.
        edit = row_of(page, QUEUES, "billing").locator("button[data-action=edit]")
        assert edit.is_disabled() and "AMQP" in edit.get_attribute("title")
        assert row_of(page, QUEUES, "billing").locator("button[data-action=delete]").is_enabled()
        assert row_of(page, QUEUES, "orders").locator("button[data-action=edit]").is_enabled()
        exchanges = page.locator("#exchanges")
        exchanges.wait_for()
        events = rows(page, "#exchange-list")["events"]
        assert events.pop("Version").endswith("· A") and events.pop("Changed")
        assert events == {"Exchange": "events", "Type": "topic", "Durable": "yes", "Auto-delete": "no",
                          "Internal": "no", "Arguments": ""}
        assert rows(page, "#exchange-list")["events.dlx"]["Type"] == "fanout"
        binding = page.locator("#binding-list tbody tr", has_text="invoice.*")
        assert binding.count() == 1 and "billing" in binding.inner_text() and "events" in binding.inner_text()
        assert page.locator("#exchange-count").inner_text() == "2 exchanges · 1 binding"
        wait_row(page, DURABLES, "reports.daily", {"Topic": "/topic/sales.>", "Selector": "region = 'eu'",
                                                   "Subscriber": "connected on C " +
                                                   subscriber.connected_frame.headers["session"]})
        wait_row(page, "#trace-list", "/queue/orders", {"Rate": "one in 100 (rate 0.01)"})
        row_of(page, QUEUES, "payments").locator("button[data-action=edit]").click()
        page.locator("#queue-form").wait_for()
        page.mouse.move(0, 0)  # no hover highlight in the picture
        shot(page, "definitions", tmp_path, full_page=True)
    finally:
        clients.close_all()
        subscriber.disconnect()
        rest.undefine("traces", "queue/orders")


def test_the_page_says_when_no_node_can_be_asked(browser, mesh, tmp_path_factory, tmp_path):
    """A console whose management address no node listens on: the definitions cannot be
    read (503), and the page says so instead of an empty list."""
    lost = browser_tests.ConsoleProcesses(mesh, tmp_path_factory.mktemp("console-lost"),
                                          stomp=[f"127.0.0.1:{free_port()}"], worker=False)
    try:
        mesh.wait(lost.listening, "daphne to listen", timeout=30)
        page = browser_tests.signed_in(browser, lost)
        page.allowed.append("status of 503")
        page.goto(lost.url + "/definitions/")
        problem = page.locator("#problem")
        problem.wait_for()
        assert "Could not read the definitions" in problem.inner_text() and "[HTTP 503]" in problem.inner_text()
        assert "no node answered" in problem.inner_text(), problem.inner_text()
        for box in (QUEUES, DURABLES):
            assert "no node of the mesh could be asked" in page.locator(box).inner_text()
        assert "No queue settings defined" not in page.locator(QUEUES).inner_text()
        shot(page, "definitions-unreachable", tmp_path)
        # It tries again (every 10 s), and says the same.
        with page.expect_response(lambda response: "/api/v1/definitions" in response.url, timeout=15_000) as again:
            pass
        assert again.value.status == 503 and problem.is_visible()
        assert "no node of the mesh could be asked" in page.locator(QUEUES).inner_text()
        assert not page.errors, page.errors
        page.context.close()
    finally:
        lost.stop()
