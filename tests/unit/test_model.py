"""model/: the typed model every reader and writer shares (JSON wire format, events, requests, replies)."""

from __future__ import annotations

import msgspec
import pytest

from model import (
    SCHEMA_VERSION,
    Addresses,
    ChannelSummary,
    ClusterView,
    Connection,
    Link,
    MetricsStatus,
    Node,
    NodeSummary,
    PartialQueue,
    QueueSummary,
    RemoteDemand,
    Snapshot,
    TopicSubscription,
    results,
)
from model import events as ev
from model import requests as rq
from model.latency import BUCKETS
from model.mesh import ListenerCertificate, address_text


def node(node_id: str = "n-1") -> Node:
    return Node(
        id=node_id, name="alpha", version="0.1.0", group_name="g", started_at=1700000000.25, state="leaving",
        last_seen=1700000100.5, addresses=Addresses(stomp="127.0.0.1:61613", stomp_tls="[::1]:61612", link="h:7"),
        connections=3, memory_used=4096, memory_limit=1 << 28, store_bytes=123456, in_doubt=2,
        metrics=MetricsStatus(state="behind", buffered=12, dropped=1, last_error="ConnectionError: refused"),
        certificates=[ListenerCertificate(listener="mesh", subject="CN=alpha,O=Example", not_after=1700864000.0)],
    )


def link() -> Link:
    return Link(node="n-1", peer="n-2", peer_name="beta", direction="duplex", dialled=True, state="up",
                since=1700000001.0, address="10.0.0.2:7000", in_flight=4, backlog=5, in_doubt=6,
                forwarded_out=70, forwarded_in=80)


def partial_queue() -> PartialQueue:
    latency = [0] * BUCKETS
    latency[3], latency[10], latency[31] = 7, 2, 1
    return PartialQueue(
        node="n-1", name="orders", depth=10, in_flight=2, forwarding=1, in_doubt=3, consumers=4,
        remote_demand=[RemoteDemand(node="n-3", via="n-2", consumers=2, hops=2)], oldest_age_ms=1500,
        enqueued=100, acked=80, forwarded_out=5, forwarded_in=6, redistributed_out=7, redistributed_in=8,
        expired=9, dead_lettered=11, latency=latency, latency_sum_ms=12.5, window_depth_max=14,
    )


def subscription() -> TopicSubscription:
    return TopicSubscription(node="n-1", name="client-1.prices", destination="/topic/prices.>", client_id="client-1",
                             durable=True, active=True, depth=5, in_flight=1, selector="x = 1", connection="c-9")


def snapshot() -> Snapshot:
    return Snapshot(seq=42, taken_at=1700000200.75, node=node(), links=[link()], queues=[partial_queue()],
                    subscriptions=[subscription()])


def cluster_view() -> ClusterView:
    return ClusterView(
        reporter="n-1", taken_at=1700000300.0,
        nodes=[
            NodeSummary(node=node("n-1"), links=["n-2"], queues=[QueueSummary("orders", 10, 4, 2, 3)], age=0.0,
                        answered=True, seq=9),
            NodeSummary(node=node("n-2"), links=["n-1"], queues=[QueueSummary("audit", 1, 0, 0, 0)], age=2.5,
                        answered=False, seq=3),
        ],
    )


# -- round trips ---------------------------------------------------------------------------


def test_snapshot_round_trips_through_json():
    original = snapshot()
    data = msgspec.json.encode(original)
    decoded = msgspec.json.decode(data, type=Snapshot)
    assert decoded == original
    # Every nested part survived, not just the top level (equality is structural, but say it).
    assert decoded.queues[0].remote_demand == [RemoteDemand(node="n-3", via="n-2", consumers=2, hops=2)]
    assert decoded.queues[0].latency[31] == 1 and sum(decoded.queues[0].latency) == 10
    assert decoded.node.metrics.state == "behind"
    assert decoded.schema_version == SCHEMA_VERSION


def test_cluster_view_round_trips_and_queue_summary_is_an_array_on_the_wire():
    original = cluster_view()
    data = msgspec.json.encode(original)
    assert msgspec.json.decode(data, type=ClusterView) == original
    raw = msgspec.json.decode(data)
    # [name, depth, consumers, in_flight, in_doubt, vhost]
    assert raw["nodes"][0]["queues"] == [["orders", 10, 4, 2, 3, "/"]]
    assert raw["schema_version"] == SCHEMA_VERSION


class QueueSummaryOfVersion4(msgspec.Struct, array_like=True):
    """QueueSummary as a node of link protocol 4 reads it."""

    name: str
    depth: int
    consumers: int
    in_flight: int
    in_doubt: int


def test_a_queue_row_without_its_vhost_is_of_the_default_vhost_and_one_with_it_reads_as_before():
    assert msgspec.json.decode(b'["orders",10,4,2,3]', type=QueueSummary) == QueueSummary("orders", 10, 4, 2, 3, "/")
    row = msgspec.json.encode(QueueSummary("orders", 10, 4, 2, 3, "team-a"))
    # An older reader takes the row, vhost ignored: so mesh.topology sends it the rows of "/" alone.
    assert msgspec.json.decode(row, type=QueueSummaryOfVersion4) == QueueSummaryOfVersion4("orders", 10, 4, 2, 3)


def test_schema_version_is_one():
    assert SCHEMA_VERSION == 1
    assert Snapshot(seq=1, taken_at=0.0, node=node()).schema_version == 1


# The documented wire names: renaming or removing one breaks every reader (bump SCHEMA_VERSION instead).
NODE_KEYS = ["id", "name", "version", "group_name", "started_at", "state", "last_seen", "addresses", "connections",
             "memory_used", "memory_limit", "store_bytes", "store_limit", "disk_free", "store_blocked", "in_doubt",
             "metrics", "ha_mode", "ha_state", "epoch", "standbys", "ha_role", "replication_state",
             "replication_lag", "replication_sync", "replication_backup", "certificates"]
LINK_KEYS = ["node", "peer", "peer_name", "direction", "dialled", "state", "since", "address", "in_flight", "backlog",
             "in_doubt", "forwarded_out", "forwarded_in"]
PARTIAL_QUEUE_KEYS = ["node", "name", "depth", "in_flight", "forwarding", "in_doubt", "consumers", "remote_demand",
                      "oldest_age_ms", "enqueued", "acked", "forwarded_out", "forwarded_in", "redistributed_out",
                      "redistributed_in", "expired", "dead_lettered", "latency", "latency_sum_ms", "window_depth_max"]


@pytest.mark.parametrize("value, keys", [
    (node(), NODE_KEYS), (link(), LINK_KEYS), (partial_queue(), PARTIAL_QUEUE_KEYS),
], ids=["Node", "Link", "PartialQueue"])
def test_wire_field_names_are_stable(value, keys):
    assert list(msgspec.json.decode(msgspec.json.encode(value))) == keys


def test_nested_wire_field_names_are_stable():
    raw = msgspec.json.decode(msgspec.json.encode(snapshot()))
    assert list(raw) == ["schema_version", "seq", "taken_at", "node", "queues_version", "links", "queues",
                         "subscriptions"]
    assert list(raw["node"]["addresses"]) == ["stomp", "stomp_tls", "link", "websocket", "websocket_tls", "amqp",
                                               "amqp_tls"]
    assert list(raw["node"]["metrics"]) == ["state", "buffered", "dropped", "last_error"]
    assert list(raw["queues"][0]["remote_demand"][0]) == ["node", "via", "consumers", "hops"]


def test_units_on_the_wire():
    raw = msgspec.json.decode(msgspec.json.encode(snapshot()))
    assert raw["taken_at"] == 1700000200.75  # epoch seconds, as a float
    assert raw["node"]["started_at"] == 1700000000.25
    assert raw["queues"][0]["oldest_age_ms"] == 1500  # milliseconds, an integer
    assert raw["node"]["memory_used"] == 4096  # bytes
    assert len(raw["queues"][0]["latency"]) == BUCKETS


def test_defaults_fill_what_an_older_writer_left_out():
    queue = msgspec.json.decode(b'{"node":"n","name":"q","depth":1,"in_flight":0,"consumers":0}', type=PartialQueue)
    assert queue.latency == [] and queue.remote_demand == [] and queue.oldest_age_ms is None
    assert queue.latency is not PartialQueue(node="n", name="q", depth=0, in_flight=0, consumers=0).latency


def test_a_node_from_a_writer_without_ha_fields_reads_as_active_epoch_zero():
    raw = msgspec.json.decode(msgspec.json.encode(node()))
    for key in ("ha_mode", "ha_state", "epoch", "standbys"):
        del raw[key]
    decoded = msgspec.json.decode(msgspec.json.encode(raw), type=Node)
    assert (decoded.ha_mode, decoded.ha_state, decoded.epoch, decoded.standbys) == ("none", "active", 0, [])
    assert decoded == node()


def test_a_node_with_a_standby_round_trips():
    from model.mesh import Standby

    waiting = msgspec.structs.replace(node(), ha_mode="shared-store", epoch=7,
                                      standbys=[Standby(host="h2", pid=4242, since=1700000100.5)])
    raw = msgspec.json.decode(msgspec.json.encode(waiting))
    assert raw["standbys"] == [{"host": "h2", "pid": 4242, "since": 1700000100.5}] and raw["epoch"] == 7
    assert msgspec.json.decode(msgspec.json.encode(waiting), type=Node) == waiting


def test_unknown_fields_are_ignored_when_decoding():
    raw = msgspec.json.decode(msgspec.json.encode(snapshot()))
    raw["added_in_v2"] = {"anything": [1, 2]}
    raw["node"]["cpu_percent"] = 12.5
    raw["links"][0]["rtt_ms"] = 3
    raw["queues"][0]["paused"] = True
    raw["queues"][0]["remote_demand"][0]["weight"] = 2
    raw["subscriptions"][0]["shared"] = False
    decoded = msgspec.json.decode(msgspec.json.encode(raw), type=Snapshot)
    assert decoded == snapshot()
    view = msgspec.json.decode(msgspec.json.encode(cluster_view()))
    view["nodes"][0]["zone"] = "eu-1"
    assert msgspec.json.decode(msgspec.json.encode(view), type=ClusterView) == cluster_view()


CONNECTION_KEYS = ["id", "node", "remote", "user", "protocol", "version", "since", "client_id", "subscriptions",
                   "unacked", "vhost", "channels", "channel_details"]
CHANNEL_KEYS = ["number", "consumers", "unacked", "prefetch", "global_prefetch", "confirm", "transactional"]


def amqp_connection() -> Connection:
    return Connection(id="alpha-amqp-1", node="n-1", remote="127.0.0.1:50000", user="guest", protocol="amqp",
                      version="0-9-1", since=1700000000.5, subscriptions=1, unacked=3, channels=2, channel_details=[
                          ChannelSummary(number=1, consumers=1, unacked=2, prefetch=10, global_prefetch=20),
                          ChannelSummary(number=2, unacked=1, confirm=True, transactional=False)])


def test_a_connection_lists_its_channels_and_older_readers_and_writers_still_get_along():
    raw = msgspec.json.decode(msgspec.json.encode(amqp_connection()))
    assert list(raw) == CONNECTION_KEYS and list(raw["channel_details"][0]) == CHANNEL_KEYS
    assert msgspec.json.decode(msgspec.json.encode(raw), type=Connection) == amqp_connection()

    class OlderConnection(msgspec.Struct, kw_only=True):  # a reader from before channels
        id: str
        subscriptions: int = 0
        unacked: int = 0

    older = msgspec.json.decode(msgspec.json.encode(amqp_connection()), type=OlderConnection)
    assert (older.id, older.subscriptions, older.unacked) == ("alpha-amqp-1", 1, 3)
    # What an older writer (or a STOMP connection) says: no channels.
    stomp = msgspec.json.decode(b'{"id":"alpha-1","node":"n-1","remote":"h:1","user":"u","protocol":"stomp",'
                                b'"version":"1.2","since":1.0}', type=Connection)
    assert stomp.channels == 0 and stomp.channel_details == []


def test_address_text_brackets_ipv6_hosts():
    assert address_text("127.0.0.1", 61613) == "127.0.0.1:61613"
    assert address_text("broker.example", 7000) == "broker.example:7000"
    assert address_text("::1", 61613) == "[::1]:61613"
    assert address_text("fe80::1%eth0", 0) == "[fe80::1%eth0]:0"


# -- events ---------------------------------------------------------------------------------


EVENT_SAMPLES = {
    ev.NodeJoined: ev.NodeJoined(subject="n-2", name="beta"),
    ev.NodeLeft: ev.NodeLeft(subject="n-2", name="beta", reason="expired"),
    ev.NodeLeaving: ev.NodeLeaving(subject="n-2", name="beta"),
    ev.LinkUp: ev.LinkUp(peer="n-2", peer_name="beta", dialled=True),
    ev.LinkDown: ev.LinkDown(peer="n-2", peer_name="beta", reason="heartbeat timeout"),
    ev.Redistribution: ev.Redistribution(queue="orders", source="n-1", target="n-2", count=17),
    ev.ScaleDown: ev.ScaleDown(target=None, left=3),
    ev.DeadLetter: ev.DeadLetter(queue="orders", reason="max-delivery-attempts", dead_letter_queue="DLQ", count=2),
    ev.Expired: ev.Expired(queue="orders", count=4),
    ev.ConsumerAttached: ev.ConsumerAttached(destination="/queue/orders", connection="c-1", consumers=1),
    ev.ConsumerDetached: ev.ConsumerDetached(destination="/topic/a.>", connection="c-1", consumers=0),
    ev.AuthenticationFailed: ev.AuthenticationFailed(user=None, remote="10.0.0.9:5555"),
    ev.ProducersBlocked: ev.ProducersBlocked(reason="the disk is 91% full (store.max_disk_usage 90%)"),
    ev.ProducersResumed: ev.ProducersResumed(blocked_s=12.5),
    ev.AdminAction: ev.AdminAction(user="root", action="purge", target="/queue/orders", ok=False, result="refused"),
    ev.CertificateExpiring: ev.CertificateExpiring(listener="mesh", subject="CN=alpha", not_after=1700864000.0),
}


def test_every_event_type_has_a_sample_here():
    assert set(EVENT_SAMPLES) == set(ev.EVENT_TYPES)


def test_kinds_match_the_tags():
    assert ev.KINDS == tuple(t.__struct_config__.tag for t in ev.EVENT_TYPES)
    assert len(set(ev.KINDS)) == len(ev.KINDS)
    assert "dead_letter" in ev.KINDS and "expiry" in ev.KINDS and "admin_action" in ev.KINDS
    assert set(ev.AnyEvent.__args__) == set(ev.EVENT_TYPES)


@pytest.mark.parametrize("event_type", ev.EVENT_TYPES, ids=lambda t: t.__name__)
def test_every_event_round_trips_with_its_kind(event_type):
    event = EVENT_SAMPLES[event_type]
    event.time, event.node = 1700000000.5, "n-1"
    data = msgspec.json.encode([event])
    raw = msgspec.json.decode(data)
    assert raw[0]["kind"] == event_type.__struct_config__.tag
    assert raw[0]["time"] == 1700000000.5 and raw[0]["node"] == "n-1"
    decoded = msgspec.json.decode(data, type=list[ev.AnyEvent])
    assert decoded == [event] and type(decoded[0]) is event_type


def test_event_lists_mix_kinds_and_ignore_unknown_fields():
    data = (b'[{"kind":"expiry","queue":"q","count":1,"time":5.0,"node":"n","new_field":1},'
            b'{"kind":"link_up","peer":"p","peer_name":"pn","dialled":false}]')
    decoded = msgspec.json.decode(data, type=list[ev.AnyEvent])
    assert decoded == [ev.Expired(queue="q", count=1, time=5.0, node="n"),
                       ev.LinkUp(peer="p", peer_name="pn", dialled=False)]


def test_unknown_event_kind_is_rejected():
    with pytest.raises(msgspec.ValidationError, match="kind"):
        msgspec.json.decode(b'[{"kind":"meteor_strike"}]', type=list[ev.AnyEvent])


# -- requests and replies -----------------------------------------------------------------


@pytest.mark.parametrize("body, expected", [
    ('{"action":"nodes"}', rq.Nodes()),
    ('{"action":"nodes","fresh":false}', rq.Nodes(fresh=False)),
    ('{"action":"summary","node":"n-2"}', rq.Summary(node="n-2")),
    ('{"action":"queues","node":"*","name":"orders"}', rq.Queues(node="*", name="orders")),
    ('{"action":"links"}', rq.Links()),
    ('{"action":"connections"}', rq.Connections()),
    ('{"action":"subscriptions"}', rq.Subscriptions()),
    ('{"action":"events","since":12.5,"kinds":["link_up"],"limit":5}',
     rq.Events(since=12.5, kinds=["link_up"], limit=5)),
    ('{"action":"browse","queue":"orders","offset":10,"limit":5,"preview":16}',
     rq.Browse(queue="orders", offset=10, limit=5, preview=16)),
    ('{"action":"purge","queue":"orders"}', rq.Purge(queue="orders")),
    ('{"action":"delete_queue","queue":"orders"}', rq.DeleteQueue(queue="orders")),
    ('{"action":"pull","queue":"orders","to_node":"n-2"}', rq.Pull(queue="orders", to_node="n-2")),
    ('{"action":"move","queue":"orders","to_node":"n-2","count":3}', rq.Move(queue="orders", to_node="n-2", count=3)),
    ('{"action":"send","destination":"/queue/q","body":"hi","headers":{"a":"b"},"persistent":true}',
     rq.Send(destination="/queue/q", body="hi", headers={"a": "b"}, persistent=True)),
    ('{"action":"close_connection","connection":"c-1"}', rq.CloseConnection(connection="c-1")),
    ('{"action":"forget","forget":"n-9"}', rq.Forget(forget="n-9")),
    ('{"action":"scale_down","node":"n-3"}', rq.ScaleDownNode(node="n-3")),
])
def test_every_request_decodes(body, expected):
    for data in (body, body.encode()):
        request = rq.decode_request(data)
        assert request == expected and type(request) is type(expected)


def test_every_request_type_is_covered():
    tags = {t.__struct_config__.tag for t in rq.AnyRequest.__args__}
    assert tags == set(rq.RESULT_TYPES)
    assert rq.ADMIN_ACTIONS <= tags and rq.SINGLE_ANSWER <= tags


def test_request_defaults():
    events = rq.decode_request('{"action":"events"}')
    assert (events.since, events.kinds, events.limit, events.node) == (0.0, [], 100, None)
    browse = rq.decode_request('{"action":"browse","queue":"q"}')
    assert (browse.offset, browse.limit, browse.preview) == (0, 50, 256)
    close = rq.decode_request('{"action":"close_connection","connection":"c"}')
    assert close.reason == "closed by an administrator"


@pytest.mark.parametrize("body, named", [
    (b"this is not json", "not JSON"),
    (b"", "not JSON"),
    (b'{"action":"purge","queue":', "not JSON"),
    (b'{"action":"explode"}', "explode"),
    (b'{"queue":"orders"}', "action"),
    (b'{"action":"purge"}', "queue"),
    (b'{"action":"move","to_node":"n-2"}', "queue"),
    (b'{"action":"forget"}', "forget"),
    (b'{"action":"browse","queue":"q","limit":"ten"}', "limit"),
    (b'{"action":"events","since":"yesterday"}', "since"),
    (b'{"action":"purge","queue":7}', "queue"),
    (b'{"action":"send","destination":"/queue/q","headers":{"a":1}}', "headers"),
    (b'["purge","orders"]', "object"),
], ids=["not-json", "empty", "truncated", "unknown-action", "no-action", "missing-queue", "move-missing-queue",
        "missing-forget", "wrong-type-limit", "wrong-type-since", "wrong-type-queue", "wrong-header-value",
        "not-an-object"])
def test_bad_requests_raise_bad_request_naming_the_problem(body, named):
    with pytest.raises(rq.ManagementError) as info:
        rq.decode_request(body)
    error = info.value
    assert error.code == "bad_request"
    assert named in str(error)
    assert error.failure() == rq.Failure(code="bad_request", message=str(error), node=None)
    assert rq.ERROR_CODES[error.code] == 400


def test_decode_reply_types_the_result_by_action():
    queues = [partial_queue(), PartialQueue(node="n-2", name="orders", depth=0, in_flight=0, consumers=1)]
    reply = rq.Reply(action="queues", result=queues,
                     failures=[rq.Failure(code="unreachable", message="no answer", node="n-3")])
    decoded = rq.decode_reply(msgspec.json.encode(reply))
    assert all(type(q) is PartialQueue for q in decoded.result)
    assert decoded.result == queues
    assert decoded.failures == [rq.Failure(code="unreachable", message="no answer", node="n-3")]
    assert decoded.ok and decoded.schema_version == SCHEMA_VERSION


@pytest.mark.parametrize("action, result, check", [
    ("nodes", cluster_view(), lambda r: type(r) is ClusterView and r == cluster_view()),
    ("summary", cluster_view().nodes[0], lambda r: type(r) is NodeSummary and r.queues[0].name == "orders"),
    ("links", [link()], lambda r: r == [link()]),
    ("subscriptions", [subscription()], lambda r: r == [subscription()]),
    ("events", [ev.LinkUp(peer="p", peer_name="pn", dialled=True), ev.Expired(queue="q", count=2)],
     lambda r: [type(e) for e in r] == [ev.LinkUp, ev.Expired] and r[1].count == 2),
    ("forget", rq.Done(node="n-1", action="forget", target="n-9"), lambda r: type(r) is rq.Done and r.target == "n-9"),
    ("purge", [rq.Done(node="n-1", action="purge", target="/queue/q", count=5)],
     lambda r: type(r[0]) is rq.Done and r[0].count == 5),
    ("browse", [rq.BrowsePage(node="n-1", queue="q", total=1, offset=0, messages=[results.BrowsedMessage(
        id="m-1", destination="/queue/q", headers={}, size=3, body="abc", truncated=False, persistent=True,
        priority=4, redelivered=False, age_ms=12)])],
     lambda r: type(r[0].messages[0]) is results.BrowsedMessage and r[0].messages[0].age_ms == 12),
])
def test_decode_reply_per_result_type(action, result, check):
    decoded = rq.decode_reply(msgspec.json.encode(rq.Reply(action=action, result=result)))
    assert check(decoded.result)


def test_decode_reply_of_a_failure_keeps_the_error_and_no_result():
    reply = rq.Reply(action="purge", ok=False, error=rq.Failure(code="forbidden", message="no admin"))
    decoded = rq.decode_reply(msgspec.json.encode(reply))
    assert decoded.result is None and not decoded.ok
    assert decoded.error == rq.Failure(code="forbidden", message="no admin")


def test_decode_reply_rejects_a_result_of_the_wrong_shape():
    with pytest.raises(msgspec.ValidationError):
        rq.decode_reply(b'{"action":"queues","result":[{"node":"n"}]}')
