"""The Message page in real headless Chromium (the fixtures of test_browser.py: a real
Redis, a real 3-node mesh with journeys on, daphne and the meshwatch worker). A traced
message sent on A goes to a consumer on B that leaves without acking; B redistributes it
to a consumer on C, which acks it. The page lists its steps in the API's causal order,
draws its two hops A → B → C on the mesh (numbered), marks A (received) and C (acked);
an untraced id is explained; a viewer is told the page is for admins; the queue page's
browse list links each message id to the page (a queue named with HTML shows as
text), and the page's search finds the message (its HTML body and header show as text).
The screenshot is docs/console/message.png (``MESHGATE_SCREENSHOTS=docs/console``)."""

from __future__ import annotations

import pytest
from e2e_support import unique

from tests.console import test_browser as browser_tests

console, browser, page, shot = browser_tests.console, browser_tests.browser, browser_tests.page, browser_tests.shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]
HOSTILE = "<img src=x onerror=window.pwned=1><b>bold</b>"


def _demand_seen(page, mesh, on: str, queue: str) -> None:
    """Wait until node ``on`` lists consumers of ``queue`` elsewhere: until then it keeps
    what it is sent (or what comes back to its queue) instead of forwarding it."""
    seen = """([on, queue]) => MG.api('nodes/' + on).then((detail) =>
        detail.partial_queues.some((q) => q.name === queue && q.remote_demand.some((d) => d.node)))"""
    mesh.wait(lambda: page.evaluate(seen, [on, queue]) or None, f"{on} to see consumers of {queue} elsewhere")


def test_the_message_page_draws_a_redistributed_messages_path_and_lists_its_steps(page, console, mesh, tmp_path):
    queue = unique("journey")
    first = mesh.b.client()
    first.subscribe(f"/queue/{queue}", ack="client-individual")
    _demand_seen(page, mesh, "A", queue)
    producer = mesh.a.client()
    try:
        producer.send(f"/queue/{queue}", '{"order": 1042}', headers={"trace": "true", "persistent": "true"},
                      receipt=True)
        message_id = first.listener.wait_for(1)[0].headers["message-id"]
    finally:
        producer.disconnect()
    second = mesh.c.client()
    second.subscribe(f"/queue/{queue}")  # auto-ack
    _demand_seen(page, mesh, "B", queue)
    first.disconnect()  # leaves without acking: requeued on B, redistributed to C
    try:
        assert second.listener.wait_for(1)[0].headers["message-id"] == message_id
    finally:
        second.disconnect()

    page.goto(console.url + f"/messages/{message_id}/")
    page.wait_for_function("() => document.body.dataset.journey !== undefined")
    rows = page.locator("#steps tbody tr")
    wanted = [("A", "received"), ("A", "forwarded"), ("B", "link_received"), ("B", "delivered"), ("B", "requeued"),
              ("B", "forwarded"), ("C", "link_received"), ("C", "delivered"), ("C", "acked")]

    def listed():
        return [(row.get_attribute("data-node"), row.get_attribute("data-step")) for row in rows.all()]

    def has_every_step() -> bool:
        steps = iter(listed())
        return all(step in steps for step in wanted)  # in this order, other steps between

    for _ in range(40):  # the last steps reach the nodes' records a moment after the ack
        if has_every_step() and ("B", "peer_stored") in listed():
            break
        page.wait_for_timeout(250)
        page.reload()
        page.wait_for_function("() => document.body.dataset.journey !== undefined")
    assert has_every_step(), listed()
    api = page.evaluate("(id) => MG.api('messages/' + encodeURIComponent(id) + '/journey')", message_id)
    names = api["nodes"]
    assert listed() == [(names[s["node"]], s["step"]) for s in api["steps"]]  # the API's causal order
    requeued = rows.filter(has=page.locator("td", has_text="requeued")).first
    assert "consumer gone" in requeued.inner_text()
    assert rows.first.locator("td").nth(0).inner_text() == "+0.0"

    graph = page.locator("#graph")
    assert graph.get_attribute("data-hops") == "2"  # two highlighted (numbered) edges
    assert graph.get_attribute("data-visited") == "3"
    hops = page.locator("#path-hops li")
    assert [(hop.get_attribute("data-from"), hop.get_attribute("data-to")) for hop in hops.all()] == [
        ("A", "B"), ("B", "C")]
    # What the graph's cytoscape elements hold: the edges of class "hop", the nodes of class "origin" and "acked".
    assert graph.get_attribute("data-path") == "A>B:1 B>C:2"
    assert (graph.get_attribute("data-origin"), graph.get_attribute("data-acked")) == ("A", "C")
    assert "2 hops" in page.locator("#path-summary").inner_text()
    facts = page.locator("#facts").inner_text()
    assert f"/queue/{queue}" in facts and "Received on\nA" in facts.replace("\t", "\n"), facts
    assert page.locator("#failures-card").is_hidden() and page.locator("#problem").is_hidden()
    assert page.title().startswith(message_id)
    shot(page, "message", tmp_path, full_page=True)

    # The lookup form: another id, here one no node traced.
    page.fill("#message-id", "nobody-1-1")
    page.click("#lookup button[type=submit]")
    page.wait_for_url(console.url + "/messages/nobody-1-1/")
    page.locator("#steps", has_text="not traced").wait_for()
    assert page.locator("#graph").get_attribute("data-hops") == "0"


def test_the_queue_pages_browse_list_links_to_a_messages_journey(page, console, mesh):
    queue = unique("waiting") + HOSTILE
    producer = mesh.b.client()
    try:
        producer.send(f"/queue/{queue}", "traced, waiting " + HOSTILE, headers={"trace": "true", "note": HOSTILE},
                      receipt=True)
    finally:
        producer.disconnect()
    page.goto(console.url + f"/queues/{queue}/")
    link = page.locator("#browse-list a.message-link")
    link.wait_for()
    message_id = link.inner_text()
    link.click()
    page.wait_for_url(f"{console.url}/messages/{message_id}/")
    page.wait_for_function("() => document.body.dataset.journey !== undefined")
    rows = page.locator("#steps tbody tr")
    listed = [(r.get_attribute("data-node"), r.get_attribute("data-step")) for r in rows.all()]
    assert listed == [("B", "received"), ("B", "queued")], listed
    assert page.locator("#graph").get_attribute("data-hops") == "0"
    assert "stayed on B" in page.locator("#path-summary").inner_text()
    assert rows.first.locator("td").nth(4).inner_text().startswith(f"to /queue/{queue} · STOMP")  # as text
    assert page.evaluate("window.pwned") is None and page.locator("#steps b").count() == 0

    # The search form finds it by its queue; its body and header, from the producer, show as text.
    page.fill("#search input[name=queue]", queue)
    page.click("#search button[type=submit]")
    page.wait_for_function("() => document.body.dataset.hits !== undefined")
    [hit] = page.locator("#search-hits tbody tr").all()
    assert hit.locator("a.hit-link").get_attribute("href") == f"/messages/{message_id}/"
    assert f"traced, waiting {HOSTILE}" in hit.inner_text() and f"note={HOSTILE}" in hit.inner_text()
    assert page.evaluate("window.pwned") is None and page.locator("#search-hits b, #search-hits img").count() == 0


def test_a_viewer_is_told_journeys_are_for_admins(browser, console):
    console.add_user("vera", "vera-secret-1")
    viewer = browser_tests.signed_in(browser, console, "vera", "vera-secret-1")
    try:
        viewer.goto(console.url + "/messages/?id=x-1-1")  # the lookup form without script
        viewer.wait_for_url(console.url + "/messages/x-1-1/")
        assert "admins only" in viewer.locator("#admins-only").inner_text()
        assert viewer.locator("#graph").count() == 0
        assert not viewer.errors, viewer.errors
    finally:
        viewer.context.close()
