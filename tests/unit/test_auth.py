"""gateway.auth: password hashes, the authentication cache, authorization-map semantics."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.auth import (
    ANONYMOUS,
    ITERATIONS,
    Authenticator,
    Authorizer,
    Principal,
    hash_password,
    is_password_hash,
    validate_destination_pattern,
    verify_password,
)
from meshgate.config import AuthorizationEntry, UserConfig, load_config

FAST = 1000  # iterations for test hashes; the format and logic are the same


def user(password: str, *groups: str) -> UserConfig:
    return UserConfig(hash_password(password, iterations=FAST), frozenset(groups))


def entry(destination: str, **actions: list[str]) -> AuthorizationEntry:
    return AuthorizationEntry(destination, **{k: frozenset(v) for k, v in actions.items()})


@pytest.fixture
def pbkdf2_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count PBKDF2 runs: the cache is only worth anything if it avoids them."""
    calls: list[int] = []
    real: Callable[..., bytes] = hashlib.pbkdf2_hmac

    def counting(*args: object, **kwargs: object) -> bytes:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)
    return calls


# --- hashes ----------------------------------------------------------------


def test_hash_format_and_round_trip() -> None:
    encoded = hash_password("s3cret")
    algorithm, iterations, salt, digest = encoded.split("$")
    assert algorithm == "pbkdf2_sha256"
    assert int(iterations) == ITERATIONS == 200_000
    assert len(base64.b64decode(salt)) == 16
    assert len(base64.b64decode(digest)) == 32
    assert verify_password("s3cret", encoded)
    assert not verify_password("s3cret ", encoded)
    assert is_password_hash(encoded)


def test_same_password_gets_a_fresh_salt() -> None:
    first, second = (hash_password("pw", iterations=FAST) for _ in range(2))
    assert first != second
    assert verify_password("pw", first) and verify_password("pw", second)


def test_non_ascii_password() -> None:
    encoded = hash_password("pässwörd✓", iterations=FAST)
    assert verify_password("pässwörd✓", encoded)
    assert not verify_password("passwort", encoded)


@pytest.mark.parametrize(
    "value",
    [
        "secret",
        "",
        "pbkdf2_sha256$0$AAAAAAAAAAAAAAAAAAAAAA==$" + "A" * 44,
        "pbkdf2_sha256$1000$not*base64$" + "A" * 44,
        "pbkdf2_sha256$1000$AAAAAAAAAAAAAAAAAAAAAA==$AAAA",  # digest too short
        "pbkdf2_sha1$1000$AAAAAAAAAAAAAAAAAAAAAA==$" + "A" * 44,
        "pbkdf2_sha256$99999999999$AAAAAAAAAAAAAAAAAAAAAA==$" + "A" * 44,
        None,
        12,
    ],
)
def test_is_password_hash_rejects(value: object) -> None:
    assert not is_password_hash(value)


def test_verify_against_garbage_is_false() -> None:
    assert not verify_password("x", "x")


# --- authentication --------------------------------------------------------


def test_authenticate_right_wrong_unknown() -> None:
    auth = Authenticator({"alice": user("pw", "admins"), "bob": user("bob-pw")})
    assert auth.authenticate("alice", "pw") == Principal("alice", frozenset({"admins"}))
    assert auth.authenticate("bob", "bob-pw") == Principal("bob", frozenset())
    assert auth.authenticate("alice", "bob-pw") is None
    assert auth.authenticate("carol", "pw") is None
    assert auth.authenticate("alice", None) is None
    assert auth.authenticate(None, "pw") is None
    assert auth.anonymous is False


def test_anonymous_when_no_users() -> None:
    auth = Authenticator({})
    assert auth.anonymous is True
    assert auth.authenticate(None, None) is ANONYMOUS
    assert auth.authenticate("mallory", "anything") is ANONYMOUS
    assert ANONYMOUS.name == "anonymous"


def test_success_is_cached(pbkdf2_calls: list[int]) -> None:
    auth = Authenticator({"alice": user("pw")})
    pbkdf2_calls.clear()
    assert auth.authenticate("alice", "pw") is not None
    assert len(pbkdf2_calls) == 1
    for _ in range(5):
        assert auth.authenticate("alice", "pw") == Principal("alice", frozenset())
    assert len(pbkdf2_calls) == 1


def test_failure_is_never_cached(pbkdf2_calls: list[int]) -> None:
    auth = Authenticator({"alice": user("pw")})
    pbkdf2_calls.clear()
    assert auth.authenticate("alice", "nope") is None
    assert auth.authenticate("alice", "nope") is None
    assert len(pbkdf2_calls) == 2
    # A cached success must not let a different passcode through.
    assert auth.authenticate("alice", "pw") is not None
    assert auth.authenticate("alice", "nope") is None
    assert len(pbkdf2_calls) == 4


def test_cache_is_per_login(pbkdf2_calls: list[int]) -> None:
    auth = Authenticator({"alice": user("same"), "bob": user("same")})
    pbkdf2_calls.clear()
    assert auth.authenticate("alice", "same").name == "alice"  # type: ignore[union-attr]
    assert auth.authenticate("bob", "same").name == "bob"  # type: ignore[union-attr]
    assert len(pbkdf2_calls) == 2


def test_cache_is_bounded(pbkdf2_calls: list[int]) -> None:
    auth = Authenticator({"alice": user("a"), "bob": user("b")}, cache_size=1)
    pbkdf2_calls.clear()
    auth.authenticate("alice", "a")
    auth.authenticate("bob", "b")  # evicts alice
    auth.authenticate("alice", "a")
    assert len(pbkdf2_calls) == 3


def test_unknown_user_costs_as_much_as_a_wrong_password(pbkdf2_calls: list[int]) -> None:
    auth = Authenticator({"alice": user("pw")})
    pbkdf2_calls.clear()
    assert auth.authenticate("nobody", "pw") is None
    assert len(pbkdf2_calls) == 1


# --- authorization ---------------------------------------------------------

ALICE = Principal("alice", frozenset({"ops"}))
BOB = Principal("bob", frozenset({"sales"}))
CAROL = Principal("carol", frozenset({"guests"}))


def test_no_entries_allows_everything() -> None:
    authz = Authorizer([], enabled=True)
    for action in ("read", "write", "admin"):
        assert authz.allowed(CAROL, action, "/queue/anything")


def test_disabled_allows_everything() -> None:
    authz = Authorizer([entry(">", read=["ops"])], enabled=False)
    assert authz.allowed(CAROL, "write", "/topic/x")


def test_union_of_matching_entries() -> None:
    authz = Authorizer(
        [
            entry("/queue/orders.>", read=["ops"]),
            entry("/queue/orders.eu", read=["sales"], write=["sales"]),
            entry("/queue/orders.us", read=["guests"]),
        ],
        enabled=True,
    )
    assert authz.allowed(ALICE, "read", "/queue/orders.eu")
    assert authz.allowed(BOB, "read", "/queue/orders.eu")
    assert not authz.allowed(CAROL, "read", "/queue/orders.eu")
    assert authz.allowed(BOB, "write", "/queue/orders.eu")
    assert not authz.allowed(ALICE, "write", "/queue/orders.eu")  # read is not write
    assert authz.allowed(CAROL, "read", "/queue/orders.us")
    assert not authz.allowed(ALICE, "admin", "/queue/orders.eu")


def test_no_matching_entry_is_denied() -> None:
    authz = Authorizer([entry("/queue/orders.>", read=["ops"], write=["ops"])], enabled=True)
    assert not authz.allowed(ALICE, "read", "/queue/invoices")
    assert not authz.allowed(ALICE, "write", "/topic/orders.eu")


@pytest.mark.parametrize(
    ("pattern", "destination", "expected"),
    [
        ("/queue/orders.>", "/queue/orders.eu", True),
        ("/queue/orders.>", "/queue/orders.eu.paid", True),
        ("/queue/orders.>", "/queue/orders", False),
        ("/queue/orders.>", "/topic/orders.eu", False),
        ("/queue/orders.*", "/queue/orders.eu", True),
        ("/queue/orders.*", "/queue/orders.eu.paid", False),
        ("/queue/*.eu", "/queue/orders.eu", True),
        ("/topic/>", "/topic/prices.gbp", True),
        ("/topic/>", "/queue/prices.gbp", False),
        ("/temp-queue/>", "/temp-queue/abc", True),
        (">", "/queue/a", True),
        (">", "/topic/a.b.c", True),
        (">", "/temp-queue/x", True),
        ("/queue/exact", "/queue/exact", True),
        ("/queue/exact", "/queue/exact.more", False),
    ],
)
def test_wildcard_patterns(pattern: str, destination: str, expected: bool) -> None:
    authz = Authorizer([entry(pattern, read=["ops"])], enabled=True)
    assert authz.allowed(ALICE, "read", destination) is expected


def test_user_name_counts_as_a_group() -> None:
    authz = Authorizer([entry("/queue/private.>", read=["alice"])], enabled=True)
    assert authz.allowed(ALICE, "read", "/queue/private.inbox")
    assert not authz.allowed(BOB, "read", "/queue/private.inbox")


def test_cache_does_not_leak_between_principals() -> None:
    authz = Authorizer([entry(">", write=["ops"])], enabled=True, cache_size=2)
    for _ in range(3):  # the repeats are answered from the (tiny) cache
        assert authz.allowed(ALICE, "write", "/queue/q")
        assert not authz.allowed(BOB, "write", "/queue/q")
        assert not authz.allowed(ALICE, "read", "/queue/q")


def test_unknown_action_is_a_bug() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        Authorizer([], enabled=True).allowed(ALICE, "delete", "/queue/q")


@pytest.mark.parametrize("pattern", ["orders.>", "/queue/", "/queue/a.>.b", "/queue/a>", "/queue/a..b", "*"])
def test_bad_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError):
        validate_destination_pattern(pattern)
    with pytest.raises(ValueError):
        Authorizer([entry(pattern, read=["ops"])], enabled=True)


# --- from a configuration file ---------------------------------------------


def test_config_file_drives_authentication_and_authorization(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        f"""
[security.users.alice]
password = "{hash_password("pw", iterations=FAST)}"
groups = ["ops"]

[[security.authorization]]
destination = "/queue/orders.>"
read = ["ops"]
"""
    )
    config = load_config(path)
    principal = Authenticator(config.security.users).authenticate("alice", "pw")
    assert principal == ALICE
    authz = Authorizer(config.security.authorization, enabled=not config.anonymous)
    assert authz.allowed(principal, "read", "/queue/orders.eu")
    assert not authz.allowed(principal, "write", "/queue/orders.eu")
