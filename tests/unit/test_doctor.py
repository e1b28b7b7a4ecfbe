"""management.doctor.diagnose on hand-made facts: one test per finding kind and cause
(docs/doctor.md), and the request's hostile thresholds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import msgspec
import pytest
from twisted.internet import task

from gateway.broker.broker import Broker
from gateway.broker.message import Message
from gateway.store.memory import MemoryStore
from management.doctor import Thresholds, diagnose
from management.doctor_history import DeadLetterWindow, DetachedDurables, StalledConsumers
from management.doctor_node import thresholds_of
from model.diagnosis import (
    ConsumerFacts,
    DeadLetterFacts,
    DurableFacts,
    MeshSettingsFacts,
    NodeFactSheet,
    PeerFacts,
    ProducerFacts,
    QueueFacts,
    RedistributionRule,
    StalledFacts,
    UnansweredNode,
)
from model.mesh import RemoteDemand
from model.requests import DeleteDefinition, Diagnosis, ManagementError, Move, Redistribute, decode_request

A, B, C = "a" * 32, "b" * 32, "c" * 32
NAMES = {A: "A", B: "B", C: "C"}
OLD_MS = 120_000  # two minutes: older than the default 60 s


def settings(**overrides) -> MeshSettingsFacts:
    values = dict(max_hops=1, message_load_balancing="ON_DEMAND", duplex=True, redistribution_delay_ms=0,
                  in_doubt_timeout_ms=30_000, peer_retention_s=7 * 24 * 3600, reconnect_attempts=-1)
    values.update(overrides)
    return MeshSettingsFacts(**values)


def up(node: str, other: str, dialled: bool = True) -> PeerFacts:
    return PeerFacts(peer=other, peer_name=NAMES[other], state="up", for_s=100.0, dialled=dialled)


def sheet(node: str, peers=(), queues=(), consumers=(), **mesh) -> NodeFactSheet:
    return NodeFactSheet(node=node, name=NAMES[node], taken_at=1000.0, mesh=settings(**mesh), peers=list(peers),
                         queues=list(queues), consumers=list(consumers), sample_s=10.0)


def backlog(**overrides) -> QueueFacts:
    values = dict(name="orders", depth=40, consumers=0, oldest_age_ms=OLD_MS)
    values.update(overrides)
    return QueueFacts(**values)


CONSUMING = QueueFacts(name="orders", depth=0, consumers=2)


def chain(a_queue: QueueFacts | None = None, a: dict | None = None, b: dict | None = None,
          c_peers: list | None = None) -> list[NodeFactSheet]:
    """A - B - C, 40 old messages of orders on A, two consumers of it on C."""
    return [sheet(A, [up(A, B)], [a_queue or backlog()], **(a or {})),
            sheet(B, [up(B, A, False), up(B, C)], [], **(b or {})),
            sheet(C, c_peers if c_peers is not None else [up(C, B, False)], [CONSUMING])]


def only(findings, kind):
    matching = [finding for finding in findings if finding.kind == kind]
    assert len(matching) == 1, findings
    return matching[0]


# -- A. stranded backlog ------------------------------------------------------------------


def test_max_hops_too_small_names_the_key_the_nodes_and_moves_to_the_next_hop():
    finding = only(diagnose(chain()), "stranded_backlog")
    assert finding.node == A and finding.subject == "orders" and finding.severity == "warning"
    assert finding.config_keys == ["mesh.max_hops"]
    assert "B (max_hops = 1)" in finding.explanation and "2 hops away" in finding.explanation
    assert "A → B → C" in finding.evidence and "40 message(s)" in finding.evidence
    assert finding.remedy is not None
    assert finding.remedy.command == "meshgate move orders --node A --to-node B"
    assert finding.remedy.request == {"action": "move", "node": A, "queue": "orders", "to_node": B, "vhost": "/"}
    assert decode_request(json.dumps(finding.remedy.request)) == Move(node=A, queue="orders", to_node=B)
    assert finding.id == f"stranded_backlog/{A[:8]}///orders"  # kind/node/vhost "/"/queue


def test_a_young_backlog_a_backlog_with_local_consumers_or_none_anywhere_is_no_finding():
    assert diagnose(chain(backlog(oldest_age_ms=5_000))) == []
    assert diagnose(chain(backlog(consumers=1))) == []
    sheets = chain()
    sheets[2].queues = []  # nobody consumes orders anywhere
    assert diagnose(sheets) == []
    assert diagnose(chain(backlog(oldest_age_ms=5_000)), Thresholds(waiting_s=1))[0].kind == "stranded_backlog"


def test_max_hops_large_enough_is_not_the_cause():
    sheets = chain(b={"max_hops": 2})
    finding = only(diagnose(sheets), "stranded_backlog")
    assert finding.config_keys == [] and finding.severity == "info"


def test_addresses_filter_on_the_node_or_on_the_way():
    here = only(diagnose(chain(a={"addresses": ["!/queue/orders"]})), "stranded_backlog")
    assert here.config_keys == ["mesh.addresses"] and "A" in here.explanation and here.remedy is None
    assert '["!/queue/orders"]' in here.explanation
    between = only(diagnose(chain(b={"addresses": ["/queue/billing."]})), "stranded_backlog")
    assert between.config_keys == ["mesh.addresses"] and "on B" in between.explanation
    assert between.remedy is None  # B would not pass it on either


def test_a_backlog_on_its_way_is_no_finding():
    demand = [RemoteDemand(node=C, via=C, consumers=2, hops=1)]
    draining = backlog(remote_demand=demand, forwarding=100)
    assert diagnose([sheet(A, [up(A, C)], [draining]), sheet(C, [up(C, A, False)], [CONSUMING])]) == []


@pytest.mark.parametrize("mode", ["OFF", "STRICT"])
def test_load_balancing_off_or_strict(mode):
    finding = only(diagnose(chain(a={"message_load_balancing": mode, "max_hops": 2})), "stranded_backlog")
    assert finding.config_keys == ["mesh.message_load_balancing"] and f'"{mode}"' in finding.explanation
    assert finding.remedy is not None and "--to-node B" in finding.remedy.command


def test_link_down_no_path():
    down = PeerFacts(peer=B, peer_name="B", state="down", for_s=300.0)
    sheets = [sheet(A, [down], [backlog()], reconnect_attempts=5), sheet(C, [], [CONSUMING])]
    finding = only(diagnose(sheets), "stranded_backlog")
    assert finding.severity == "critical" and finding.remedy is None
    assert "the link with B is down for 5 min" in finding.explanation
    assert finding.config_keys == ["mesh.reconnect_attempts"]


def test_duplex_off_and_the_link_dialled_by_the_other_end():
    sheets = [sheet(A, [up(A, C, dialled=False)], [backlog()], duplex=False), sheet(C, [up(C, A)], [CONSUMING])]
    finding = only(diagnose(sheets), "stranded_backlog")
    assert finding.config_keys == ["mesh.duplex"]


def test_redistribution_delay_pending_and_never():
    demand = [RemoteDemand(node=C, via=C, consumers=2, hops=1)]
    pending = backlog(remote_demand=demand, remote_dispatch=False, hold_pending=True, redistribution_delay_ms=600_000)
    sheets = [sheet(A, [up(A, C)], [pending]), sheet(C, [up(C, A, False)], [CONSUMING])]
    finding = only(diagnose(sheets), "stranded_backlog")
    assert finding.config_keys == ["mesh.redistribution_delay_ms"] and "= 600000" in finding.explanation
    assert finding.severity == "warning" and "is running" in finding.explanation
    assert finding.remedy is not None and finding.remedy.command == "meshgate redistribute orders --node A"
    assert decode_request(json.dumps(finding.remedy.request)) == Redistribute(node=A, queue="orders")

    never = backlog(remote_demand=demand, remote_dispatch=False, redistribution_delay_ms=-1,
                    redistribution_key="mesh.redistribution[0].delay_ms (/queue/orders)")
    sheets[0].queues = [never]
    sheets[0].mesh.redistribution = [RedistributionRule(destination="/queue/orders", delay_ms=-1)]
    sheets[0].mesh.message_load_balancing = "OFF_WITH_REDISTRIBUTION"
    finding = only(diagnose(sheets), "stranded_backlog")
    assert finding.severity == "critical" and "never redistributed" in finding.explanation
    assert finding.remedy is not None and finding.remedy.request == {"action": "redistribute", "node": A,
                                                                     "queue": "orders", "vhost": "/"}
    assert finding.config_keys == ["mesh.redistribution[0].delay_ms (/queue/orders)", "mesh.message_load_balancing"]


def test_busy_peer():
    demand = [RemoteDemand(node=C, via=C, consumers=2, hops=1)]
    busy = up(A, C)
    busy.busy_for_s = 30.0
    sheets = [sheet(A, [busy], [backlog(remote_demand=demand)]), sheet(C, [up(C, A, False)], [CONSUMING])]
    assert only(diagnose(sheets), "stranded_backlog").config_keys == ["store.limit", "store.max_disk_usage"]


# -- B. in doubt; kept for departed --------------------------------------------------------


def test_in_doubt_too_long_for_a_departed_peer_offers_forget():
    gone = PeerFacts(peer=B, peer_name="B", state="down", for_s=400.0, in_doubt=7, in_doubt_for_s=400.0,
                     departed=True)
    findings = diagnose([sheet(A, [gone], [], in_doubt_timeout_ms=3_600_000)])
    finding = only(findings, "in_doubt_waiting")
    assert finding.config_keys == ["mesh.in_doubt_timeout_ms"] and "3600000" in finding.explanation
    assert finding.remedy is not None and finding.remedy.command == f"meshgate forget {B}"
    assert finding.remedy.request == {"action": "forget", "forget": B} and finding.remedy.confirm


def test_in_doubt_for_a_peer_still_around_or_young_has_no_remedy_or_no_finding():
    away = PeerFacts(peer=B, peer_name="B", state="down", for_s=90.0, in_doubt=3, in_doubt_for_s=90.0,
                     heard_ago_s=1.0)
    assert only(diagnose([sheet(A, [away], [])]), "in_doubt_waiting").remedy is None
    away.in_doubt_for_s = 10.0
    assert diagnose([sheet(A, [away], [])]) == []


def test_kept_for_a_departed_node():
    gone = PeerFacts(peer=B, peer_name="B", state="down", for_s=4000.0, backlog=12, markers=3, departed=True)
    finding = only(diagnose([sheet(A, [gone], [], peer_retention_s=0)]), "kept_for_departed")
    assert "12 topic message(s), 3 duplicate marker(s)" in finding.summary
    assert finding.config_keys == ["mesh.peer_retention_s"] and "= 0" in finding.explanation
    assert finding.remedy is not None and finding.remedy.command == f"meshgate forget {B}"
    gone.departed, gone.heard_ago_s = False, 2.0  # still heard of: forget would be refused
    finding = only(diagnose([sheet(A, [gone], [])]), "kept_for_departed")
    assert finding.severity == "info" and finding.remedy is None


# -- C. unacked ----------------------------------------------------------------------------


def test_a_consumer_holding_unacked_deliveries():
    holding = [ConsumerFacts(connection="conn-7", subscription="1", queue="orders", unacked=5, unacked_for_s=900.0),
               ConsumerFacts(connection="conn-7", subscription="2", queue="billing", unacked=1, unacked_for_s=30.0),
               ConsumerFacts(connection="conn-8", subscription="1", queue="orders", unacked=2, unacked_for_s=None)]
    finding = only(diagnose([sheet(A, [], [], holding)]), "unacked_old")
    assert finding.subject == "conn-7" and "5 unacked deliveries" in finding.evidence and "15 min" in finding.summary
    assert finding.remedy is not None and finding.remedy.command == "meshgate close conn-7 --node A"
    assert finding.remedy.request is not None and finding.remedy.request["action"] == "close_connection"
    assert finding.remedy.request["node"] == A and finding.remedy.confirm
    assert only(diagnose([sheet(A, [], [], holding)], Thresholds(unacked_s=10)), "unacked_old").evidence.count(
        "/queue/") == 2


# -- producers paused by flow control ------------------------------------------------------


def test_producers_paused_name_the_limit_and_the_deepest_queues_without_a_remedy():
    paused = [ProducerFacts(connection="A-9", protocol="stomp", limit_key="store.limit", paused_for_s=300.0,
                            limit_state="the journal reached store.limit (1000 of 1000 bytes)"),
              ProducerFacts(connection="A-amqp-2", protocol="amqp", limit_key="broker.memory_limit",
                            paused_for_s=5.0)]
    queues = [backlog(name="small", depth=3), backlog(name="big", depth=900), backlog(name="mid", depth=50),
              backlog(name="tiny", depth=1)]
    a = sheet(A, [], queues)
    a.producers = paused
    finding = only(diagnose([a]), "producers_paused")  # the 5 s pause is flow control at work: no finding
    assert finding.subject == "A-9" and finding.severity == "warning" and finding.remedy is None
    assert finding.config_keys == ["store.limit"] and "raise store.limit" in finding.explanation
    assert "store.limit (1000 of 1000 bytes)" in finding.evidence and "5 min" in finding.evidence
    assert "deepest queues: /queue/big (900), /queue/mid (50), /queue/small (3)" in finding.evidence
    assert finding.id == f"producers_paused/{A[:8]}///A-9"
    assert len([f for f in diagnose([a], Thresholds(paused_s=1)) if f.kind == "producers_paused"]) == 2
    a.producers = [ProducerFacts(connection="x", limit_key="some.future_limit", paused_for_s=1e9)]
    assert only(diagnose([a]), "producers_paused").config_keys == ["some.future_limit"]  # an unknown key is named


# -- dead letters, expiry, abandoned durable subscriptions ------------------------------------


def test_a_growing_dead_letter_queue_names_its_sources_and_offers_browse():
    a = sheet(A)
    a.dead_letters = [
        DeadLetterFacts(name="DLQ", over_s=300.0, depth=12, depth_growth=9, is_target=True),
        DeadLetterFacts(name="orders", over_s=300.0, depth=4, dead_lettered=9, dead_letter_queue="DLQ",
                        max_delivery_attempts=3, max_delivery_attempts_key="broker.max_delivery_attempts"),
        DeadLetterFacts(name="other", over_s=300.0, dead_lettered=2, dead_letter_queue="other.DLQ"),
    ]
    finding = only(diagnose([a]), "dlq_growing")
    assert finding.subject == "DLQ" and finding.severity == "warning"
    assert "holds 12 message(s), 9 more than 5 min ago" in finding.evidence
    assert "/queue/orders (9 dead-lettered after 3 delivery attempts)" in finding.evidence
    assert "/queue/other" not in finding.evidence  # its dead letters go elsewhere
    assert finding.config_keys == ["broker.max_delivery_attempts"]
    assert finding.remedy is not None and finding.remedy.command == "meshgate browse DLQ --node A"
    assert finding.remedy.request == {"action": "browse", "node": A, "queue": "DLQ", "offset": 0, "limit": 50,
                                      "preview": 256, "vhost": "/"}
    assert "meshgate purge DLQ --node A" in finding.explanation
    a.dead_letters[0].depth_growth = -3  # drained meanwhile: not growing
    assert [f.kind for f in diagnose([a])] == []


def test_expiring_messages_lost_are_a_warning_kept_ones_info():
    a = sheet(A)
    a.dead_letters = [DeadLetterFacts(vhost="shop", name="quotes", over_s=60.0, expired=25, depth=2,
                                      message_ttl_ms=5000)]
    finding = only(diagnose([a]), "expiring")
    assert finding.severity == "warning" and finding.remedy is None and finding.vhost == "shop"
    assert finding.config_keys == ["message_ttl_ms of queue quotes (meshgate define-queue)", "broker.expiry_queue"]
    assert "25 message(s) of /queue/quotes on A expired in the last 60 s; they were dropped" in finding.evidence
    a.dead_letters[0].expiry_queue = "expired"
    finding = only(diagnose([a]), "expiring")
    assert finding.severity == "info" and finding.remedy is not None
    assert finding.remedy.command == "meshgate browse expired --node A --vhost shop"


def test_a_durable_subscription_abandoned_with_a_backlog_offers_undefine():
    a = sheet(A)
    a.durables = [DurableFacts(name="app.audit", topic="audit.>", depth=500, detached_for_s=7200.0),
                  DurableFacts(name="app.empty", topic="x", depth=0, detached_for_s=7200.0),
                  DurableFacts(name="app.roaming", topic="x", depth=5, detached_for_s=7200.0,
                               subscribed_elsewhere=True),
                  DurableFacts(name="app.recent", topic="x", depth=5, detached_for_s=60.0)]
    finding = only(diagnose([a]), "durable_abandoned")
    assert finding.subject == "app.audit" and "keeps 500 message(s)" in finding.evidence
    assert finding.remedy is not None and finding.remedy.confirm
    assert finding.remedy.command == "meshgate undefine durable app.audit"
    assert decode_request(json.dumps(finding.remedy.request)) == DeleteDefinition(kind="durable", name="app.audit")
    assert len([f for f in diagnose([a], Thresholds(durable_gone_s=30)) if f.kind == "durable_abandoned"]) == 2


def test_the_dead_letter_window_and_detached_durables_on_a_broker():
    broker = Broker(MemoryStore(), clock=task.Clock())
    window, durables = DeadLetterWindow(window_s=100), DetachedDurables()
    orders = broker.create_queue("orders")
    window.sample(0.0, {"/": broker})
    orders.dead_lettered = 4  # as gateway/broker/dead_letters.py counts them
    broker.create_queue("DLQ")
    for i in range(4):
        broker.enqueue(broker.queues["DLQ"], Message(f"m{i}", "queue", "DLQ", {}, b""))
    (dlq, source) = window.facts(50.0, {"/": broker})
    assert (dlq.name, dlq.is_target, dlq.depth_growth, dlq.over_s) == ("DLQ", True, 4, 50.0)
    assert (source.name, source.dead_lettered, source.dead_letter_queue) == ("orders", 4, "DLQ")
    for t in (60.0, 120.0, 170.0, 230.0):
        window.sample(t, {"/": broker})
    assert window.facts(230.0, {"/": broker}) == []  # the growth is older than the window (100 s)

    binding = broker.bind_topic("app.audit", "audit", None, durable=True)
    durables.sample(10.0, {"/": broker})
    durables.sample(70.0, {"/": broker})
    (fact,) = durables.facts(100.0, {"/": broker})
    assert (fact.name, fact.topic, fact.detached_for_s) == ("app.audit", "audit", 90.0)
    binding.active = object()  # a subscriber came back
    durables.sample(110.0, {"/": broker})
    assert durables.facts(120.0, {"/": broker}) == []


# -- consumers that take no more ---------------------------------------------------------------


def test_prefetch_bound_and_slow_consumers():
    a = sheet(A)
    a.stalled = [StalledFacts(name="orders", cause="prefetch", for_s=120.0, depth=300, consumers=2, unacked=20,
                              prefetch=10, connections=["A-1", "A-2"]),
                 StalledFacts(name="feed", cause="unwritable", for_s=90.0, depth=50, consumers=1,
                              connections=[f"A-{i}" for i in range(7)]),
                 StalledFacts(name="young", cause="prefetch", for_s=10.0, depth=5, consumers=1),
                 StalledFacts(name="later", cause="a newer node's cause", for_s=900.0, depth=5, consumers=1)]
    findings = diagnose([a])
    bound = only(findings, "prefetch_bound")
    assert bound.subject == "orders" and bound.config_keys == ["broker.default_prefetch"] and bound.remedy is None
    assert "hold 20 unacked deliveries" in bound.evidence and "(up to 10)" in bound.evidence
    assert "activemq.prefetchSize" in bound.explanation and "basic.qos" in bound.explanation
    slow = only(findings, "slow_consumers")
    assert slow.subject == "feed" and "A-0, A-1, A-2, A-3, A-4 and 2 more" in slow.evidence
    assert len([f for f in diagnose([a], Thresholds(stalled_s=0)) if f.kind == "prefetch_bound"]) == 2


def test_stalled_consumers_are_sampled_since_first_seen():
    def consumer(writable=True, inflight=0, prefetch=2, ack_mode="client"):
        session = SimpleNamespace(writable=writable, connection=None, name="A-1")
        sub = SimpleNamespace(session=session, inflight=dict.fromkeys(range(inflight)), prefetch=prefetch,
                              ack_mode=ack_mode)
        sub.ready = lambda: session.writable and (sub.ack_mode == "auto" or len(sub.inflight) < sub.prefetch)
        return sub

    class FakeQueue(SimpleNamespace):
        def __len__(self):
            return self.depth

    full = FakeQueue(consumers=[consumer(inflight=2)], depth=9)
    backed_up = FakeQueue(consumers=[consumer(writable=False, ack_mode="auto")], depth=3)
    taking = FakeQueue(consumers=[consumer(inflight=2), consumer(inflight=1)], depth=3)
    brokers: dict = {"/": SimpleNamespace(queues={"full": full, "slow": backed_up, "taking": taking})}
    stalls = StalledConsumers()
    stalls.sample(10.0, brokers)
    stalls.sample(20.0, brokers)
    facts = {fact.name: fact for fact in stalls.facts(25.0, brokers)}
    assert sorted(facts) == ["full", "slow"]
    assert (facts["full"].cause, facts["full"].for_s, facts["full"].unacked) == ("prefetch", 15.0, 2)
    assert facts["slow"].cause == "unwritable" and facts["slow"].connections == ["A-1"]
    full.consumers[0].inflight = {}  # it acknowledged: it takes again
    stalls.sample(30.0, brokers)
    assert [fact.name for fact in stalls.facts(30.0, brokers)] == ["slow"]


# -- unanswered; order; thresholds -----------------------------------------------------------


def test_unanswered_nodes_are_a_finding_and_critical_comes_first():
    down = PeerFacts(peer=B, peer_name="B", state="down", for_s=300.0)
    sheets = [sheet(A, [down], [backlog()]), sheet(C, [], [CONSUMING])]
    findings = diagnose(sheets, unanswered=[UnansweredNode(node=B, name="B", reason="timed out")])
    assert [f.kind for f in findings] == ["stranded_backlog", "node_unanswered"]
    assert findings[0].severity == "critical" and findings[1].evidence == "timed out"


def test_thresholds_of_the_request():
    assert thresholds_of(Diagnosis(older_than_s=5)) == Thresholds(5, 5, 5, paused_s=5, durable_gone_s=5, stalled_s=5)
    assert thresholds_of(Diagnosis(unacked_s=7)) == Thresholds(60, 60, 7)


@pytest.mark.parametrize("body", ['{"action": "diagnosis", "older_than_s": -1}',
                                  '{"action": "diagnosis", "waiting_s": 1e999}',
                                  '{"action": "diagnosis", "unacked_s": "5m"}',
                                  '{"action": "diagnosis", "in_doubt_s": 1e12}',
                                  '{"action": "diagnosis", "older_than_s": true}'])
def test_hostile_thresholds_are_a_bad_request(body):
    with pytest.raises(ManagementError) as caught:
        decode_request(body)
    assert caught.value.code == "bad_request"


def test_a_newer_nodes_facts_decode_and_what_is_unknown_here_is_left_out():
    body = {"node": A, "name": "A", "taken_at": 1.0, "some_new_list": [1],
            "stalled": [{"name": "q", "cause": "a newer cause", "for_s": 999.0, "depth": 3, "consumers": 1}],
            "producers": [{"connection": "c", "limit_key": "store.limit", "paused_for_s": 999.0, "new": True}]}
    decoded = msgspec.convert(body, NodeFactSheet)
    assert [f.kind for f in diagnose([decoded])] == ["producers_paused"]
