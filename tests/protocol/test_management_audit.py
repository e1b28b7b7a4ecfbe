"""What an admin action's audit says of where it came from, on linked nodes: the
doctor's mark (``remedy_of``) only from apply_remedy, which keeps it on a remedy routed
to another node, never from a client's request; who asked, as the event and a trace
definition's ``by`` name them."""

from __future__ import annotations

from gateway.auth import ANONYMOUS
from model.definitions import TRACE
from model.requests import ApplyRemedy, DefineTrace, Diagnosis, Purge
from tests.protocol.test_management_routing import chain, fill, snapshot


def test_a_clients_request_marked_as_a_remedy_is_refused_and_changes_nothing():
    mesh, a, b, c, _, _ = chain()
    fill(c, 2)
    before = snapshot(a, b, c)
    reply = a.ask(Purge(node="c", queue="orders", remedy_of="dlq_growing/abcd2222///orders"))
    assert not reply.ok and (reply.action, reply.error.code) == ("purge", "bad_request"), reply
    assert "remedy_of is set by apply_remedy only" in reply.error.message
    assert snapshot(a, b, c) == before  # no purge, no admin_action claiming the doctor did one


def test_apply_remedy_marks_the_remedy_it_routes_to_the_finding_node():
    mesh, a, b, c, _, _ = chain()
    fill(c, 2, queue=c.broker.dead_letter_queue)  # a dead-letter queue that grew: its remedy browses it, on c
    (finding,) = [f for f in a.ask(Diagnosis(older_than_s=0)).result.findings if f.kind == "dlq_growing"]
    assert finding.node == c.id

    reply = a.ask(ApplyRemedy(finding=finding.id, on_behalf_of="carol"))
    assert reply.ok and reply.action == "browse" and reply.result[0].total == 2, reply
    (event,) = c.admin_events()
    assert (event.action, event.user, event.target) == ("browse", "tester for carol", "/queue/DLQ")
    assert event.result == f"doctor {finding.id}: looked at 2 of 2 message(s) from 0"
    assert a.admin_events() == [] and b.admin_events() == []


def test_who_asked_is_the_console_user_alone_where_every_client_is_anonymous():
    """A node without users knows the console's connection as "anonymous" (handle names a
    request's user after its session's principal): "anonymous for admin" told nothing the
    console's signed-in user does not. With users, the login is named too."""
    mesh, a, b, c, _, _ = chain()
    asked = [(ANONYMOUS.name, "admin", "admin"), ("console", "admin", "console for admin"),
             (ANONYMOUS.name, None, "anonymous")]
    for n, (user, on_behalf_of, named) in enumerate(asked):
        destination = f"/queue/traced-{n}"
        assert a.ask(DefineTrace(destination=destination, for_s=60, on_behalf_of=on_behalf_of), user=user).ok
        (record,) = [r for r in c.broker.definitions.records() if (r.kind, r.name) == (TRACE, destination)]
        assert record.trace is not None and record.trace.by == named, (user, on_behalf_of, record.trace)
    assert [event.user for event in a.admin_events()] == [named for _, _, named in asked]
