"""JSON written by msgspec: the queue and node lists are large at scale, and
msgspec encodes them an order of magnitude faster than the standard library."""

from __future__ import annotations

import msgspec
from rest_framework.renderers import JSONRenderer

_encode = msgspec.json.Encoder().encode


class FastJSONRenderer(JSONRenderer):
    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if data is None:
            return b""
        try:
            return _encode(data)
        except TypeError:  # something msgspec does not know (DRF's lazy strings): the slow way
            return super().render(data, accepted_media_type, renderer_context)
