"""A node's TLS certificates in the Topology page's node panel and the certificate_expiring
event on the Events page, in real headless Chromium (the fixtures of test_browser.py: a
real Redis, a real 3-node mesh, daphne and the meshwatch worker).

A real broker "T" presents a STOMP TLS certificate with 5 days left. Node "D"
(tls_node_support) holds four at once (expired, 5 days left, 90 and 300 days): its
snapshots and events are written with the node's own metrics code. The mesh's nodes A, B
and C have no TLS. The screenshots ``topology-certificates`` (D),
``topology-certificates-broker`` (T) and ``events-certificates`` are saved like
test_browser.py's (``MESHGATE_SCREENSHOTS=DIR``)."""

from __future__ import annotations

import datetime

import pytest

from tests.console import test_browser as browser_tests
from tests.console.tls_node_support import SUBJECT, T_SUBJECT, TlsNode, tls_broker

# test_browser.py's fixtures, for this module's own console and browser.
console, browser, page, shot = browser_tests.console, browser_tests.browser, browser_tests.page, browser_tests.shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]
WARN, BAD, INK = "rgb(201, 138, 6)", "rgb(214, 59, 59)", "rgb(28, 36, 48)"  # --warn, --down, --ink

# The certificate rows of the node panel: its cells by header, its tone and its text colour.
ROWS_JS = r"""() => {
  const heading = [...document.querySelectorAll("#side h3")].find((h) => h.textContent === "Certificates");
  const table = heading.nextElementSibling.querySelector("table");
  const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  return [...table.querySelectorAll("tbody tr")].map((tr) => ({
    cells: Object.fromEntries(heads.map((head, i) => [head, tr.cells[i].textContent.trim()])),
    tone: tr.dataset.tone, color: getComputedStyle(tr.cells[3]).color,
  }));
}"""


@pytest.fixture(scope="module")
def tls_node(mesh, console):
    node = TlsNode(mesh.redis.url).start()
    yield node
    node.stop()


def _day(epoch: float) -> str:
    """A date as the console writes it (fmt.date): "Dec 2, 2026", in this machine's time zone."""
    moment = datetime.datetime.fromtimestamp(epoch)
    return f"{moment:%b} {moment.day}, {moment.year}"


def _open_node(page, console, name: str) -> None:
    page.goto(console.url + f"/topology/?node={name}")
    page.locator("#side h2", has_text=name).wait_for()
    page.locator("#side h3", has_text="Partial queues").wait_for()


def test_the_node_panel_lists_its_certificates_soonest_first_with_expiry_in_colour(page, console, tls_node, tmp_path):
    _open_node(page, console, "D")
    page.locator("#side h3", has_text="Certificates").wait_for()
    rows = page.evaluate(ROWS_JS)
    by_listener = {c.listener: c for c in tls_node.certificates}
    assert [row["cells"]["Listener"] for row in rows] == ["replication", "stomp+ssl", "wss", "mesh"]
    assert [row["cells"]["Left"] for row in rows] == ["expired", "5 days", "90 days", "300 days"]
    assert [row["tone"] for row in rows] == ["bad", "warn", "ok", "ok"]
    assert [row["color"] for row in rows] == [BAD, WARN, INK, INK]
    for row in rows:
        certificate = by_listener[row["cells"]["Listener"]]
        assert row["cells"]["Subject"] == certificate.subject
        assert row["cells"]["Expires"] == _day(certificate.not_after)
    assert rows[1]["cells"]["Subject"] == SUBJECT
    shot(page, "topology-certificates", tmp_path)


@pytest.fixture(scope="module")
def broker_t(mesh, console, tmp_path_factory):
    broker, certificate = tls_broker(tmp_path_factory.mktemp("broker-t"), mesh.redis.url, days=5)
    yield certificate
    broker.cleanup()


def test_a_real_brokers_certificate_with_5_days_left_shows_in_the_warning_colour(page, console, broker_t, tmp_path):
    _open_node(page, console, "T")
    page.locator("#side h3", has_text="Certificates").wait_for()
    (row,) = page.evaluate(ROWS_JS)
    assert row["cells"] == {"Listener": "stomp+ssl", "Subject": T_SUBJECT,
                            "Expires": _day(broker_t.not_valid_after_utc.timestamp()), "Left": "5 days"}
    assert (row["tone"], row["color"]) == ("warn", WARN)
    shot(page, "topology-certificates-broker", tmp_path)


def test_a_node_without_tls_shows_no_certificates(page, console, tls_node):
    _open_node(page, console, "D")
    page.locator("#side h3", has_text="Certificates").wait_for()  # the page shows them where there are some
    _open_node(page, console, "A")
    assert page.locator("#side h3").all_inner_texts() == ["PARTIAL QUEUES", "LINKS", "TOPIC SUBSCRIPTIONS"]
    assert "certificate" not in page.locator("#side").inner_text().lower()


def _expiring_rows(page, soon, expired) -> None:
    rows = page.locator("#events tbody tr")
    rows.nth(1).wait_for()
    assert rows.count() == 2
    newest, older = (rows.nth(i).locator("td") for i in (0, 1))
    assert newest.nth(1).inner_text() == "D"
    kind = newest.nth(2).locator(".kind")
    assert kind.inner_text() == "certificate_expiring" and "warn" in kind.get_attribute("class").split()
    assert newest.nth(3).inner_text() == f"stomp+ssl certificate {SUBJECT} expires {_day(soon.not_after)} (in 5 days)"
    assert newest.nth(3).locator(".warn").inner_text().startswith("expires ")
    assert older.nth(3).inner_text() == f"replication certificate {expired.subject} expired {_day(expired.not_after)}"
    assert older.nth(3).locator(".bad").inner_text().startswith("expired ")


def test_the_certificate_expiring_event_names_listener_subject_and_expiry(page, console, tls_node, tmp_path):
    by_listener = {c.listener: c for c in tls_node.certificates}
    soon, expired = by_listener["stomp+ssl"], by_listener["replication"]
    page.goto(console.url + "/events/?kind=certificate_expiring&node=D")
    page.locator("#events", has_text="No event matches").wait_for()
    tls_node.expiring(expired)
    tls_node.expiring(soon)
    _expiring_rows(page, soon, expired)  # as they came, live
    page.reload()
    _expiring_rows(page, soon, expired)  # as the API lists them
    shot(page, "events-certificates", tmp_path)
