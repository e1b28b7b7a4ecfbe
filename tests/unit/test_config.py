"""meshgate.config: TOML files on disk, defaults, validation messages, overrides."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from gateway.auth import hash_password
from meshgate.config import (
    AuthorizationEntry,
    ConfigError,
    load_config,
    parse_address,
    parse_override,
    parse_size,
)
from tests.unit.config_support import error, load, stomp_tls, write

MiB = 1024 * 1024
# Few iterations: these tests are about config, not about PBKDF2's cost.
HASH = hash_password("secret", iterations=1000)


# --- defaults --------------------------------------------------------------


def test_no_file_gives_documented_defaults() -> None:
    config = load_config(None)
    assert config.name == socket.gethostname()
    assert config.data_dir == f"./data/{socket.gethostname()}"
    assert config.stomp.bind == ("127.0.0.1", 61613)
    assert config.stomp.max_frame_size == 100 * MiB
    assert config.stomp.max_headers == 1000
    assert config.stomp.max_header_length == 10240
    assert config.stomp.heartbeat_send_ms == 10000
    assert config.stomp.heartbeat_receive_ms == 10000
    assert config.stomp.heartbeat_grace == 1.5
    assert config.stomp.max_connections == 100000
    assert config.stomp.tls is None
    assert config.broker.memory_limit == 256 * MiB
    assert config.broker.default_prefetch == 1000
    assert config.broker.max_delivery_attempts == 10
    assert config.broker.dead_letter_queue == "DLQ"
    assert config.broker.expiry_queue == ""
    assert config.store.sync == "always"
    assert config.store.journal_file_size == 32 * MiB
    assert config.store.max_sync_delay_ms == 0
    assert dict(config.security.users) == {}
    assert config.security.authorization == ()
    assert config.anonymous is True


def test_empty_file_equals_no_file(tmp_path: Path) -> None:
    assert load(tmp_path, "") == load_config(None)


def test_data_dir_default_follows_name(tmp_path: Path) -> None:
    assert load(tmp_path, 'name = "n7"').data_dir == "./data/n7"


def test_config_is_immutable() -> None:
    config = load_config(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.stomp.max_headers = 5  # type: ignore[misc]


# --- every section ---------------------------------------------------------


def test_every_section_parses(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        f"""
        name = "n1"
        data_dir = "/var/lib/meshgate"

        [stomp]
        bind = "0.0.0.0:61614"
        max_frame_size = "1MiB"
        max_headers = 50
        max_header_length = 2048
        heartbeat_send_ms = 0
        heartbeat_receive_ms = 2500
        heartbeat_grace = 2
        max_connections = 10

        [broker]
        memory_limit = "1GiB"
        default_prefetch = 1
        max_delivery_attempts = 3
        dead_letter_queue = "dead.letters"
        expiry_queue = "expired"

        [store]
        sync = "never"
        journal_file_size = "8 MB"
        max_sync_delay_ms = 5

        [security.users.alice]
        password = "{HASH}"
        groups = ["admins", "ops"]

        [security.users.bob]
        password = "{HASH}"

        [[security.authorization]]
        destination = "/queue/orders.>"
        read = ["ops"]
        write = ["bob"]

        [[security.authorization]]
        destination = ">"
        admin = ["admins"]
        """,
    )
    assert (config.name, config.data_dir) == ("n1", "/var/lib/meshgate")
    stomp = config.stomp
    assert stomp.bind == ("0.0.0.0", 61614)
    assert (stomp.max_frame_size, stomp.max_headers, stomp.max_header_length) == (
        MiB,
        50,
        2048,
    )
    assert (stomp.heartbeat_send_ms, stomp.heartbeat_receive_ms) == (0, 2500)
    assert stomp.heartbeat_grace == 2.0 and isinstance(stomp.heartbeat_grace, float)
    assert stomp.max_connections == 10
    broker = config.broker
    assert broker.memory_limit == 1024**3
    assert (broker.default_prefetch, broker.max_delivery_attempts) == (1, 3)
    assert (broker.dead_letter_queue, broker.expiry_queue) == ("dead.letters", "expired")
    assert config.store.sync == "never"
    assert config.store.journal_file_size == 8_000_000
    assert config.store.max_sync_delay_ms == 5
    users = config.security.users
    assert sorted(users) == ["alice", "bob"]
    assert users["alice"].password == HASH
    assert users["alice"].groups == frozenset({"admins", "ops"})
    assert users["bob"].groups == frozenset()
    assert config.security.authorization == (
        AuthorizationEntry("/queue/orders.>", frozenset({"ops"}), frozenset({"bob"})),
        AuthorizationEntry(">", admin=frozenset({"admins"})),
    )
    assert config.anonymous is False


def test_password_hash_stays_out_of_repr(tmp_path: Path) -> None:
    config = load(tmp_path, f'[security.users.alice]\npassword = "{HASH}"\n')
    assert HASH not in repr(config)


def _certificate(tmp_path: Path) -> None:
    """cert.pem, key.pem and ca.pem: the files are read at load (a bad one stops the node there)."""
    from tests.e2e.tls_support import issue

    ca = issue(tmp_path, "ca", "test CA", ca=True)
    (tmp_path / "ca.crt").rename(tmp_path / "ca.pem")
    _, _, cert, key = issue(tmp_path, "server", "server", issuer=ca[:2])
    cert.rename(tmp_path / "cert.pem")
    key.rename(tmp_path / "key.pem")


def test_tls_section(tmp_path: Path) -> None:
    _certificate(tmp_path)
    config = load(tmp_path, stomp_tls(tmp_path, "[::]:61612", "cert.pem", "key.pem", "ca.pem"))
    tls = config.stomp.tls
    assert tls is not None
    assert tls.bind == ("::", 61612)
    assert tls.certificate == str(tmp_path / "cert.pem")
    assert tls.private_key == str(tmp_path / "key.pem")
    assert tls.ca_certificate == str(tmp_path / "ca.pem")


def test_tls_ca_certificate_is_optional(tmp_path: Path) -> None:
    _certificate(tmp_path)
    config = load(tmp_path, stomp_tls(tmp_path, "127.0.0.1:61612", "cert.pem", "key.pem"))
    assert config.stomp.tls is not None
    assert config.stomp.tls.ca_certificate is None


# --- sizes and addresses ---------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1024, 1024),
        ("100B", 100),
        ("2048", 2048),
        ("512KiB", 512 * 1024),
        ("64MiB", 64 * MiB),
        ("1GiB", 1024**3),
        ("10 MB", 10_000_000),
        ("3KB", 3000),
        ("1gb", 1_000_000_000),
        ("1.5 KiB", 1536),
    ],
)
def test_parse_size_units(value: int | str, expected: int) -> None:
    assert parse_size(value, "k") == expected


def test_parse_size_message_names_key_and_value() -> None:
    with pytest.raises(ConfigError) as info:
        parse_size(-5, "stomp.max_frame_size")
    assert str(info.value) == "stomp.max_frame_size: must be a positive size, got -5"
    assert info.value.key == "stomp.max_frame_size"


@pytest.mark.parametrize("value", [0, -1, "0B", "-5MiB", "ten", "5 XB", "MiB", True, 1.5])
def test_parse_size_rejects(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^broker\.memory_limit: "):
        parse_size(value, "broker.memory_limit")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:61613", ("localhost", 61613)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
        ("[::1]:5", ("::1", 5)),
    ],
)
def test_parse_address(value: str, expected: tuple[str, int]) -> None:
    assert parse_address(value, "stomp.bind") == expected


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("127.0.0.1:70000", "between 0 and 65535"),
        ("localhost", "HOST:PORT"),
        (":61613", "HOST:PORT"),
        ("::1:5", "brackets"),
        ("[nothost]:5", "not an IPv6 address"),
        ("host:-1", "HOST:PORT"),
        (61613, "HOST:PORT"),
    ],
)
def test_parse_address_rejects(value: object, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_address(value, "stomp.bind")  # type: ignore[arg-type]
    assert str(info.value).startswith("stomp.bind: ")
    assert hint in str(info.value)


# --- unknown keys, wrong types, impossible values ---------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('nmae = "x"', "nmae"),
        ("[stomp]\nmax_frame = 5", "stomp.max_frame"),
        ("[brokr]\nx = 1", "brokr"),
        ('[stomp.tls]\nbindd = "x"', "stomp.tls.bindd"),
        (f'[security.users.alice]\npassword = "{HASH}"\npasword = "x"', "security.users.alice.pasword"),
        ('[[security.authorization]]\ndestination = ">"\nreed = []', "security.authorization[0].reed"),
    ],
)
def test_unknown_key_is_named_with_dotted_path(tmp_path: Path, text: str, key: str) -> None:
    message = error(tmp_path, text)
    assert message.startswith(f"{key}: unknown key")


@pytest.mark.parametrize(
    ("text", "key", "hint"),
    [
        ('[stomp]\nmax_headers = "1000"', "stomp.max_headers", "expected an integer"),
        ("[stomp]\nmax_headers = true", "stomp.max_headers", "expected an integer"),
        ('[stomp]\nheartbeat_grace = "x"', "stomp.heartbeat_grace", "expected a number"),
        ("stomp = 5", "stomp", "expected a table"),
        ("name = 5", "name", "expected a string"),
        ("[broker]\ndead_letter_queue = 5", "broker.dead_letter_queue", "expected a string"),
        ("[stomp]\nmax_frame_size = 1.5", "stomp.max_frame_size", "expected a size"),
        ("[stomp]\nbind = 61613", "stomp.bind", "HOST:PORT"),
        (f'[security.users.a]\npassword = "{HASH}"\ngroups = "admins"', "security.users.a.groups", "array"),
        (f'[security.users.a]\npassword = "{HASH}"\ngroups = [1]', "security.users.a.groups[0]", "string"),
        ('[security]\nauthorization = {destination = ">"}', "security.authorization", "array of tables"),
    ],
)
def test_wrong_type(tmp_path: Path, text: str, key: str, hint: str) -> None:
    message = error(tmp_path, text)
    assert message.startswith(f"{key}: ")
    assert hint in message


@pytest.mark.parametrize(
    ("text", "key", "hint"),
    [
        ("[stomp]\nmax_frame_size = -5", "stomp.max_frame_size", "positive size"),
        ('[broker]\nmemory_limit = "0MiB"', "broker.memory_limit", "positive size"),
        ('[stomp]\nbind = "0.0.0.0:70000"', "stomp.bind", "65535"),
        ("[stomp]\nheartbeat_grace = 0.5", "stomp.heartbeat_grace", ">= 1.0"),
        ("[stomp]\nheartbeat_send_ms = -1", "stomp.heartbeat_send_ms", ">= 0"),
        ("[stomp]\nmax_connections = 0", "stomp.max_connections", ">= 1"),
        ("[broker]\nmax_delivery_attempts = 0", "broker.max_delivery_attempts", ">= 1"),
        ("[broker]\ndefault_prefetch = 0", "broker.default_prefetch", ">= 1"),
        ('[broker]\ndead_letter_queue = "/queue/DLQ"', "broker.dead_letter_queue", "queue name"),
        ('[broker]\nexpiry_queue = "exp.>"', "broker.expiry_queue", "queue name"),
        ('[store]\nsync = "sometimes"', "store.sync", "'always', 'never'"),
        ('name = "no spaces"', "name", "letters"),
        ('data_dir = ""', "data_dir", "empty"),
    ],
)
def test_impossible_value(tmp_path: Path, text: str, key: str, hint: str) -> None:
    message = error(tmp_path, text)
    assert message.startswith(f"{key}: ")
    assert hint in message


def test_tls_certificate_must_exist(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_text("x")
    message = error(tmp_path, stomp_tls(tmp_path, "127.0.0.1:61612", "missing.pem", "key.pem"))
    assert message.startswith("stomp.tls.certificate: ")
    assert "missing.pem" in message and "does not exist" in message


def test_tls_required_keys(tmp_path: Path) -> None:
    message = error(tmp_path, '[stomp.tls]\nbind = "127.0.0.1:61612"')
    assert message == "stomp.tls.certificate: required key is missing"


def test_tls_bind_must_differ_from_plain_bind(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("x")
    tls = stomp_tls(tmp_path, "127.0.0.1:61613", "c.pem", "c.pem")
    message = error(tmp_path, '[stomp]\nbind = "127.0.0.1:61613"\n' + tls)
    assert message.startswith("stomp.tls.bind: same address")


@pytest.mark.parametrize("password", ["secret", "pbkdf2_sha256$x$y$z", HASH[:-4]])
def test_password_must_be_a_hash(tmp_path: Path, password: str) -> None:
    message = error(tmp_path, f'[security.users.alice]\npassword = "{password}"')
    assert message.startswith("security.users.alice.password: ")
    assert "meshgate passwd" in message


def test_user_needs_password(tmp_path: Path) -> None:
    message = error(tmp_path, '[security.users.alice]\ngroups = ["a"]')
    assert message == "security.users.alice.password: required key is missing"


def test_odd_user_names_are_quoted_in_paths(tmp_path: Path) -> None:
    message = error(tmp_path, '[security.users."a.b"]\npassword = "x"')
    assert message.startswith('security.users."a.b".password: ')


@pytest.mark.parametrize(
    "destination",
    ["orders", "/amq/x", "/queue/", "/queue/a.>.b", "/queue/a*", "/topic/a..b"],
)
def test_bad_authorization_destination(tmp_path: Path, destination: str) -> None:
    message = error(
        tmp_path,
        f"""
        [security.users.alice]
        password = "{HASH}"
        [[security.authorization]]
        destination = "{destination}"
        """,
    )
    assert message.startswith("security.authorization[0].destination: ")


def test_authorization_without_users_is_rejected(tmp_path: Path) -> None:
    message = error(tmp_path, '[[security.authorization]]\ndestination = ">"\nread = ["x"]')
    assert message.startswith("security.authorization: needs users")


# --- files -----------------------------------------------------------------


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "n1"\n[stomp]\nbind = 127.0.0.1:61613\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    assert "line 3" in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_config(tmp_path / "nope.toml")


# --- overrides -------------------------------------------------------------


def test_overrides_win_over_file(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, 'name = "file"\n[stomp]\nbind = "127.0.0.1:1"\nmax_headers = 7\n'),
        {"name": "n1", "stomp.bind": "127.0.0.1:0", "data_dir": "/tmp/x"},
    )
    assert config.name == "n1"
    assert config.stomp.bind == ("127.0.0.1", 0)
    assert config.stomp.max_headers == 7  # untouched keys keep the file's value
    assert config.data_dir == "/tmp/x"


def test_overrides_without_file() -> None:
    config = load_config(None, {"name": "n2", "broker.memory_limit": "1MiB"})
    assert (config.name, config.data_dir) == ("n2", "./data/n2")
    assert config.broker.memory_limit == MiB


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"stomp.bind": "127.0.0.1:99999"}, "stomp.bind: port must be between"),
        ({"stomp.max_headres": 5}, "stomp.max_headres: unknown key"),
        ({"stomp.max_headers": "5"}, "stomp.max_headers: expected an integer"),
        ({"stomp.tls.bind": "127.0.0.1:1"}, "stomp.tls.certificate: required key"),
        ({"name.first": "x"}, "name: is not a table"),
        ({"stomp..bind": "x"}, "stomp..bind: malformed key"),
    ],
)
def test_overrides_are_validated(tmp_path: Path, overrides: dict, message: str) -> None:
    assert error(tmp_path, 'name = "n1"', overrides).startswith(message)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("stomp.max_connections=500", ("stomp.max_connections", 500)),
        ("stomp.bind=127.0.0.1:0", ("stomp.bind", "127.0.0.1:0")),
        ("stomp.heartbeat_grace = 2.5", ("stomp.heartbeat_grace", 2.5)),
        ("name=n1", ("name", "n1")),
        ('name="123"', ("name", "123")),
        ('security.users.a.groups=["x", "y"]', ("security.users.a.groups", ["x", "y"])),
    ],
)
def test_parse_override(text: str, expected: tuple[str, object]) -> None:
    assert parse_override(text) == expected


def test_parse_override_feeds_load_config() -> None:
    config = load_config(None, dict([parse_override("stomp.max_connections=500")]))
    assert config.stomp.max_connections == 500


def test_parse_override_needs_equals() -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("stomp.bind")


# --- STOMP over WebSocket ---------------------------------------------------


def test_websocket_listener_is_off_by_default_and_takes_a_bind_and_origins(tmp_path: Path) -> None:
    assert load(tmp_path, "").stomp.websocket is None
    config = load(tmp_path, """
        [stomp.websocket]
        bind = "127.0.0.1:15674"
        allowed_origins = ["https://app.example.com/", "http://localhost:8080"]
        """)
    assert config.stomp.websocket.bind == ("127.0.0.1", 15674)
    assert config.stomp.websocket.allowed_origins == ("https://app.example.com", "http://localhost:8080")
    assert load(tmp_path, '[stomp.websocket]\nbind = "127.0.0.1:0"\n').stomp.websocket.allowed_origins == ("*",)


@pytest.mark.parametrize(("text", "message"), [
    ('[stomp.websocket]\nallowed_origins = ["*"]', "stomp.websocket.bind: required key"),
    ('[stomp.websocket]\nbind = "127.0.0.1:1"\nallowed_origins = "*"', "allowed_origins: expected an array"),
    ('[stomp.websocket]\nbind = "127.0.0.1:1"\nallowed_origins = ["app.example.com"]', "allowed_origins[0]: an origin"),
    ('[stomp.websocket]\nbind = "127.0.0.1:1"\nallowed_origins = ["https://a.example/path"]', "no path"),
    ('[stomp]\nbind = "127.0.0.1:7000"\n[stomp.websocket]\nbind = "127.0.0.1:7000"',
     "stomp.websocket.bind: same address as stomp.bind"),
])
def test_websocket_settings_are_checked(tmp_path: Path, text: str, message: str) -> None:
    assert message in error(tmp_path, text)


def test_the_mesh_may_not_share_the_websocket_port(tmp_path: Path) -> None:
    message = error(tmp_path, """
        [stomp.websocket]
        bind = "127.0.0.1:7001"
        [mesh]
        bind = "127.0.0.1:7001"
        insecure_cluster = true
        """)
    assert message.startswith("mesh.bind: same port as stomp.websocket.bind")


def test_store_limits_default_to_ninety_percent_of_the_disk_and_no_journal_limit(tmp_path: Path) -> None:
    store = load(tmp_path, "").store
    assert (store.limit, store.max_disk_usage, store.fail_after_ms) == (None, 90, 0)
    store = load(tmp_path, '[store]\nlimit = "1GiB"\nmax_disk_usage = 100\nfail_after_ms = 5000\n').store
    assert (store.limit, store.max_disk_usage, store.fail_after_ms) == (1024 * MiB, 100, 5000)
    assert "store.max_disk_usage: a percentage from 1 to 100" in error(tmp_path, "[store]\nmax_disk_usage = 101\n")
