"""What a browser may send on the live socket: ``{"subscribe": [names]}``, names from
``GROUPS``. Anything else — binary frames, text that is not JSON, other shapes, names
that are not strings, oversized text — is a ``BadRequest`` with a message for the page;
the socket stays open."""

from __future__ import annotations

import json

from console.live.updates import GROUPS

MAX_REQUEST_CHARS = 1024  # a subscribe to every group is ~50: nothing longer is parsed
USAGE = "send {\"subscribe\": [...]} with some of " + ", ".join(sorted(GROUPS))


class BadRequest(ValueError):
    """A message the socket cannot act on; its text is what the page is told."""


def wanted_groups(text: str | None) -> list[str]:
    """The groups a subscribe message names, in order."""
    if text is None:
        raise BadRequest("send JSON in text messages, not binary ones")
    if len(text) > MAX_REQUEST_CHARS:
        raise BadRequest(f"a message is at most {MAX_REQUEST_CHARS} characters; {USAGE}")
    try:
        content = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        raise BadRequest(f"not JSON; {USAGE}") from None
    names = content.get("subscribe") if isinstance(content, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) and name in GROUPS for name in names):
        raise BadRequest(USAGE)
    return [GROUPS[name] for name in names]
