"""Authentication (users with `meshgate passwd` hashes) and authorization entries;
anonymous mode and its start-up warning."""

from __future__ import annotations

import re

import pika
import pika.exceptions
import pytest
from amqp_support import AMQP_ON, amqp_port
from e2e_support import manage, module_broker, security_config, unique
from stomp_client import ConnectRefused

from model.events import USER_LIMIT
from model.requests import Events

USERS = {"alice": ["admins"], "bob": ["readers"], "carol": ["admins"], "dave": ["operators"]}
RULES = [
    {"destination": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
    {"destination": "/queue/public.>", "read": ["readers"]},
    {"destination": "/topic/news.>", "read": ["readers"], "write": ["bob"]},
    {"destination": "/queue/meshgate.management", "write": ["operators"]},
    {"destination": "/temp-queue/>", "read": ["operators"], "write": ["operators"]},
]

ALICE = {"login": "alice", "passcode": "alice-secret"}
BOB = {"login": "bob", "passcode": "bob-secret"}


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, hashes):
    with module_broker(tmp_path_factory, "secure", security_config(hashes, USERS, RULES), sets=[AMQP_ON]) as broker:
        yield broker


def _warning_lines(broker) -> list[str]:
    text = broker.stdout() + "\n" + broker.stderr()
    return [line for line in text.splitlines()
            if re.search(r"warn", line, re.I) and re.search(r"anonymous|no users|credential|auth", line, re.I)]


# -- authentication -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "login, passcode",
    [("alice", "wrong"), ("alice", ""), ("mallory", "alice-secret"), (None, None), ("bob", "alice-secret")],
)
def test_wrong_credentials_get_error_then_close(secure_broker, raw, version, login, passcode):
    client = raw(secure_broker)
    headers = {"host": "localhost"}
    if version != "1.0":
        headers["accept-version"] = version
    if login is not None:
        headers["login"] = login
    if passcode is not None:
        headers["passcode"] = passcode
    frames = client.closed_after("CONNECT", headers)
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].headers.get("message")


def test_a_refused_login_of_any_length_is_recorded_cut_short(secure_broker, raw):
    """A refused login is an authentication_failed event with the user name the client
    gave: at most USER_LIMIT characters of it, however long it was (STOMP and AMQP)."""
    stomp_user, amqp_user = "s" * 9000, "a" * 100_000
    client = raw(secure_broker)
    client.send_frame("CONNECT", {"accept-version": "1.2", "host": "x", "login": stomp_user, "passcode": "x"})
    assert [f.command for f in client.wait_closed()] == ["ERROR"]
    parameters = pika.ConnectionParameters("127.0.0.1", amqp_port(secure_broker), connection_attempts=1,
                                           credentials=pika.PlainCredentials(amqp_user, "x"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(parameters)
    events = manage(secure_broker.port, Events(kinds=["authentication_failed"]), ALICE["login"],
                    ALICE["passcode"]).result
    users = {event.user for event in events}
    assert {stomp_user[:USER_LIMIT], amqp_user[:USER_LIMIT]} <= users, sorted(len(u or "") for u in users)
    assert all(len(user or "") <= USER_LIMIT for user in users)


def test_wrong_password_refused_for_stomp_py(secure_broker, connect):
    with pytest.raises(ConnectRefused) as info:
        connect(secure_broker, "1.2", login="alice", passcode="nope")
    assert info.value.frame is not None and info.value.frame.cmd == "ERROR"


def test_right_password_works(secure_broker, connect, version):
    destination = "/queue/" + unique("private")
    client = connect(secure_broker, version, **ALICE)
    client.subscribe(destination)
    client.send(destination, "for alice", receipt=True)
    assert client.listener.wait_for(1)[0].body == "for alice"


def test_repeated_logins_keep_working(secure_broker, connect):
    for _ in range(3):
        connect(secure_broker, "1.2", **BOB).disconnect()
    with pytest.raises(ConnectRefused):
        connect(secure_broker, "1.2", login="bob", passcode="bob-secret-not")


# -- authorization --------------------------------------------------------------------------


def test_send_without_write_permission_is_an_error(secure_broker, connect, raw):
    destination = "/queue/public." + unique("ro")
    watcher = connect(secure_broker, **ALICE)
    watcher.subscribe(destination)
    client = raw(secure_broker)
    client.connect("1.2", {"login": "bob", "passcode": "bob-secret"})
    frames = client.closed_after("SEND", {"destination": destination, "receipt": "denied"}, "sneaky")
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].headers.get("receipt-id") == "denied"
    watcher.send(destination, "fence")
    assert [m.body for m in watcher.listener.wait_for_body("fence")] == ["fence"]


def test_read_permission_allows_subscribe(secure_broker, connect):
    destination = "/queue/public." + unique("news")
    reader = connect(secure_broker, **BOB)
    reader.subscribe(destination)
    writer = connect(secure_broker, **ALICE)
    writer.send(destination, "hello readers", receipt=True)
    assert reader.listener.wait_for(1)[0].body == "hello readers"


def test_subscribe_without_read_permission_is_an_error(secure_broker, connect):
    client = connect(secure_broker, **BOB)
    client.conn.subscribe("/queue/" + unique("secret"), id="s", headers={"receipt": "sub-denied"})
    error = client.listener.wait_error()
    assert error.headers.get("receipt-id") == "sub-denied"
    client.listener.wait_disconnected()


def test_user_name_counts_as_a_group(secure_broker, connect):
    destination = "/topic/news." + unique("b")
    reader = connect(secure_broker, **BOB)
    reader.subscribe(destination)
    reader.send(destination, "bob may publish news", receipt=True)
    assert reader.listener.wait_for(1)[0].body == "bob may publish news"


def test_wildcard_entry_does_not_cover_parent(secure_broker, connect):
    client = connect(secure_broker, **BOB)
    client.conn.subscribe("/queue/public", id="s", headers={"receipt": "parent"})
    assert client.listener.wait_error().headers.get("receipt-id") == "parent"


def test_temp_queue_allowed_where_authorized(secure_broker, connect):
    service = "/queue/" + unique("svc")
    responder = connect(secure_broker, **ALICE)
    responder.subscribe(service)
    requester = connect(secure_broker, **ALICE)
    requester.subscribe("/temp-queue/r")
    requester.send(service, "q", headers={"reply-to": "/temp-queue/r"})
    [request] = responder.listener.wait_for(1)
    responder.send(request.headers["reply-to"], "a")
    assert requester.listener.wait_for(1)[0].body == "a"


def test_temp_queue_needs_an_authorization_entry(secure_broker, connect):
    """docs/configuration.md: if no entry matches a destination nobody may use it, and
    temporary queues need their own entry (/temp-queue/>). bob has none."""
    client = connect(secure_broker, **BOB)
    client.conn.subscribe("/temp-queue/mine", id="t", headers={"receipt": "temp"})
    client.listener.wait_until(lambda: bool(client.listener.errors or client.listener.receipts), "ERROR or RECEIPT")
    assert client.listener.errors, "bob subscribed to /temp-queue/mine without any /temp-queue/ authorization"


def test_users_without_authorization_entries_may_do_everything(broker_factory, connect, hashes):
    config = f'[security.users.alice]\npassword = "{hashes["alice"]}"\n'
    broker = broker_factory(config=config)
    client = connect(broker, **ALICE)
    destination = "/queue/" + unique("any")
    client.subscribe(destination)
    client.send(destination, "ok", receipt=True)
    assert client.listener.wait_for(1)[0].body == "ok"
    with pytest.raises(ConnectRefused):
        connect(broker, login="alice", passcode="bad")
    assert _warning_lines(broker) == []


# -- anonymous mode -------------------------------------------------------------------------


def test_anonymous_mode_accepts_anyone_and_says_so(broker_factory, connect):
    broker = broker_factory()  # on 127.0.0.1: the local default, said at INFO, not a warning
    for credentials in ({}, {"login": "anyone", "passcode": "anything"}, {"login": "alice", "passcode": ""}):
        client = connect(broker, **credentials)
        destination = "/queue/" + unique("anon")
        client.subscribe(destination)
        client.send(destination, "hi", receipt=True)
        assert client.listener.wait_for(1)[0].body == "hi"
    text = broker.stdout() + "\n" + broker.stderr()
    assert re.search(r"INFO .*no users configured: any client may connect without credentials \(loopback only\)",
                     text), f"no anonymous-mode line in the output:\n{broker.describe()}"
    assert _warning_lines(broker) == []


def test_secure_broker_does_not_warn_about_anonymous_mode(secure_broker):
    assert _warning_lines(secure_broker) == []


def test_passwd_hashes_are_salted(hashes):
    from e2e_support import password_hash

    again = password_hash("alice-secret")
    assert again != hashes["alice"]
    assert again.startswith("pbkdf2_sha256$200000$")


def test_passcode_with_colon_and_backslash_is_taken_literally(secure_broker, connect, raw, version):
    passcode = "c:ar\\ol\\n"
    client = connect(secure_broker, version, login="carol", passcode=passcode)
    assert client.connected_frame.headers.get("session")
    refused = raw(secure_broker)
    # Unescaping CONNECT headers would turn this into the right password: it must not.
    escaped = "c\\car\\\\ol\\\\n"
    refused.send_frame("CONNECT", {"accept-version": "1.2", "host": "h", "login": "carol", "passcode": escaped})
    assert [f.command for f in refused.wait_closed()] == ["ERROR"]


def test_durable_subscription_removal_needs_admin(secure_broker, connect):
    destination = "/topic/news." + unique("d")
    client_id = unique("bob-client")
    bob = connect(secure_broker, headers={"client-id": client_id}, **BOB)
    bob.subscribe(destination, id="d", headers={"activemq.subscriptionName": "s"})
    bob.conn.unsubscribe("d", headers={"activemq.subscriptionName": "s", "receipt": "rm"})
    error = bob.listener.wait_error()
    assert error.headers.get("receipt-id") == "rm"


def test_frames_pipelined_after_connect_wait_for_authentication(secure_broker, raw, connect):
    from raw_stomp import encode

    destination = "/queue/" + unique("pipelined")
    client = raw(secure_broker)
    client.sendall(
        encode("CONNECT", {"accept-version": "1.2", "host": "h", "login": "alice", "passcode": "alice-secret"})
        + encode("SUBSCRIBE", {"destination": destination, "id": "s", "receipt": "sub"})
        + encode("SEND", {"destination": destination, "receipt": "sent"}, "one")
        + encode("SEND", {"destination": destination, "receipt": "sent-2"}, "two")
    )
    frames = client.read_frames(6)
    assert frames[0].command == "CONNECTED"
    assert [f.headers["receipt-id"] for f in frames if f.command == "RECEIPT"] == ["sub", "sent", "sent-2"]
    assert [f.body for f in frames if f.command == "MESSAGE"] == [b"one", b"two"]


def test_frames_pipelined_after_a_refused_connect_are_not_executed(secure_broker, raw, connect):
    from raw_stomp import encode

    destination = "/queue/" + unique("intruder")
    watcher = connect(secure_broker, **ALICE)
    watcher.subscribe(destination)
    client = raw(secure_broker)
    client.sendall(
        encode("CONNECT", {"accept-version": "1.2", "host": "h", "login": "alice", "passcode": "guess"})
        + encode("SEND", {"destination": destination, "receipt": "sneak"}, "intruder")
    )
    frames = client.wait_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    watcher.send(destination, "fence")
    assert [m.body for m in watcher.listener.wait_for_body("fence")] == ["fence"]


def test_forgetting_a_node_needs_admin_on_the_management_address(secure_broker):
    from model.requests import Forget, Nodes

    # dave may ask for views, not change anything.
    answer = manage(secure_broker.port, Forget(forget="some-node"), "dave", "dave-secret")
    assert not answer.ok and answer.error.code == "forbidden" and "admin permission" in answer.error.message, answer
    assert manage(secure_broker.port, Nodes(), "dave", "dave-secret").ok
    answer = manage(secure_broker.port, Forget(forget="some-node"), "alice", "alice-secret")
    assert answer.error.code == "conflict" and answer.error.message == "this node is not in a mesh", answer
