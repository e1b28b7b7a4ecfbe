"""The Doctor page in real headless Chromium (the fixtures of test_browser.py: a real
Redis, a real 3-node mesh, daphne and the meshwatch worker). A STOMP consumer on B
takes messages and never acks them: the page shows the finding under Warning with its
count, its evidence, its explanation (the keys in code) and the remedy's command; an
admin applies the remedy after a confirmation (through POST diagnosis/ID/remedy, audited
from the doctor) and the finding is gone on Refresh; a
viewer has the command only, and a queue named with HTML is shown as text.
The screenshot is docs/console/doctor.png (``MESHGATE_SCREENSHOTS=docs/console``)."""

from __future__ import annotations

import pytest
from e2e_support import manage_result, unique
from mesh_support import send_many

from model.requests import Diagnosis, Events
from tests.console import test_browser as browser_tests

console, browser, page, shot = browser_tests.console, browser_tests.browser, browser_tests.page, browser_tests.shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]
HOSTILE = "<img src=x onerror=window.pwned=1><b>bold</b>"


def _unacked_finding(mesh, session: str):
    report = manage_result(mesh.a.stomp, Diagnosis(unacked_s=1))
    return next((f for f in report.findings if f.kind == "unacked_old" and f.subject == session), None)


@pytest.fixture
def hold(mesh):
    """hold(queue): a client of B holding 3 unacked deliveries of ``queue``, old enough for
    ``unacked=1``; (client, session)."""
    clients = []

    def holding(queue: str):
        client = mesh.b.client()
        clients.append(client)
        client.subscribe(f"/queue/{queue}", ack="client-individual")
        send_many(mesh.b.client(), f"/queue/{queue}", ["d0", "d1", "d2"])
        client.listener.wait_for(3)
        session = client.connected_frame.headers["session"]
        mesh.wait(lambda: _unacked_finding(mesh, session), "the doctor to see the unacked deliveries")
        return client, session

    yield holding
    for client in clients:
        try:
            client.disconnect()
        except Exception:  # closed by the remedy
            pass


def test_the_doctor_page_shows_a_finding_with_its_remedy_and_applies_it(page, console, mesh, hold, tmp_path):
    queue = unique("orders")
    client, session = hold(queue)
    page.goto(console.url + "/doctor/?unacked=1")
    card = page.locator(f"article.finding[data-finding$='/{session}']")
    card.wait_for()
    assert page.locator("nav a.active").inner_text() == "Doctor"
    assert page.locator("#unacked").input_value() == "1"
    group = page.locator("section.severity-group[data-severity=warning]")
    assert group.locator("h2 .count").inner_text() == str(group.locator("article.finding").count())
    assert card.locator(".finding-head").inner_text().split()[:2] == ["warning", "unacked_old"]
    assert "on B" in card.locator(".finding-head").inner_text()
    evidence = card.locator("dd").nth(0).inner_text()
    assert f"holds 3 unacked deliveries of /queue/{queue}" in evidence, evidence
    assert card.locator("dd").nth(1).locator("code").all_inner_texts() == ["activemq.prefetchSize", "basic.qos"]
    command = card.locator("pre.remedy-code code")
    assert command.inner_text() == f"meshgate close {session} --node B"
    card.locator("details.remedy-request summary").click()
    assert '"action": "close_connection"' in card.locator("details.remedy-request pre").inner_text()
    page.locator("#counts .stat", has_text="Nodes asked").filter(has_text="3").wait_for()
    assert page.locator("#unanswered-card").is_hidden() and page.locator("#problem").is_hidden()
    shot(page, "doctor", tmp_path, full_page=True)

    # Threshold inputs: 300 s is longer than it has been held; the page says nothing is stuck of it.
    page.fill("#unacked", "300")
    page.click("#refresh")
    card.wait_for(state="detached")
    assert "unacked=300" in page.url
    page.fill("#unacked", "1")
    page.click("#refresh")
    card.wait_for()

    # Apply the remedy (POST diagnosis/ID/remedy): confirmed first, as it disconnects; then the
    # connection is closed, audited as close_connection from the doctor, and the finding goes.
    card.get_by_role("button", name="Apply remedy…").click()
    dialog = page.locator("dialog.dialog")
    dialog.wait_for()
    assert f"meshgate close {session} --node B" in dialog.inner_text()
    dialog.locator("button", has_text="Apply").click()
    page.locator("#results .result.ok", has_text=f"Close connection {session}").wait_for()
    client.listener.wait_disconnected()
    mesh.wait(lambda: _unacked_finding(mesh, session) is None, "the finding gone")
    (closed,) = [e for e in manage_result(mesh.b.stomp, Events(kinds=["admin_action"], limit=1000))
                 if e.action == "close_connection" and e.target == session]
    assert closed.ok and closed.result.startswith("doctor unacked_old/") and closed.user == "admin"
    page.click("#refresh")
    card.wait_for(state="detached")


def test_a_viewer_sees_the_command_but_no_apply_button_and_names_as_text(browser, console, mesh, hold):
    queue = unique("doctor") + HOSTILE
    _, session = hold(queue)
    console.add_user("dora", "dora-secret-1")
    viewer = browser_tests.signed_in(browser, console, "dora", "dora-secret-1")
    try:
        viewer.goto(console.url + "/doctor/?unacked=1")
        card = viewer.locator(f"article.finding[data-finding$='/{session}']")
        card.wait_for()
        assert card.locator("pre.remedy-code code").inner_text() == f"meshgate close {session} --node B"
        assert card.get_by_role("button", name="Apply remedy…").count() == 0
        assert card.get_by_role("button", name="Copy").count() == 1
        # The queue's name is shown as the text it is: no element made of it, no script run.
        assert f"/queue/{queue}" in card.locator("dd").nth(0).inner_text()
        assert card.locator("img, b").count() == 0 and viewer.evaluate("window.pwned") is None
        assert not viewer.errors, viewer.errors
    finally:
        viewer.context.close()
