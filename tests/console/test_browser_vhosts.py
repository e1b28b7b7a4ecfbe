"""The vhost selector of the top bar and the Vhosts page in real headless Chromium (the
fixtures of test_browser.py: a real Redis, a real 3-node mesh, daphne and the meshwatch
worker).

Two vhosts hold a queue of the same name: "all vhosts" lists both with their vhost; one
vhost chosen lists its own only, and the choice stays in the URL from page to page
(queues, connections, topology's per-node queues, a queue's own page). On the Vhosts
page an admin adds a vhost, sees its messages counted, is refused deleting it while it
holds messages (the reason shown), and deletes it with "force"; a viewer sees no
controls. Screenshots ``vhost-selector`` and ``vhosts`` (``MESHGATE_SCREENSHOTS=DIR``)."""

from __future__ import annotations

import urllib.parse

import pytest
from e2e_support import manage_result, unique
from mesh_support import send_many
from vhost_support import clients_fixture  # noqa: F401  (the fixture)

from model.requests import VhostList
from tests.console import test_browser as browser_tests
from tests.console.test_browser_definitions import Rest

console, browser, page, shot = browser_tests.console, browser_tests.browser, browser_tests.page, browser_tests.shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The rows of the first table under a box: [{header: cell text}].
TABLE_JS = r"""(box) => {
  const root = document.querySelector(box);
  if (!root) return [];
  const heads = [...root.querySelectorAll("thead th")].map((th) => th.textContent.replace(/[▲▼]/g, "").trim());
  return [...root.querySelectorAll("tbody tr")].filter((tr) => tr.children.length === heads.length).map((tr) =>
    Object.fromEntries(heads.map((head, i) => [head, tr.children[i].innerText.replace(/\s+/g, " ").trim()])));
}"""


@pytest.fixture(scope="module")
def rest(console) -> Rest:
    return Rest(console.url, console.token("admin"))


def table(page, box: str) -> list[dict[str, str]]:
    return page.evaluate(TABLE_JS, box)


def wait_table(page, box: str, check, what: str) -> list[dict[str, str]]:
    """Wait until ``check(rows)`` holds for the table in ``box``."""
    for _ in range(300):
        rows = table(page, box)
        if check(rows):
            return rows
        page.wait_for_timeout(50)
    raise AssertionError(f"{what}: the table in {box} is {rows}")


def add_vhost(rest: Rest, mesh, name: str) -> None:
    rest.ok("POST", "vhosts", {"name": name})
    mesh.wait(lambda: any(row["name"] == name and row["node_count"] == 3
                          for row in rest.ok("GET", "vhosts?page_size=500")["items"]), f"vhost {name} on every node")


def test_the_selector_shows_one_vhost_or_all_and_the_choice_follows_the_pages(page, console, mesh, rest, clients,
                                                                            tmp_path):
    team = unique("team")
    add_vhost(rest, mesh, team)
    queue = unique("orders")
    mesh.send(mesh.a, queue, ["default"])
    tenant = clients.stomp_on(mesh.b.proc, team)
    send_many(tenant, f"/queue/{queue}", ["team-1", "team-2"])
    session = tenant.connected_frame.headers["session"]

    page.goto(console.url + "/queues/?name=" + urllib.parse.quote(queue))
    every = wait_table(page, "#queues", lambda rows: len(rows) == 2, "both vhosts' queues")
    assert sorted((row["Vhost"], row["Messages"]) for row in every) == sorted([("/", "1"), (team, "2")])
    assert page.locator("#vhost-select").input_value() == ""

    page.locator("#vhost-select").focus()  # the selector asks for the vhosts as it is about to be used
    page.locator(f"#vhost-select option[value='{team}']").wait_for(state="attached")
    page.locator("#vhost-select").select_option(team)
    page.wait_for_url(lambda url: "vhost=" + team in url and "name=" in url)  # the name filter stays too
    rows = wait_table(page, "#queues", lambda rows: len(rows) == 1 and "Vhost" not in rows[0], f"{team}'s queue")
    assert rows[0]["Queue"] == queue and rows[0]["Messages"] == "2"
    assert page.locator("#totals").inner_text() == f"1 queue matching “{queue}” in vhost {team}"
    shot(page, "vhost-selector", tmp_path)

    page.click("nav >> text=Connections")  # the menu keeps the choice
    page.wait_for_url(lambda url: "/connections/" in url and "vhost=" + team in url)
    connections = wait_table(page, "#connections", lambda rows: bool(rows), f"{team}'s connections")
    assert [row["Connection"] for row in connections] == [session]
    assert page.locator("#vhost-select").input_value() == team

    page.click("nav >> text=Topology")
    page.wait_for_url(lambda url: "/topology/" in url and "vhost=" + team in url)
    page.goto(page.url + "&node=A")  # A selected, as a click on it does
    page.locator("h3", has_text=f"Partial queues of vhost {team}").wait_for()
    page.locator("text=No queues of vhost " + team + " on this node.").wait_for()  # "/"'s queue on A is not shown

    page.goto(console.url + "/queues/?vhost=" + urllib.parse.quote(team))
    page.locator("#queues a", has_text=queue).click()
    page.wait_for_url(lambda url: f"/queues/{queue}/" in url and "vhost=" + team in url)
    wait_table(page, "#parts", lambda rows: [row.get("Node") for row in rows] == ["B"], f"{team}'s {queue} on B only")

    page.locator("#vhost-select").select_option("")  # all vhosts again: the queues list, unfiltered
    page.wait_for_url(lambda url: url.rstrip("/").endswith("/queues") and "vhost=" not in url)


def test_an_admin_adds_a_vhost_and_deletes_it_with_force_after_a_refusal(page, console, mesh, clients, tmp_path):
    page.allowed.append("status of 409")  # Chromium logs the refused DELETE
    name = unique("billing")
    page.click("nav >> text=Vhosts")
    page.wait_for_url(console.url + "/vhosts/")
    assert page.locator("nav a.active").inner_text() == "Vhosts"
    form = page.locator("#add-vhost")
    form.locator("[name=name]").fill(name)
    form.locator("[name=description]").fill("the billing team")
    form.locator("button").click()
    page.locator("#results .result.ok", has_text=f"Vhost {name}").wait_for()
    wait_table(page, "#vhosts", lambda rows: any(r["Vhost"] == name and r["Per node"].count(" ") >= 2 for r in rows),
               f"{name} listed on every node")
    mesh.wait(lambda: name in {r.name for r in manage_result(mesh.c.stomp, VhostList())}, f"{name} on C")
    send_many(clients.stomp_on(mesh.c.proc, name), "/queue/invoices", ["due"])
    rows = wait_table(page, "#vhosts", lambda rows: any(r["Vhost"] == name and r["Messages"] == "1" for r in rows),
                      f"{name}'s message counted")
    assert next(r for r in rows if r["Vhost"] == name)["From"] == "added for the mesh"
    assert next(r for r in rows if r["Vhost"] == "/")["From"] == "built in"
    shot(page, "vhosts", tmp_path)

    row = page.locator("#vhosts tbody tr[data-vhost='" + name + "']")
    row.locator("button[data-action=delete]").click()
    dialog = page.locator("dialog.dialog")
    assert "drop them for good (1 message now)" in dialog.inner_text(), dialog.inner_text()
    dialog.locator("button[value=ok]").click()
    refused = page.locator("#results .result.bad", has_text=f"Vhost {name} not deleted")
    refused.wait_for()
    assert "holds 1 message(s)" in refused.inner_text() and "force" in refused.inner_text()

    row.locator("button[data-action=delete]").click()
    dialog.locator("input[name=force]").check()
    dialog.locator("button[value=ok]").click()
    page.locator("#results .result.ok", has_text=f"Vhost {name} deleted, 1 message dropped").wait_for()
    wait_table(page, "#vhosts", lambda rows: rows and all(r["Vhost"] != name for r in rows), f"{name} gone")


def test_a_viewer_sees_the_vhosts_without_controls(browser, console):
    console.add_user("vicky", "vicky-secret-1")
    viewer = browser_tests.signed_in(browser, console, "vicky", "vicky-secret-1")
    try:
        viewer.goto(console.url + "/vhosts/")
        wait_table(viewer, "#vhosts", lambda rows: any(r["Vhost"] == "/" for r in rows), "the default vhost")
        assert viewer.locator("#add-vhost").count() == 0
        assert viewer.locator("#vhosts button").count() == 0
        assert not viewer.errors, viewer.errors
    finally:
        viewer.context.close()
