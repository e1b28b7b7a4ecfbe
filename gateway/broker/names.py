"""Names a client brings to the core, checked by the one rule (model/names.py)."""

from __future__ import annotations

from gateway.broker.errors import BrokerError
from model.names import name_problem, quoted


def check_name(what: str, name: str) -> None:
    """BrokerError unless ``name`` follows the one rule for names (model/names.py).
    Called where a client brings a name the broker has not seen, so a queue, topic,
    exchange or client id one protocol accepts is one every protocol can address."""
    if 0 < len(name) <= 63 and name.isprintable():  # the common case, in C: 63 characters fit 255 bytes
        return
    problem = name_problem(name)
    if problem is not None:
        raise BrokerError(f"invalid {what} {quoted(name)}: {problem}")
