"""The sign-in throttle (console/ui/throttle.py), through the real sign-in page: after a
few failed sign-ins for one user name, or more from one address, sign-in is refused with
429 and a Retry-After until the window ends — even with the right password — and the page
says when to try again; a client that asks for JSON gets the API's error shape."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client

from console.ui import throttle

pytestmark = pytest.mark.django_db
WINDOW = 60


@pytest.fixture(autouse=True)
def limits(settings):
    settings.CONSOLE_LOGIN_THROTTLE = {"per_user": 3, "per_address": 5, "window": WINDOW}
    cache.clear()
    yield
    cache.clear()


def sign_in(username: str, password: str, address: str = "10.0.0.1", **headers):
    client = Client(HTTP_HOST="127.0.0.1", REMOTE_ADDR=address, **headers)
    response = client.post("/login/", {"username": username, "password": password})
    return response, "_auth_user_id" in client.session


def test_a_user_name_is_refused_after_its_failures_from_any_address(users):
    for _ in range(3):
        response, signed_in = sign_in("viewer", "wrong")
        assert response.status_code == 200 and b"Wrong user name or password" in response.content
    response, signed_in = sign_in("viewer", "viewer-secret", address="10.0.0.2")  # right password, another address
    assert response.status_code == 429 and not signed_in
    assert 0 < int(response["Retry-After"]) <= WINDOW
    assert f"try again in {response['Retry-After']} s".encode() in response.content
    assert b"Wrong user name or password" not in response.content
    assert sign_in("operator", "operator-secret")[1]  # other names sign in from the same address


def test_an_address_is_refused_after_its_failures_for_any_name(users):
    for name in ("a", "b", "c", "d", "e"):  # names that do not exist count too
        assert sign_in(name, "wrong")[0].status_code == 200
    response, signed_in = sign_in("operator", "operator-secret")
    assert response.status_code == 429 and not signed_in
    assert sign_in("operator", "operator-secret", address="10.0.0.9")[1]


def test_a_client_asking_for_json_gets_the_apis_error(users):
    for _ in range(3):
        sign_in("viewer", "wrong")
    response, _ = sign_in("viewer", "viewer-secret", HTTP_ACCEPT="application/json")
    assert response.status_code == 429 and response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "throttled" and f"try again in {response['Retry-After']} s" in error["message"]


def test_signing_in_clears_the_users_count_and_the_window_ends(users, monkeypatch):
    for _ in range(2):
        sign_in("viewer", "wrong")
    assert sign_in("viewer", "viewer-secret")[1]
    for _ in range(2):  # 2 again, not 4: the user's count started over
        sign_in("viewer", "wrong")
    assert sign_in("viewer", "viewer-secret")[1]
    for _ in range(3):
        sign_in("viewer", "wrong")
    assert sign_in("viewer", "viewer-secret")[0].status_code == 429
    now = throttle.time.time()
    monkeypatch.setattr(throttle.time, "time", lambda: now + WINDOW + 1)  # the window's end, without waiting
    assert sign_in("viewer", "viewer-secret")[1]
