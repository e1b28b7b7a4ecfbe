"""The base of every management request (model.requests): the JSON object's ``action``
tag, the node it is for, and whom a tool acts for. Apart so that the requests of one
concern can live in a module of their own (model.journey_requests)."""

from __future__ import annotations

import msgspec


class Request(msgspec.Struct, kw_only=True, tag_field="action"):
    node: str | None = None
    # Who a tool acts for, recorded beside the authenticated user in admin_action
    # events (the console sends its logged-in user's name; it grants nothing).
    on_behalf_of: str | None = None
