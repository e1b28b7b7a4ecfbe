"""The Permissions card of the Vhosts page in real headless Chromium (the fixtures of
test_browser.py: a real Redis, a real 3-node mesh, daphne and the meshwatch worker):
it warns that the first permission turns vhost permissions on; an admin sets a user's
patterns for every node (the row lists the nodes holding it and its source) and clears
them after a confirmation; a viewer sees the entries without controls. Screenshot
``vhost-permissions`` (``MESHGATE_SCREENSHOTS=DIR``)."""

from __future__ import annotations

import pytest
from e2e_support import unique

from tests.console import test_browser as browser_tests
from tests.console.test_browser_vhosts import add_vhost, rest, wait_table  # noqa: F401  (rest: the fixture)

console, browser, page, shot = browser_tests.console, browser_tests.browser, browser_tests.page, browser_tests.shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_admin_sets_and_clears_a_users_permissions_for_every_node(page, console, mesh, rest, tmp_path):  # noqa: F811
    team = unique("team")
    add_vhost(rest, mesh, team)
    page.goto(console.url + "/vhosts/")
    assert "turns vhost permissions on" in page.locator("#permissions-warning").inner_text()
    page.locator(f"#permissions-vhost option[value='{team}']").wait_for(state="attached")
    page.locator("#permissions-vhost").select_option(team)
    page.locator("#permissions", has_text=f"No permissions in vhost {team}").wait_for()

    form = page.locator("#set-permission")
    form.locator("[name=who]").fill("bob")
    form.locator("[name=configure]").fill(r"^bob\.")
    form.locator("[name=write]").fill(r"^amq\.default$")
    form.locator("[name=read]").fill("")
    form.locator("button").click()
    page.locator("#permission-results .result", has_text=f"Permissions of user bob in vhost {team} set").wait_for()
    rows = wait_table(page, "#permissions", lambda rows: len(rows) == 1 and rows[0]["Nodes"] == "A B C",
                      "bob's entry on every node")
    assert {key: rows[0][key] for key in ("User or group", "Configure", "Write", "Read", "From")} == {
        "User or group": "user bob", "Configure": r"^bob\.", "Write": r"^amq\.default$", "Read": '""',
        "From": "set for the mesh"}, rows
    shot(page, "vhost-permissions", tmp_path, full_page=True)

    page.allowed.append("status of 400")  # Chromium logs the refused PUT
    form.locator("[name=who]").fill("carol")
    form.locator("[name=read]").fill("(unclosed")
    form.locator("button").click()
    refused = page.locator("#permission-results .result.bad", has_text="Permissions of user carol not set")
    refused.wait_for()
    assert "regular expression" in refused.inner_text()

    page.locator("#permissions tbody tr[data-who='user:bob'] button[data-action=clear]").click()
    dialog = page.locator("dialog.dialog")
    assert "next connections to the vhost are refused" in dialog.inner_text()
    dialog.locator("button[value=ok]").click()
    page.locator("#permission-results .result.ok", has_text="Permissions of user bob cleared").wait_for()
    page.locator("#permissions", has_text=f"No permissions in vhost {team}").wait_for()


def test_a_viewer_sees_permissions_without_controls(browser, console):
    console.add_user("vera", "vera-secret-1")
    viewer = browser_tests.signed_in(browser, console, "vera", "vera-secret-1")
    try:
        viewer.goto(console.url + "/vhosts/")
        viewer.locator("#permissions", has_text="No permissions in vhost /").wait_for()
        assert viewer.locator("#set-permission").count() == 0
        assert viewer.locator("#permissions button").count() == 0
        assert not viewer.errors, viewer.errors
    finally:
        viewer.context.close()
