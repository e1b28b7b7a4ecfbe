"""Management requests carried over the mesh: routing along the links, gathering
answers from every node, failures (no path, a link gone, a silent node), node
names and id prefixes, admin actions on a remote node, permissions, malformed
requests and events, on brokers linked over iosim with a simulated clock."""

from __future__ import annotations

import msgspec
from twisted.internet import defer

from management.service import REQUEST_TIMEOUT
from mesh.wire import FrameType
from model.definitions import PermissionSpec, QueueSettings
from model.events import AdminAction, LinkUp, NodeJoined
from model.mesh import ClusterView, NodeSummary, PartialQueue
from model.requests import (
    ADMIN_ACTIONS,
    ApplyRemedy,
    Browse,
    BrowsePage,
    CloseConnection,
    DefineQueue,
    DefineTrace,
    Definitions,
    DeleteDefinition,
    DeleteQueue,
    Done,
    Events,
    Forget,
    HaFailback,
    JourneySearch,
    JourneySteps,
    Move,
    Nodes,
    Purge,
    Queues,
    Redistribute,
    ReloadTls,
    ScaleDownNode,
    Send,
    TraceNext,
    VhostAdd,
    VhostDelete,
    VhostPermissionsClear,
    VhostPermissionsSet,
    VhostSetLimits,
)
from tests.protocol.management_harness import ManagedNode, ManagementHarness, wire
from tests.protocol.test_mesh_in_doubt import lose

# Node ids chosen so that gathering (by id: a, b, c) and time order can differ,
# and b's and c's ids share a prefix.
IDS = {
    "a": "0aaa0000-0000-4000-8000-00000000000a",
    "b": "abcd1111-0000-4000-8000-00000000000b",
    "c": "abcd2222-0000-4000-8000-00000000000c",
}


def chain(ids: dict[str, str] | None = None):
    """a linked with b, b with c; b's gossip has told a of c (and c of a)."""
    mesh = ManagementHarness()
    a, b, c = (mesh.node(name, node_id=(ids or {}).get(name)) for name in "abc")
    to_b = mesh.link(a, b)
    to_c = mesh.link(b, c)
    mesh.gossip(b)
    assert a.mesh.topology.route(c.id) == [a.id, b.id, c.id]
    assert c.mesh.topology.route(a.id) == [c.id, b.id, a.id]
    return mesh, a, b, c, to_b, to_c


def fill(node: ManagedNode, count: int, queue: str = "orders") -> None:
    for i in range(count):
        node.broker.send("queue", queue, {"n": str(i)}, b"%s-%d" % (node.name.encode(), i), True)


def depths(reply) -> dict[str, int]:
    return {queue.node: queue.depth for queue in reply.result}


def hold_answers(node: ManagedNode) -> list:
    """The node takes requests but answers only when the test fires what it holds."""
    held = []
    answer = node.mesh.router.handler

    def slow(body, origin):
        d = defer.Deferred()
        held.append((d, lambda: answer(body, origin)))
        return d

    node.mesh.router.handler = slow
    return held


def snapshot(*nodes: ManagedNode) -> dict:
    """What a request must not change on a node."""
    return {node.name: (sorted((name, len(q)) for name, q in node.broker.queues.items()),
                        sorted(node.broker.store.messages), len(node.events.recent), len(node.received_frames))
            for node in nodes}


# -- 1. routing ------------------------------------------------------------------------------------


def test_a_request_for_a_node_two_links_away_is_answered_by_it_through_the_middle_node():
    mesh, a, b, c, _, to_c = chain()
    c.broker.send("queue", "orders", {}, b"x", True)
    reply = a.ask(Queues(node=c.id))
    assert reply.ok and reply.error is None and reply.failures == []
    (queue,) = reply.result
    assert isinstance(queue, PartialQueue)
    assert (queue.node, queue.name, queue.depth, queue.enqueued) == (c.id, "orders", 1, 1)
    assert "orders" not in a.broker.queues and "orders" not in b.broker.queues
    # b took the request from a and passed it on; c answered; the answer came back through b.
    (at_b,) = b.requests_seen()
    (at_c,) = c.requests_seen()
    assert at_b == at_c and at_b["route"] == [a.id, b.id, c.id]
    assert at_b["body"]["user"] == "tester" and at_b["body"]["request"]["node"] == c.id
    (reply_at_b,) = b.frames(FrameType.REPLY)
    (reply_at_a,) = a.frames(FrameType.REPLY)
    assert reply_at_b["id"] == reply_at_a["id"] == at_b["id"] and reply_at_a["answer"]["result"][0]["node"] == c.id
    assert a.requests_seen() == [] and c.frames(FrameType.REPLY) == []
    assert not a.mesh.router._pending
    # Without the middle node's link to c there is no way to c at all.
    mesh.cut(to_c)
    failed = a.ask(Queues(node=c.id))
    assert not failed.ok and failed.error.code == "unreachable"
    assert len(c.requests_seen()) == 1


# -- 2. every node -------------------------------------------------------------------------------


def test_queues_of_every_node_are_gathered_and_nodes_answer_afresh():
    mesh, a, b, c, _, _ = chain()
    fill(a, 1)
    fill(b, 2)
    fill(c, 3)
    reply = a.ask(Queues(node="*"))
    assert reply.ok and reply.failures == []
    assert depths(reply) == {a.id: 1, b.id: 2, c.id: 3} and {q.name for q in reply.result} == {"orders"}
    assert len(b.requests_seen()) == 2 and len(c.requests_seen()) == 1  # b's own, and c's passed on

    nodes = a.ask(Nodes())
    assert nodes.ok and isinstance(nodes.result, ClusterView) and nodes.result.reporter == a.id
    summaries = nodes.result.nodes
    assert len(summaries) == 3 and all(isinstance(s, NodeSummary) for s in summaries)
    assert [s.node.name for s in summaries] == ["a", "b", "c"] and all(s.answered for s in summaries)
    by_name = {s.node.name: s for s in summaries}
    assert by_name["b"].links == sorted([a.id, c.id]) and by_name["c"].links == [b.id]
    assert [(q.name, q.depth) for q in by_name["c"].queues] == [("orders", 3)]
    assert by_name["a"].node.addresses.link == "127.0.0.1:61616"  # the harness's LocalState addresses


def test_nodes_from_the_gossiped_view_asks_no_node():
    mesh, a, b, c, _, _ = chain()
    frames_before = len(b.received_frames)
    nodes = a.ask(Nodes(fresh=False))
    assert [(s.node.name, s.answered) for s in nodes.result.nodes] == [("a", True), ("b", False), ("c", False)]
    assert b.requests_seen() == [] and len(b.received_frames) == frames_before


# -- 3. no path ----------------------------------------------------------------------------------


def test_a_node_whose_links_are_gone_fails_at_once_and_every_node_gathers_the_others():
    mesh, a, b, c, _, to_c = chain()
    fill(a, 1)
    fill(b, 2)
    fill(c, 3)
    mesh.cut(to_c)  # b tells a it is no longer linked with c
    assert a.mesh.topology.route(c.id) is None and c.id in a.mesh.topology.entries
    now = mesh.clock.seconds()

    replies = a.execute(Queues(node="c"))
    assert len(replies) == 1  # at once: no pumping, no time passed
    reply = wire(replies[0])
    assert not reply.ok and reply.error.code == "unreachable" and reply.error.node == c.id
    assert "no path" in reply.error.message

    every = a.ask(Queues(node="*"))
    assert mesh.clock.seconds() == now  # nobody waited for a timeout
    assert every.ok and depths(every) == {a.id: 1, b.id: 2}
    (failure,) = every.failures
    assert (failure.code, failure.node) == ("unreachable", c.id)

    nodes = a.ask(Nodes())  # c as the gossip last showed it
    assert [(s.node.name, s.answered) for s in nodes.result.nodes] == [("a", True), ("b", True), ("c", False)]
    assert mesh.clock.seconds() == now and c.requests_seen() == []


def test_a_link_on_the_way_gone_fails_without_waiting_for_the_timeout():
    mesh, a, b, c, _, to_c = chain()
    now = mesh.clock.seconds()
    replies = a.execute(Queues(node=c.id))  # on its way to b, routed through b to c
    lose(mesh, to_c, b, c)  # before b could pass it on
    mesh.settle()
    assert mesh.clock.seconds() == now
    reply = wire(replies[0])
    assert not reply.ok and reply.error.code == "unreachable" and reply.error.node == c.id
    assert "not linked with the next node" in reply.error.message
    assert len(b.requests_seen()) == 1 and c.requests_seen() == []


# -- 4. a silent node ----------------------------------------------------------------------------


def test_a_node_that_never_answers_is_unreachable_after_the_timeout():
    mesh, a, b, c, _, _ = chain()
    fill(a, 1)
    fill(b, 2)
    c.mesh.router.handler = lambda body, origin: defer.Deferred()  # takes requests, never answers
    one = a.execute(Queues(node=c.id))
    every = a.execute(Queues(node="*"))
    nodes = a.execute(Nodes())
    mesh.settle()
    assert len(c.requests_seen()) == 3 and one == [] and every == [] and nodes == []
    mesh.clock.advance(REQUEST_TIMEOUT - 0.1)
    mesh.settle()
    assert one == [] and every == [] and nodes == []  # still waiting: a gathering waits for the slowest
    mesh.clock.advance(0.2)
    mesh.settle()
    reply = wire(one[0])
    assert not reply.ok and reply.error.code == "unreachable" and reply.error.node == c.id
    assert f"did not answer within {REQUEST_TIMEOUT:g} s" in reply.error.message
    gathered = wire(every[0])
    assert gathered.ok and depths(gathered) == {a.id: 1, b.id: 2}
    assert [(f.code, f.node) for f in gathered.failures] == [("unreachable", c.id)]
    view = wire(nodes[0])  # c as the gossip last showed it
    assert [(s.node.name, s.answered) for s in view.result.nodes] == [("a", True), ("b", True), ("c", False)]
    assert not a.mesh.router._pending


def test_an_answer_cut_off_on_its_way_back_ends_in_the_timeout():
    mesh, a, b, c, _, to_c = chain()
    fill(c, 1)
    held = hold_answers(c)
    replies = a.execute(Queues(node=c.id))
    mesh.settle()
    assert len(held) == 1 and replies == []  # the request reached c
    mesh.cut(to_c)
    d, answer = held[0]
    d.callback(answer())  # c answers: the link back is gone
    mesh.settle()
    assert replies == [] and b.frames(FrameType.REPLY) == []
    mesh.clock.advance(REQUEST_TIMEOUT + 0.1)
    mesh.settle()
    assert len(replies) == 1
    reply = wire(replies[0])
    assert not reply.ok and reply.error.code == "unreachable" and reply.error.node == c.id
    assert "did not answer" in reply.error.message


# -- 5. names and prefixes -----------------------------------------------------------------------


def test_nodes_are_named_by_id_name_or_unique_prefix():
    mesh, a, b, c, _, _ = chain(IDS)
    fill(c, 1)
    assert depths(a.ask(Queues(node="c"))) == {c.id: 1}
    assert depths(a.ask(Queues(node="abcd2"))) == {c.id: 1}
    assert depths(a.ask(Queues(node=c.id))) == {c.id: 1}
    assert depths(a.ask(Queues(node="0aaa"))) == {}  # a itself: no queues
    requests_at_c = len(c.requests_seen())
    assert requests_at_c == 3

    unknown = a.ask(Queues(node="nosuchnode"))
    assert not unknown.ok and unknown.error.code == "not_found" and "nosuchnode" in unknown.error.message
    ambiguous = a.ask(Queues(node="abcd"))
    assert not ambiguous.ok and ambiguous.error.code == "bad_request" and "names 2 nodes" in ambiguous.error.message
    too_short = a.ask(Queues(node="0aa"))  # prefixes count from 4 characters
    assert not too_short.ok and too_short.error.code == "not_found"
    bad_target = a.ask(Move(node="c", queue="orders", to_node="abcd"))
    assert not bad_target.ok and bad_target.error.code == "bad_request"
    assert len(c.requests_seen()) == requests_at_c and len(c.broker.queues["orders"]) == 1


def test_a_name_two_nodes_share_is_ambiguous():
    mesh = ManagementHarness()
    a, twin1, twin2 = mesh.node("a"), mesh.node("twin"), mesh.node("twin")
    mesh.link(a, twin1)
    mesh.link(a, twin2)
    reply = a.ask(Queues(node="twin"))
    assert not reply.ok and reply.error.code == "bad_request" and "names 2 nodes" in reply.error.message
    assert depths(a.ask(Queues(node=twin2.id))) == {}  # by id, it is found
    assert twin1.requests_seen() == [] and len(twin2.requests_seen()) == 1


# -- 6. admin actions on a remote node -----------------------------------------------------------


def test_purge_asked_at_one_node_is_done_and_audited_on_the_node_named():
    mesh, a, b, c, _, _ = chain()
    fill(c, 3)
    fill(a, 1)
    reply = a.ask(Purge(node="c", queue="orders"), user="alice")
    assert reply.ok
    (done,) = reply.result
    assert isinstance(done, Done) and (done.node, done.action, done.target, done.count) == \
        (c.id, "purge", "/queue/orders", 3)
    assert len(c.broker.queues["orders"]) == 0 and c.stored == []
    assert len(a.broker.queues["orders"]) == 1  # only c was asked
    (event,) = c.admin_events()
    assert (event.user, event.action, event.target, event.ok, event.node) == \
        ("alice", "purge", "/queue/orders", True, c.id)
    assert "3 message(s)" in event.result
    assert a.admin_events() == [] and b.admin_events() == []


def test_move_to_a_linked_node_hands_the_messages_over_with_custody():
    mesh, a, b, c, _, _ = chain()
    fill(b, 4)
    assert len(b.stored) == 4
    reply = a.ask(Move(node=b.id, queue="orders", to_node=c.id))
    assert reply.ok
    (done,) = reply.result
    assert (done.node, done.action, done.count) == (b.id, "move", 4) and "to node c" in done.detail
    assert sorted(m.body for m in c.broker.queues["orders"]) == [b"b-0", b"b-1", b"b-2", b"b-3"]
    assert len(c.stored) == 4
    assert len(b.broker.queues["orders"]) == 0 and b.broker.queues["orders"].inflight == 0
    assert b.stored == []  # gone from b's store once c said it had them
    assert b.broker.queues["orders"].mesh.forwarded_out == 4 and c.broker.queues["orders"].mesh.forwarded_in == 4
    (event,) = b.admin_events()
    assert event.action == "move" and event.ok and event.user == "tester"
    assert c.admin_events() == [] and a.admin_events() == []


def test_move_to_a_node_not_linked_with_the_source_is_a_conflict():
    mesh, a, b, c, _, _ = chain()
    fill(c, 2)
    reply = a.ask(Move(node="c", queue="orders", to_node="a"))  # c has no link with a
    assert not reply.ok and reply.error.code == "conflict" and reply.error.node == c.id
    assert "not linked" in reply.error.message
    assert len(c.broker.queues["orders"]) == 2 and len(c.stored) == 2 and "orders" not in a.broker.queues
    (event,) = c.admin_events()
    assert event.action == "move" and not event.ok


def test_browse_pages_through_a_remote_queue_with_headers_and_a_body_preview():
    mesh, a, b, c, _, _ = chain()
    for i in range(5):
        c.broker.send("queue", "orders", {"n": str(i), "type": "order"}, b"body-number-%d" % i, True)
    mesh.clock.advance(2)
    reply = a.ask(Browse(node="c", queue="orders", offset=1, limit=2, preview=6))
    assert reply.ok
    (page,) = reply.result
    assert isinstance(page, BrowsePage)
    assert (page.node, page.queue, page.total, page.offset) == (c.id, "orders", 5, 1)
    assert [m.headers["n"] for m in page.messages] == ["1", "2"]
    first = page.messages[0]
    assert first.headers["type"] == "order" and first.destination == "/queue/orders"
    assert (first.body, first.truncated, first.size) == ("body-n", True, len(b"body-number-1"))
    assert first.persistent and first.age_ms == 2000
    last = a.ask(Browse(node="c", queue="orders", offset=4, limit=2, preview=100)).result[0]
    assert [(m.body, m.truncated) for m in last.messages] == [("body-number-4", False)]
    beyond = a.ask(Browse(node="c", queue="orders", offset=5)).result[0]
    assert beyond.messages == [] and beyond.total == 5
    assert len(c.broker.queues["orders"]) == 5  # browsing takes nothing
    # Reading message bodies is audited too, on the node read from.
    assert [e.action for e in c.admin_events()] == ["browse"] * 3 and c.admin_events()[0].user == "tester"
    missing = a.ask(Browse(node="c", queue="nosuchqueue"))
    assert not missing.ok and missing.error.code == "not_found"
    too_many = a.ask(Browse(node="c", queue="orders", limit=0))
    assert not too_many.ok and too_many.error.code == "bad_request"


def test_delete_queue_is_refused_while_the_queue_has_a_local_consumer():
    mesh, a, b, c, _, _ = chain()
    session, sink = c.consumer("orders", ack="client-individual")
    session.subscriptions["s"].prefetch = 1
    fill(c, 3)
    mesh.settle()
    assert len(sink.messages) == 1
    refused = a.ask(DeleteQueue(node="c", queue="orders"))
    assert not refused.ok and refused.error.code == "conflict" and "consumer" in refused.error.message
    assert "orders" in c.broker.queues and len(c.broker.queues["orders"]) == 2
    session.unsubscribe("s")  # the unacked one comes back
    deleted = a.ask(DeleteQueue(node="c", queue="orders"))
    assert deleted.ok and deleted.result[0].count == 3
    assert "orders" not in c.broker.queues and c.stored == []
    assert [(e.action, e.ok) for e in c.admin_events()] == [("delete_queue", False), ("delete_queue", True)]


def test_send_puts_a_test_message_on_a_remote_node():
    mesh, a, b, c, _, _ = chain()
    reply = a.ask(Send(node="c", destination="/queue/orders", body="hello", headers={"h": "1"}, persistent=True))
    assert reply.ok
    (done,) = reply.result
    assert (done.node, done.count) == (c.id, 1) and done.detail.startswith("c-")
    (message,) = list(c.broker.queues["orders"])
    assert message.body == b"hello" and message.headers["h"] == "1" and message.persistent
    assert message.id == done.detail and c.stored == [message.id]
    assert "orders" not in a.broker.queues and "orders" not in b.broker.queues
    invalid = a.ask(Send(node="c", destination="orders"))
    assert not invalid.ok and invalid.error.code == "bad_request"


# -- 7. permissions ------------------------------------------------------------------------------


def test_without_admin_every_admin_action_is_forbidden_and_audited_on_the_asked_node():
    mesh, a, b, c, _, _ = chain()
    fill(c, 2)
    requests = [
        Browse(node="c", queue="orders"),
        Purge(node="c", queue="orders"),
        DeleteQueue(node="c", queue="orders"),
        Move(node="c", queue="orders", to_node=b.id),
        Redistribute(node="c", queue="orders"),
        Send(node="c", destination="/queue/orders", body="x"),
        CloseConnection(node="c", connection="some-connection"),
        Forget(node="c", forget=a.id),
        ScaleDownNode(node="c"),
        DefineQueue(queue="orders", settings=QueueSettings(max_delivery_attempts=2)),
        DeleteDefinition(kind="queue", name="orders"),
        HaFailback(node="c"),
        ReloadTls(node="c"),
        VhostAdd(name="team-x"),
        VhostDelete(name="team-x", force=True),
        VhostSetLimits(name="team-x", max_connections=5),
        VhostPermissionsSet(permission=PermissionSpec(vhost="/", user="mallory", configure=".*", write=".*",
                                                      read=".*")),
        VhostPermissionsClear(vhost="/", user="bob"),
        JourneySteps(node="c", ids=["m-1"]),
        TraceNext(node="c", destination="/queue/orders"),
        DefineTrace(destination="/queue/orders", for_s=60),
        JourneySearch(body="card"),
        ApplyRemedy(finding="unacked_old/0123abcd///some-connection", confirm=True),
    ]
    assert {r.__struct_config__.tag for r in requests} == ADMIN_ACTIONS
    before = snapshot(b, c)
    for request in requests:
        action = request.__struct_config__.tag
        reply = a.ask(request, user="mallory", admin=False)
        assert not reply.ok and reply.error.code == "forbidden", action
        assert reply.action == action and "admin" in reply.error.message
    assert snapshot(b, c) == before  # nothing reached b or c
    assert c.scale_down_requested == 0
    assert all(node.broker.definitions.records() == [] for node in (a, b, c))
    events = a.admin_events()
    assert [e.action for e in events] == [r.__struct_config__.tag for r in requests]
    assert all(e.user == "mallory" and not e.ok and e.node == a.id and e.result.startswith("refused")
               for e in events)
    assert events[1].target == "/queue/orders" and events[4].target == "/queue/orders"
    # Views need no admin permission.
    view = a.ask(Queues(node="c"), user="mallory", admin=False)
    assert view.ok and depths(view) == {c.id: 2}
    assert a.ask(Nodes(), admin=False).ok and a.ask(Events(node="*"), admin=False).ok


# -- 8. malformed requests -----------------------------------------------------------------------


def test_malformed_requests_are_bad_requests_naming_the_problem_and_change_nothing():
    mesh, a, b, c, _, _ = chain()
    fill(a, 1)
    fill(c, 2)
    before = snapshot(a, b, c)
    cases = {
        b"purge the orders queue": "not JSON",
        b'{"node": "c", "queue": "orders"}': "action",  # no action at all
        b'{"action": "explode", "node": "c"}': "explode",
        b'{"action": "purge", "node": "c"}': "queue",
        b'{"action": "purge", "node": "c", "queue": 5}': "queue",
        b'{"action": "browse", "node": "c", "queue": "orders", "limit": "ten"}': "limit",
        b"[1, 2]": "invalid request",
    }
    for body, named in cases.items():
        reply = a.ask(body)
        assert not reply.ok and reply.error.code == "bad_request", body
        assert named in reply.error.message, (body, reply.error.message)
        assert reply.result is None
    assert snapshot(a, b, c) == before


def test_a_routed_request_of_an_action_the_node_does_not_know_is_a_bad_request_from_that_node():
    # As a newer node would route an action this one does not know yet.
    mesh, a, b, c, _, _ = chain()
    answers = []
    a.mesh.router.request(c.id, {"request": {"action": "explode", "node": c.id}, "user": "x"}).addBoth(answers.append)
    mesh.settle()
    (answer,) = answers
    assert answer["error"]["code"] == "bad_request" and answer["error"]["node"] == c.id
    assert "explode" in answer["error"]["message"]


# -- 9. events ----------------------------------------------------------------------------------


def test_events_of_every_node_come_together_sorted_by_time():
    mesh = ManagementHarness()
    a, b, c = (mesh.node(name, node_id=IDS[name]) for name in "abc")
    start = mesh.clock.seconds()
    mesh.link(b, c)  # b's and c's link_up first
    mesh.clock.advance(10)
    mesh.link(a, b)  # a's later: gathered first (a's id sorts first), sorted after
    mesh.clock.advance(10)
    mesh.gossip(b)
    reply = a.ask(Events(node="*"))
    assert reply.ok and reply.failures == []
    events = reply.result
    times = [e.time for e in events]
    assert times == sorted(times) and times[0] == start
    assert {e.node for e in events} == {a.id, b.id, c.id}
    link_ups = [(e.node, e.peer, e.time - start) for e in events if isinstance(e, LinkUp)]
    assert len(link_ups) == 4
    assert set(link_ups[:2]) == {(b.id, c.id, 0), (c.id, b.id, 0)}
    assert set(link_ups[2:]) == {(a.id, b.id, 10), (b.id, a.id, 10)}
    joined = {(e.node, e.subject) for e in events if isinstance(e, NodeJoined)}
    assert (a.id, c.id) in joined and (c.id, a.id) in joined  # heard of through b's gossip

    only = a.ask(Events(node="*", kinds=["link_up"], since=start + 5))
    assert sorted((e.node, e.peer) for e in only.result) == sorted([(a.id, b.id), (b.id, a.id)])
    assert all(isinstance(e, LinkUp) for e in only.result)


def test_admin_events_of_a_remote_node_travel_to_the_asker():
    mesh, a, b, c, _, _ = chain()
    fill(c, 1)
    mesh.clock.advance(1)
    a.ask(Purge(node="c", queue="orders"), user="alice")
    reply = a.ask(Events(node="c", kinds=["admin_action"]))
    (event,) = reply.result
    assert isinstance(event, AdminAction) and (event.node, event.user, event.action) == (c.id, "alice", "purge")
    assert msgspec.to_builtins(event)["kind"] == "admin_action"


def test_a_queue_defined_through_any_node_is_defined_on_every_node_and_deleted_likewise():
    mesh, a, b, c, _, _ = chain()
    reply = wire(a.ask(DefineQueue(queue="orders", settings=QueueSettings(max_delivery_attempts=2,
                                                                         dead_letter_queue="orders.dlq"))))
    assert reply.ok and reply.result.node == a.id and reply.result.target == "/queue/orders"
    mesh.settle()
    for node in (a, b, c):
        assert node.broker.queue_settings["orders"].dead_letter_queue == "orders.dlq"
    listed = wire(c.ask(Definitions())).result
    assert [(d.kind, d.name, d.origin, d.queue.max_delivery_attempts) for d in listed] == [
        ("queue", "orders", a.id, 2)]
    fill(c, 3)
    reply = wire(b.ask(DeleteDefinition(kind="queue", name="orders")))
    assert reply.ok
    mesh.settle()
    for node in (a, b, c):
        assert "orders" not in node.broker.queue_settings and "orders" not in node.broker.queues
    assert not c.stored  # the queue went with what waited in it
    assert [e.action for e in b.admin_events() if e.ok] == ["delete_definition"]


def test_bad_definitions_are_refused_with_a_reason_and_change_nothing():
    mesh, a, b, c, _, _ = chain()
    for body, words in [
        (b'{"action": "define_queue", "queue": "orders", "settings": {"max_delivery_attempts": 0}}', ">= 1"),
        (b'{"action": "define_queue", "queue": "orders", "settings": {"colour": "red"}}', "colour"),
        (b'{"action": "define_queue", "queue": "news.*", "settings": {}}', "no wildcards"),
        (b'{"action": "define_queue", "queue": "meshgate.management", "settings": {}}', "service address"),
        (b'{"action": "delete_definition", "kind": "queue", "name": "never"}', "no queue definition"),
        (b'{"action": "delete_definition", "kind": "topic", "name": "x"}', "kind"),
    ]:
        reply = a.ask(body)
        assert not reply.ok and reply.error.code in ("bad_request", "not_found") and words in reply.error.message
    mesh.settle()
    assert all(node.broker.definitions.records() == [] for node in (a, b, c))
