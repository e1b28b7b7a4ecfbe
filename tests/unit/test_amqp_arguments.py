"""model.amqp_arguments.argument_problem: the x-arguments of a queue.declare Meshgate
takes, the one rule the AMQP listener (406) and the console's API (400) apply; no
sockets. The reasons are the texts both answer with."""

from __future__ import annotations

import pytest

from model.amqp_arguments import argument_problem


@pytest.mark.parametrize("arguments", [
    {}, {"x-message-ttl": 0}, {"x-message-ttl": 2 ** 32 - 1}, {"x-max-length": 0}, {"x-max-length": 2 ** 53 - 1},
    {"x-dead-letter-exchange": ""}, {"x-dead-letter-exchange": "events.dlx", "x-dead-letter-routing-key": "dead"},
    {"x-expires": 1}, {"x-max-priority": 255}, {"x-queue-type": "classic", "x-queue-mode": "lazy"},
    {"x-ha-policy": "all"}, {"x-overflow": "drop-head"},
])
def test_the_arguments_it_takes(arguments):
    assert argument_problem(arguments) is None


@pytest.mark.parametrize("arguments, reason", [
    ({"x-colour": "red"}, "queue argument 'x-colour' is not supported"),
    ({"x-overflow": "reject-publish"}, "x-overflow 'reject-publish' is not supported: only drop-head"),
    ({"x-max-length": -1}, "x-max-length must be a whole number >= 0, got -1"),
    ({"x-max-length": True}, "x-max-length must be a whole number >= 0, got True"),
    ({"x-message-ttl": 1.5}, "x-message-ttl must be a whole number >= 0, got 1.5"),
    ({"x-message-ttl": "soon"}, "x-message-ttl must be a whole number >= 0, got 'soon'"),
    ({"x-message-ttl": 2 ** 32}, "x-message-ttl must be at most 4294967295, got 4294967296"),
    ({"x-max-length": 2 ** 53}, "x-max-length must be at most 9007199254740991, got 9007199254740992"),
    ({"x-expires": 0}, "x-expires must be a whole number >= 1, got 0"),
    ({"x-max-priority": 256}, "x-max-priority must be at most 255, got 256"),
    ({"x-dead-letter-exchange": b"\xffdlx"}, "x-dead-letter-exchange must be a string, got b'\\xffdlx'"),
    ({"x-dead-letter-exchange": 7}, "x-dead-letter-exchange must be a string, got 7"),
    ({"x-queue-type": None}, "x-queue-type must be a string, got None"),
    ({"x-dead-letter-routing-key": "a\nb"},
     "x-dead-letter-routing-key is not a valid routing key: it holds the character U+000A; names are printable "
     "characters only"),
    ({"x-dead-letter-exchange": "x" * 256},
     "x-dead-letter-exchange is not a valid exchange name: it is 256 bytes long; names are at most 255 bytes of UTF-8"),
])
def test_the_arguments_it_refuses_and_why(arguments, reason):
    assert argument_problem(arguments) == reason


@pytest.mark.parametrize("arguments", [
    {"x-" + "k" * 100_000: 1}, {"x-overflow": "o" * 100_000}, {"x-queue-type": list(range(100_000))},
    {"x-queue-type": [[[[[[[[[[1]]]]]]]]]]}, {"x-max-length": "9" * 100_000},
])
def test_what_a_reason_quotes_of_the_client_is_cut_short(arguments):
    assert len(argument_problem(arguments)) < 120
