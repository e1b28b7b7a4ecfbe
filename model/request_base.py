"""The base of every management request (model.requests): what any request names besides
its action. Apart so that the requests of one subject can live in a module of their own
(model.journey_requests, model.requests_doctor) and still be of the one tagged union model.requests makes."""

from __future__ import annotations

import msgspec

ALL = "*"  # ``node``: every node of the mesh


class Request(msgspec.Struct, kw_only=True, tag_field="action"):
    node: str | None = None
    # Who a tool acts for, recorded beside the authenticated user in admin_action
    # events (the console sends its logged-in user's name; it grants nothing).
    on_behalf_of: str | None = None
    # The doctor's finding this request is the remedy of (apply_remedy sets it): its
    # admin_action event's result says "doctor FINDING: ". An audit note; it grants nothing.
    remedy_of: str | None = None
