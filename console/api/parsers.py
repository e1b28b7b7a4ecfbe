"""Request bodies: JSON only (a form or multipart body is a 415), read as the RFC says
(UTF-8, or UTF-16/32 told by its first bytes) whatever charset the request claims.
Whatever the body holds, parsing it answers a 400 rather than raising: not JSON, NaN
or Infinity, a number of more than 4,300 digits, or nesting deeper than
``MAX_DEPTH`` (which no API input needs, and which would make the serializers'
``str()`` and the error messages' ``repr()`` recurse past Python's limit)."""

from __future__ import annotations

import json

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.views import APIView

MAX_DEPTH = 32


class _NotJSONConstant(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NotJSONConstant(f"{name} is not a JSON number")


def _deeper_than(value, depth: int) -> bool:
    """Whether ``value`` nests containers more than ``depth`` deep; one pass over its
    containers' items, level by level (no recursion)."""
    level = [value]
    for _ in range(depth):
        level = [item for node in level if isinstance(node, (dict, list))
                 for item in (node.values() if isinstance(node, dict) else node)]
        if not level:
            return False
    return any(isinstance(node, (dict, list)) for node in level)


class JSONBodyParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read()
        try:
            data = json.loads(raw, parse_constant=_refuse_constant)
        except RecursionError:
            raise ParseError(f"the JSON body nests deeper than {MAX_DEPTH} levels") from None
        except json.JSONDecodeError as error:
            raise ParseError(f"the body is not JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
        except UnicodeDecodeError:
            raise ParseError("the body is not JSON: it is not UTF-8") from None
        except _NotJSONConstant as error:
            raise ParseError(f"the body is not JSON: {error}") from None
        except ValueError:  # the interpreter's limit on the digits of an integer
            raise ParseError("the body holds a number too long to read") from None
        # Counting brackets is C-speed; only a body with more of them than MAX_DEPTH is walked.
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _deeper_than(data, MAX_DEPTH):
            raise ParseError(f"the JSON body nests deeper than {MAX_DEPTH} levels")
        return data


class ApiView(APIView):
    """The API's views: bodies through JSONBodyParser only."""

    parser_classes = [JSONBodyParser]
