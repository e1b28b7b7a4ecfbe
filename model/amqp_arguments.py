"""The x-arguments of an AMQP ``queue.declare`` Meshgate takes: which ones, of what
type, in what range. One rule for the AMQP listener (it refuses the rest with 406
PRECONDITION_FAILED) and for the console's API (a 400 with the same reason), so
arguments a queue is defined with through one are arguments the other accepts."""

from __future__ import annotations

import reprlib
from collections.abc import Mapping

from model.names import name_problem
from model.requests import MAX_WHOLE_NUMBER

# The arguments that are queue settings (model.definitions.QueueSettings), by setting.
ARGUMENT_SETTINGS = {"x-message-ttl": "message_ttl_ms", "x-dead-letter-exchange": "dead_letter_exchange",
                     "x-dead-letter-routing-key": "dead_letter_routing_key", "x-max-length": "max_length"}
# Kept (a redeclare must match them) but not settings of the queue on every node:
# x-expires is kept by the node where the queue was declared (AmqpFactory.expire_unused);
# x-overflow may only say what Meshgate does.
KEPT_ARGUMENTS = frozenset({"x-expires", "x-max-priority", "x-queue-type", "x-queue-mode", "x-ha-policy",
                            "x-overflow"})
# Milliseconds, at most 2**32 - 1 (about 49.7 days), as RabbitMQ bounds x-message-ttl and x-expires.
MAX_MILLISECONDS = 2 ** 32 - 1
_WHOLE_NUMBERS = {"x-message-ttl": (0, MAX_MILLISECONDS), "x-max-length": (0, MAX_WHOLE_NUMBER),
                  "x-expires": (1, MAX_MILLISECONDS), "x-max-priority": (0, 255)}
_NAMES = {"x-dead-letter-exchange": "exchange name", "x-dead-letter-routing-key": "routing key"}


# A client's value in a reason, cut short (at 40 characters, 2 levels deep): reasons go
# back to the client and into logs.
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 40
_REPR.maxlevel = 2
_shown = _REPR.repr


def argument_problem(arguments: Mapping[str, object]) -> str | None:
    """Why a queue cannot be declared with ``arguments``, for a human; None if it can."""
    overflow = arguments.get("x-overflow", "drop-head")
    if overflow != "drop-head":
        return f"x-overflow {_shown(overflow)} is not supported: only drop-head"
    for key, value in arguments.items():
        if key not in ARGUMENT_SETTINGS and key not in KEPT_ARGUMENTS:
            return f"queue argument {_shown(key)} is not supported"
        bounds = _WHOLE_NUMBERS.get(key)
        if bounds is not None:
            low, high = bounds
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                return f"{key} must be a whole number >= {low}, got {_shown(value)}"
            if value > high:
                return f"{key} must be at most {high}, got {_shown(value)}"
        elif not isinstance(value, str):
            return f"{key} must be a string, got {_shown(value)}"
        elif value and key in _NAMES and (problem := name_problem(value)) is not None:
            return f"{key} is not a valid {_NAMES[key]}: {problem}"
    return None
