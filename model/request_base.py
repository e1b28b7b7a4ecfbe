"""What every management request has (model/requests.py lists them all): where it
applies, and the audit notes a tool may add."""

from __future__ import annotations

import msgspec


class Request(msgspec.Struct, kw_only=True, tag_field="action"):
    node: str | None = None
    # Who a tool acts for, recorded beside the authenticated user in admin_action
    # events (the console sends its logged-in user's name; it grants nothing).
    on_behalf_of: str | None = None
    # The doctor's finding this request is the remedy of (apply_remedy sets it): its
    # admin_action event's result says "doctor FINDING: ". An audit note; it grants nothing.
    remedy_of: str | None = None
