"""What the API takes, body and query alike, as DRF serializers: every field typed and
bounded (docs/console.md lists the ranges), every name by the one rule for names
(model/names.py), a queue's x-arguments by the AMQP listener's own rule
(model/amqp_arguments.py). A body is a JSON object of known fields only."""

from __future__ import annotations

import math
from collections.abc import Mapping

from django.http import QueryDict
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.settings import api_settings

from model.amqp_arguments import MAX_MILLISECONDS, argument_problem
from model.definitions import MAX_TRACE_S
from model.events import KINDS
from model.journey_requests import LATEST_EPOCH, MAX_HITS, header_filter_problem
from model.journeys import MAX_FIELD
from model.names import MAX_NAME_BYTES, InvalidName, check_name, check_vhost_name, quoted
from model.requests import ALL, MAX_WHOLE_NUMBER
from model.rollups import RESOLUTIONS

MAX_BROWSE = 500  # messages per page of a browse (the nodes' own limit)
MAX_PREVIEW = 65536  # body bytes shown per browsed message
MAX_TEXT_FILTER = 1000  # characters of the events' text filter
_UNKNOWN_LISTED = 10  # unknown fields named in an error, at most


def valid_name(name: str, what: str) -> str:
    """``name`` if the rule for names takes it, else a 400 saying why."""
    try:
        return check_name(name, what)
    except InvalidName as error:
        raise ValidationError(str(error)) from None


def valid_vhost(name: str) -> str:
    """``name`` if it can name a vhost, else a 400 saying why."""
    try:
        return check_vhost_name(name)
    except InvalidName as error:
        raise ValidationError(str(error)) from None


class NameField(serializers.CharField):
    """A name by the one rule for names: as given (no trimming), a string, printable,
    1 to 255 bytes of UTF-8 (or "" where ``allow_blank``)."""

    def __init__(self, what: str, **kwargs) -> None:
        self.what = what
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return data if data == "" else valid_name(data, self.what)


_JSON_TYPES = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
               list: "an array"}


class _Body(serializers.Serializer):
    """A JSON object whose fields are all known: a misspelt field is an error, not ignored."""

    unknown_field = "not a field of this request"

    def run_validation(self, data=serializers.empty):
        if not isinstance(data, Mapping):
            raise ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [
                f"the body must be a JSON object, not {_JSON_TYPES.get(type(data), 'that')}"]})
        unknown = [key for key in data if key not in self.fields]
        if unknown:
            errors = {key: self.unknown_field for key in unknown[:_UNKNOWN_LISTED]}
            if len(unknown) > _UNKNOWN_LISTED:
                errors["…"] = f"and {len(unknown) - _UNKNOWN_LISTED} more unknown fields"
            raise ValidationError(errors)
        return super().run_validation(data)


def _node() -> NameField:
    return NameField("node", required=False, help_text="a node's name or id, or * for every node")


class PurgeInput(_Body):
    node = _node()


class MoveInput(_Body):
    node = _node()
    to_queue = NameField("queue name", required=False)
    to_node = NameField("node", required=False)
    count = serializers.IntegerField(required=False, min_value=1, max_value=MAX_WHOLE_NUMBER)

    def validate(self, data):
        if ("to_queue" in data) == ("to_node" in data):
            raise ValidationError("give exactly one of to_queue and to_node")
        if "to_node" in data and data.get("node", ALL) == ALL:
            raise ValidationError("moving to another node needs the node to move from (node)")
        return data


class BrowseInput(_Body):
    node = _node()
    offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_WHOLE_NUMBER, default=0)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_BROWSE, default=50)
    preview = serializers.IntegerField(required=False, min_value=0, max_value=MAX_PREVIEW, default=256)


class SendInput(_Body):
    node = _node()
    body = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False)
    headers = serializers.DictField(child=serializers.CharField(allow_blank=True, trim_whitespace=False),
                                    required=False, default=dict,
                                    help_text="names by the rule for names; values of printable characters")
    persistent = serializers.BooleanField(required=False, default=False)

    def validate_headers(self, headers: dict) -> dict:
        for name, value in headers.items():
            valid_name(name, "header name")
            if not value.isprintable():
                raise ValidationError(f"the value of header {quoted(name)} holds a control character")
        return headers


class QueueSettingsInput(_Body):
    unknown_field = "not a queue setting"

    max_delivery_attempts = serializers.IntegerField(required=False, min_value=1, max_value=MAX_WHOLE_NUMBER)
    dead_letter_queue = NameField("dead-letter queue name", required=False)
    expiry_queue = NameField("expiry queue name", required=False, allow_blank=True,
                             help_text='"" discards expired messages')
    message_ttl_ms = serializers.IntegerField(required=False, min_value=1, max_value=MAX_MILLISECONDS)
    max_length = serializers.IntegerField(required=False, min_value=0, max_value=MAX_WHOLE_NUMBER)
    # What a queue declared over AMQP holds besides (GET definitions lists them): a PUT of what
    # was listed defines the queue as it was, so that its client's next declaration still matches.
    dead_letter_exchange = NameField("exchange name", required=False, allow_blank=True,
                                     help_text='AMQP x-dead-letter-exchange ("": the default exchange)')
    dead_letter_routing_key = NameField("routing key", required=False, allow_blank=True)
    amqp_arguments = serializers.DictField(required=False, help_text="the x- arguments of the AMQP queue.declare, "
                                                                     "as the AMQP listener takes them")

    def validate_amqp_arguments(self, arguments: dict) -> dict:
        problem = argument_problem(arguments)
        if problem is not None:
            raise ValidationError(problem)
        return arguments


class TraceInput(_Body):
    """Tracing a destination for a while (docs/journeys.md): its rate, and its end, by
    exactly one of ``until`` and ``for_s`` (the node checks the end: in the future, at
    most 7 days ahead)."""

    unknown_field = "not a field of a trace (rate, until, for_s)"

    rate = serializers.FloatField(required=False, max_value=1,
                                  help_text="the share traced, above 0 and at most 1: one message in round(1/rate) "
                                            "(default 1)")
    until = serializers.FloatField(required=False, help_text="when it ends, epoch seconds")
    for_s = serializers.FloatField(required=False, min_value=1, max_value=MAX_TRACE_S,
                                   help_text="how long from now it runs, in seconds")

    def validate_rate(self, rate: float) -> float:
        if not rate > 0:
            raise ValidationError("a rate is above 0 (0.01: one message in 100)")
        return rate

    def validate(self, data: dict) -> dict:
        if ("until" in data) == ("for_s" in data):
            raise ValidationError({api_settings.NON_FIELD_ERRORS_KEY: ["a trace ends: give exactly one of until "
                                                                       "and for_s"]})
        return data


# -- query parameters ---------------------------------------------------------------------------


def _plain(query: QueryDict, serializer_class) -> dict:
    """Query parameters as a JSON body would hold them: every value of a list field, the
    last value of any other. (Given the QueryDict, DRF would read it as an HTML form,
    where an empty value means the field was left out: ``?resolution=`` must be a 400.)"""
    lists = {name for name, field in serializer_class().fields.items() if isinstance(field, serializers.ListField)}
    return {key: query.getlist(key) if key in lists else query[key] for key in query}


class ListParams(serializers.Serializer):
    """``sort`` must be one of ``context["sorts"]`` (the list's sortable fields)."""

    sort = serializers.CharField(required=False, help_text="field to sort by")
    sort_reverse = serializers.BooleanField(required=False, default=False, help_text="largest first")
    name = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, max_length=MAX_NAME_BYTES,
                                 help_text="only names containing this (any case)")

    def validate_sort(self, value: str) -> str:
        sorts = self.context["sorts"]
        if value not in sorts:
            raise ValidationError(f"sort by one of {', '.join(sorts)}, got {quoted(value)}")
        return value


class HistoryParams(serializers.Serializer):
    seconds = serializers.FloatField(required=False, default=300.0, min_value=1, max_value=3600,
                                     help_text="how far back, 1 to 3600 (default 300)")
    resolution = serializers.ChoiceField(RESOLUTIONS, required=False, help_text=(
        "the pipeline's windows to chart (default: 10s up to 15 minutes, else 1m)"))


class EventParams(serializers.Serializer):
    kind = serializers.ListField(child=serializers.ChoiceField(KINDS), required=False,
                                 help_text="only these kinds (repeat)")
    node = serializers.CharField(required=False, allow_blank=True, max_length=MAX_NAME_BYTES,
                                 help_text="only events this node reported (id or name)")
    since = serializers.FloatField(required=False, min_value=0, max_value=LATEST_EPOCH,
                                   help_text="only after this time (epoch seconds)")
    q = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, max_length=MAX_TEXT_FILTER,
                              help_text="only events whose text holds this")


class VhostField(serializers.CharField):
    """A vhost name (model.names.check_vhost_name), as given: "/" is %2F in a URL."""

    def __init__(self, **kwargs) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return valid_vhost(data)


class VhostParams(serializers.Serializer):
    vhost = VhostField(required=False, help_text="one vhost (%2F for the default vhost /); "
                                                  "a list without it shows every vhost, a queue is of /")


class VhostInput(_Body):
    name = VhostField(help_text="1 to 255 bytes of UTF-8, no control characters")
    description = serializers.CharField(required=False, allow_blank=True, max_length=MAX_TEXT_FILTER,
                                        help_text="shown in the definitions")

    def validate_description(self, value: str) -> str:
        if not value.isprintable():
            raise ValidationError("the description holds a control character")
        return value


class VhostDeleteParams(serializers.Serializer):
    force = serializers.BooleanField(required=False, default=False, help_text=(
        "delete it even while it holds messages: its clients are disconnected, its queues and messages dropped"))


MAX_THRESHOLD_S = 366 * 24 * 3600  # the management request's own bound (model.requests.Seconds)


def _threshold(what: str, default: str = "") -> serializers.FloatField:
    return serializers.FloatField(required=False, min_value=0, max_value=MAX_THRESHOLD_S,
                                  help_text=f"seconds, 0 to {MAX_THRESHOLD_S}: {what}{default}")


class DiagnosisParams(serializers.Serializer):
    """The doctor's thresholds (docs/doctor.md), in seconds."""

    older_than = _threshold("how old anything must be to be a finding; sets the three below")
    waiting = _threshold("a backlog with no local consumer while consumers wait elsewhere", " (default 60)")
    in_doubt = _threshold("messages held for an absent node", " (default 60)")
    unacked = _threshold("a consumer's oldest unacked delivery", " (default 300)")


class RemedyInput(_Body):
    confirm = serializers.BooleanField(required=False, default=False, help_text=(
        "do a remedy that drops or disconnects something (the finding's remedy.confirm): without it, it is a 400 "
        "saying what it would do"))


class WhereParams(serializers.Serializer):
    node = NameField("node", required=False, allow_blank=True, help_text="one node (default: every node)")


def _epoch(what: str) -> serializers.FloatField:
    return serializers.FloatField(required=False, min_value=0, max_value=LATEST_EPOCH,
                                  help_text=f"epoch seconds: {what}")


class MessageSearchParams(serializers.Serializer):
    """``journey_search``'s filters (model.journey_requests.JourneySearch), bounded alike."""

    queue = NameField("queue name", required=False, max_length=MAX_FIELD, help_text="sent to it or put in it")
    vhost = VhostField(required=False, help_text="only this vhost's (default: every vhost)")
    header = serializers.CharField(required=False, trim_whitespace=False, max_length=2 * MAX_FIELD + 1,
                                   help_text="NAME=VALUE: received with this header, of this value (whole)")
    body = serializers.CharField(required=False, trim_whitespace=False, max_length=MAX_FIELD,
                                 help_text="in the first bytes of its body ([journeys] body_preview)")
    since = _epoch("its first record on a node at or after this")
    until = _epoch("its first record on a node at or before this")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_HITS, default=50,
                                     help_text=f"at most this many, newest first (1 to {MAX_HITS}, default 50)")

    def validate_header(self, header: str) -> str:
        problem = header_filter_problem(header)
        if problem:
            raise ValidationError(problem)
        return header

    def validate(self, data):
        for key in ("since", "until"):
            if key in data and not math.isfinite(data[key]):  # (NaN passes the range's comparisons)
                raise ValidationError({key: "not a number"})
        if data.get("since", 0) > data.get("until", LATEST_EPOCH):
            raise ValidationError("since is after until")
        return data


def valid(serializer_class, data, **context) -> dict:
    """``data`` (a body, or the query parameters) checked by ``serializer_class``; a 400 if not."""
    if isinstance(data, QueryDict):
        data = _plain(data, serializer_class)
    serializer = serializer_class(data=data, context=context)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
