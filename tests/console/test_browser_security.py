"""The console's hardening seen from outside, with test_browser.py's fixtures (real
headless Chromium, daphne and the worker on a real 3-node mesh and Redis): every page
works under the Content-Security-Policy with no violation (and the policy is enforced:
an injected inline script does not run); signing out in one tab sends the other tab's
live socket to the sign-in page at once; daphne refuses the live socket to a page of
another port or scheme (a real WebSocket client) and answers bad messages with an error;
the sign-in page says when to try again once the throttle refuses."""

from __future__ import annotations

import json
import re

import pytest
from e2e_support import unique
from mesh_support import send_many
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from meshgate.redis_server import free_port
from tests.console import test_browser as browser_tests

# test_browser.py's fixtures, for this module's own console and browser.
console, browser, page = browser_tests.console, browser_tests.browser, browser_tests.page

pytestmark = [pytest.mark.browser, pytest.mark.slow]
# Every violation of the policy a page reports, kept where the test can read it.
RECORD_VIOLATIONS = """window.violations = [];
document.addEventListener("securitypolicyviolation",
  (event) => window.violations.push(event.violatedDirective + " " + (event.blockedURI || "inline")));"""


def test_every_page_works_under_the_policy_with_no_violation(page, console, mesh):
    queue = unique("csp")
    send_many(mesh.a.client(), f"/queue/{queue}", ["m"])
    page.context.add_init_script(RECORD_VIOLATIONS)
    paths = [f"/{name}/" if name != "overview" else "/" for name in browser_tests.PAGES] + [f"/queues/{queue}/"]
    for path in paths:
        response = page.goto(console.url + path, wait_until="networkidle")
        assert "script-src 'self';" in response.headers["content-security-policy"], path
        page.wait_for_function("() => document.getElementById('live').dataset.state === 'live'")  # ws: under 'self'
        assert page.evaluate("() => window.violations") == [], path
        if path == "/topology/":  # cytoscape took its container's style from the file, added none inline
            assert page.evaluate("() => document.getElementById('__________cytoscape_stylesheet').tagName") == "LINK"
    # The policy is enforced, not merely sent: an injected inline script and style attribute do nothing.
    page.allowed.append("violates the following Content Security Policy directive")
    ran = page.evaluate("""() => {
      const script = document.createElement("script");
      script.textContent = "window.injected = true";
      document.body.append(script);
      const box = document.createElement("div");
      box.setAttribute("style", "display: none");
      document.body.append(box);
      return [window.injected === true, getComputedStyle(box).display];
    }""")
    assert ran == [False, "block"]
    page.wait_for_function("() => window.violations.length >= 2")
    assert {v.split()[0] for v in page.evaluate("() => window.violations")} <= {
        "script-src-elem", "style-src-attr", "script-src", "style-src"}


def test_signing_out_in_one_tab_sends_the_other_to_sign_in(page, console):
    page.wait_for_function("() => document.getElementById('live').dataset.state === 'live'")
    other = page.context.new_page()
    other.goto(console.url + "/events/", wait_until="networkidle")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url(re.compile(r"/login/"))
    # The first tab's socket was closed (4401) by the sign-out itself, not by its periodic
    # re-check (every 10 s): the page turns to sign-in well before that.
    page.wait_for_url(re.compile(r"/login/\?next=%2F$"), timeout=5_000)


def test_the_live_socket_is_the_consoles_own_pages_only(page, console):
    cookie = "; ".join(f"{c['name']}={c['value']}" for c in page.context.cookies() if c["name"] == "sessionid")
    assert cookie
    address = f"ws://127.0.0.1:{console.port}/ws/mesh"
    for origin in (f"http://127.0.0.1:{free_port()}", f"https://127.0.0.1:{console.port}", None):
        with pytest.raises(InvalidStatus) as refused:
            connect(address, origin=origin, additional_headers={"Cookie": cookie}, open_timeout=10).close()
        assert refused.value.response.status_code == 403, origin
    with connect(address, origin=console.url, additional_headers={"Cookie": cookie}, open_timeout=10) as socket:
        socket.send("not json{")
        assert json.loads(socket.recv(timeout=10))["type"] == "error"
        socket.send(json.dumps({"subscribe": ["mesh"]}))
        state = json.loads(socket.recv(timeout=10))
        assert state["type"] == "mesh" and {row["name"] for row in state["nodes"]} == {"A", "B", "C"}


def test_the_sign_in_page_says_when_to_try_again(browser, console):
    context = browser.new_context()
    try:
        sign_in = context.new_page()
        sign_in.goto(console.url + "/login/")
        name = unique("guess")
        for attempt in range(6):  # CONSOLE_LOGIN_THROTTLE: 5 failures per user name
            sign_in.fill("input[name=username]", name)
            sign_in.fill("input[name=password]", f"guess-{attempt}")
            sign_in.click("button[type=submit]")
            sign_in.wait_for_load_state()
        assert re.search(r"try again in \d+ s", sign_in.locator(".problem").inner_text())
    finally:
        context.close()
