"""gateway.permissions: RabbitMQ's per-vhost configure/write/read patterns, and how
they combine with the ActiveMQ-style authorization map."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from gateway.auth import Authorizer, Principal
from gateway.permissions import (
    AccessControl,
    Need,
    VhostPermission,
    VhostPermissions,
    amqp_needs,
    destination_needs,
    stomp_resource,
)

ALICE = Principal("alice", frozenset({"team-a"}))
BOB = Principal("bob", frozenset({"team-b"}))
CAROL = Principal("carol", frozenset({"team-a", "auditors"}))


@dataclass(frozen=True)
class Entry:
    vhost: str
    configure: str
    write: str
    read: str
    user: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class AclEntry:
    destination: str
    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()
    admin: frozenset[str] = frozenset()


def permissions(*entries: Entry, cache_size: int = 4096) -> VhostPermissions:
    return VhostPermissions(entries, enabled=True, cache_size=cache_size)


def args(**names: str) -> SimpleNamespace:
    """A decoded AMQP method's arguments, as gateway.amqp hands them over."""
    return SimpleNamespace(**names)


# --- RabbitMQ's rules ------------------------------------------------------


def test_a_pattern_is_searched_for_not_anchored() -> None:
    """RabbitMQ runs re:run(Name, Regex) unanchored: "orders" is found inside a name."""
    perms = permissions(Entry("/", configure="orders", write="^orders$", read="^orders", user="alice"))
    assert perms.allowed(ALICE, "/", "configure", "my-orders-eu")
    assert not perms.allowed(ALICE, "/", "write", "orders-eu")
    assert perms.allowed(ALICE, "/", "write", "orders")
    assert perms.allowed(ALICE, "/", "read", "orders-eu")
    assert not perms.allowed(ALICE, "/", "read", "my-orders")


@pytest.mark.parametrize("nothing", ["", "^$"])
def test_the_empty_pattern_grants_nothing_like_caret_dollar(nothing: str) -> None:
    perms = permissions(Entry("/", configure=nothing, write=nothing, read=nothing, user="alice"))
    for operation in ("configure", "write", "read"):
        for resource in ("orders", "amq.default", "amq.gen-x", "a"):
            assert not perms.allowed(ALICE, "/", operation, resource)


def test_dot_star_grants_everything() -> None:
    perms = permissions(Entry("/", configure=".*", write=".*", read=".*", user="alice"))
    assert all(perms.allowed(ALICE, "/", op, "anything at all") for op in ("configure", "write", "read"))


def test_each_operation_has_its_own_pattern() -> None:
    perms = permissions(Entry("/", configure="^$", write="^amq\\.default$", read="^orders$", user="alice"))
    assert not perms.allowed(ALICE, "/", "configure", "orders")
    assert perms.allowed(ALICE, "/", "write", "amq.default")
    assert not perms.allowed(ALICE, "/", "write", "orders")
    assert perms.allowed(ALICE, "/", "read", "orders")


def test_the_default_exchange_is_checked_as_amq_default() -> None:
    assert Need("write", "exchange", "").name == "amq.default"
    assert amqp_needs("basic.publish", args(exchange="")) == (Need("write", "exchange", "amq.default"),)
    publish_only = permissions(Entry("/", configure="^$", write="^amq\\.default$", read="^$", user="alice"))
    assert publish_only.grants(ALICE, "/", amqp_needs("basic.publish", args(exchange="")))
    assert not publish_only.grants(ALICE, "/", amqp_needs("basic.publish", args(exchange="amq.topic")))


def test_amqp_methods_need_what_rabbitmq_access_control_table_says() -> None:
    q, x = args(queue="jobs", exchange="events"), args(exchange="events")
    assert amqp_needs("queue.declare", q) == (Need("configure", "queue", "jobs"),)
    assert amqp_needs("queue.delete", q) == (Need("configure", "queue", "jobs"),)
    assert amqp_needs("exchange.declare", x) == (Need("configure", "exchange", "events"),)
    assert amqp_needs("exchange.delete", x) == (Need("configure", "exchange", "events"),)
    assert amqp_needs("queue.bind", q) == (Need("write", "queue", "jobs"), Need("read", "exchange", "events"))
    assert amqp_needs("queue.unbind", q) == amqp_needs("queue.bind", q)
    e2e = args(source="events", destination="audit")
    assert amqp_needs("exchange.bind", e2e) == (Need("write", "exchange", "audit"), Need("read", "exchange", "events"))
    assert amqp_needs("exchange.unbind", e2e) == amqp_needs("exchange.bind", e2e)
    assert amqp_needs("basic.publish", x) == (Need("write", "exchange", "events"),)
    for method in ("basic.consume", "basic.get", "queue.purge"):
        assert amqp_needs(method, q) == (Need("read", "queue", "jobs"),)
    assert amqp_needs("queue.declare", q, dead_letter_exchange="dlx") == (
        Need("configure", "queue", "jobs"), Need("write", "exchange", "dlx"), Need("read", "queue", "jobs"))


def test_a_consumer_without_configure_may_consume_but_not_declare() -> None:
    """The usual RabbitMQ 'application user': may not create or delete anything."""
    perms = permissions(Entry("/", configure="^$", write=".*", read=".*", user="alice"))
    q = args(queue="jobs", exchange="events")
    assert perms.grants(ALICE, "/", amqp_needs("basic.consume", q))
    assert perms.grants(ALICE, "/", amqp_needs("basic.publish", q))
    assert not perms.grants(ALICE, "/", amqp_needs("queue.declare", q))
    assert not perms.grants(ALICE, "/", amqp_needs("exchange.delete", q))


def test_queue_bind_needs_both_write_on_the_queue_and_read_on_the_exchange() -> None:
    q = args(queue="jobs", exchange="events")
    only_queue = permissions(Entry("/", configure="", write="^jobs$", read="^jobs$", user="alice"))
    only_exchange = permissions(Entry("/", configure="", write="^events$", read="^events$", user="alice"))
    both = permissions(Entry("/", configure="", write="^jobs$", read="^events$", user="alice"))
    assert not only_queue.grants(ALICE, "/", amqp_needs("queue.bind", q))
    assert not only_exchange.grants(ALICE, "/", amqp_needs("queue.bind", q))
    assert both.grants(ALICE, "/", amqp_needs("queue.bind", q))


# --- who an entry is about, and which vhost --------------------------------


def test_no_entry_for_a_vhost_means_no_connection_to_it() -> None:
    perms = permissions(Entry("team-a", configure=".*", write=".*", read=".*", user="alice"))
    assert perms.may_open(ALICE, "team-a")
    assert not perms.may_open(ALICE, "/")  # "/" too needs an entry once there are entries
    assert not perms.may_open(BOB, "team-a")
    assert not perms.allowed(BOB, "team-a", "read", "orders")


def test_an_entry_granting_nothing_still_opens_the_vhost() -> None:
    """RabbitMQ's check_vhost_access only asks whether an entry exists."""
    perms = permissions(Entry("team-a", configure="", write="", read="", user="alice"))
    assert perms.may_open(ALICE, "team-a")
    assert not perms.allowed(ALICE, "team-a", "read", "orders")


def test_an_entry_grants_in_its_own_vhost_only() -> None:
    perms = permissions(Entry("team-a", configure=".*", write=".*", read=".*", user="alice"),
                        Entry("team-b", configure="", write="", read="^public$", user="alice"))
    assert perms.allowed(ALICE, "team-a", "read", "orders")
    assert not perms.allowed(ALICE, "team-b", "read", "orders")
    assert perms.allowed(ALICE, "team-b", "read", "public")


def test_a_group_entry_applies_to_its_members_only() -> None:
    perms = permissions(Entry("team-a", configure="", write="", read=".*", group="team-a"))
    assert perms.may_open(ALICE, "team-a") and perms.may_open(CAROL, "team-a")
    assert not perms.may_open(BOB, "team-a")
    assert perms.allowed(CAROL, "team-a", "read", "orders")
    assert not perms.allowed(BOB, "team-a", "read", "orders")


def test_a_user_entry_names_the_user_not_a_group_of_that_name() -> None:
    perms = permissions(Entry("/", configure="", write="", read=".*", user="team-a"))
    assert not perms.may_open(ALICE, "/")  # alice is in group team-a, but is not user team-a
    assert perms.may_open(Principal("team-a"), "/")


def test_a_principal_gets_the_union_of_its_user_and_group_entries() -> None:
    perms = permissions(Entry("/", configure="", write="", read="^reports$", group="auditors"),
                        Entry("/", configure="", write="^orders$", read="", user="carol"),
                        Entry("/", configure="^carol\\.", write="", read="", group="team-a"))
    assert perms.allowed(CAROL, "/", "read", "reports")
    assert perms.allowed(CAROL, "/", "write", "orders")
    assert perms.allowed(CAROL, "/", "configure", "carol.tmp")
    assert not perms.allowed(CAROL, "/", "write", "reports")
    assert not perms.allowed(ALICE, "/", "read", "reports")


def test_without_entries_everyone_opens_every_vhost_and_may_do_everything() -> None:
    for perms in (VhostPermissions((), enabled=True),
                  VhostPermissions([Entry("x", configure="", write="", read="", user="alice")], enabled=False)):
        assert not perms.enabled
        assert perms.may_open(BOB, "/") and perms.may_open(BOB, "team-a")
        assert perms.allowed(BOB, "team-a", "configure", "anything")


# --- loading and hostile input ---------------------------------------------


def test_an_invalid_pattern_is_refused_when_loaded() -> None:
    with pytest.raises(ValueError, match="^write: not a valid regular expression"):
        permissions(Entry("/", configure=".*", write="orders(", read=".*", user="alice"))


def test_an_entry_names_a_user_or_a_group() -> None:
    with pytest.raises(ValueError, match="either a user or a group"):
        VhostPermission(None, None, "/", "", "", "")
    with pytest.raises(ValueError, match="either a user or a group"):
        VhostPermission("alice", "ops", "/", "", "", "")


def test_an_unknown_operation_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        permissions(Entry("/", configure="", write="", read="", user="alice")).allowed(ALICE, "/", "admin", "q")


def test_the_cache_stays_bounded_and_answers_stay_right() -> None:
    perms = permissions(Entry("/", configure="", write="", read="^even-", user="alice"), cache_size=3)
    for round_ in range(2):
        for number in range(50):
            name = f"{'even' if number % 2 == 0 else 'odd'}-{number}"
            assert perms.allowed(ALICE, "/", "read", name) == (number % 2 == 0), (round_, name)
            assert len(perms._cache) <= 3


def test_a_long_client_chosen_name_is_just_a_name() -> None:
    perms = permissions(Entry("/", configure="", write="", read="^orders\\.", user="alice"))
    assert not perms.allowed(ALICE, "/", "read", "x" * 255)
    assert perms.allowed(ALICE, "/", "read", "orders." + "é" * 120)


# --- STOMP destinations ----------------------------------------------------


def test_stomp_destinations_map_as_in_rabbitmqs_stomp_plugin() -> None:
    assert stomp_resource("/queue/orders.eu") == ("queue", "orders.eu")
    assert stomp_resource("/topic/prices.eu") == ("exchange", "amq.topic")
    assert stomp_resource("/exchange/events") == ("exchange", "events")
    assert stomp_resource("/temp-queue/replies") == ("queue", "amq.gen-replies")
    assert stomp_resource("/remote-temp-queue/s1.2.replies") == ("queue", "amq.gen-s1.2.replies")
    for bad in ("orders", "/queue/", "/amq/queue/x", "/queue", "//x"):
        with pytest.raises(ValueError):
            stomp_resource(bad)


def test_stomp_frames_need_what_the_rabbitmq_stomp_plugin_asks() -> None:
    assert destination_needs("write", "/queue/jobs") == (Need("configure", "queue", "jobs"),
                                                         Need("write", "exchange", "amq.default"))
    assert destination_needs("read", "/queue/jobs") == (Need("configure", "queue", "jobs"),
                                                        Need("read", "queue", "jobs"))
    assert destination_needs("admin", "/queue/jobs") == (Need("configure", "queue", "jobs"),)
    assert destination_needs("write", "/topic/a.b") == (Need("write", "exchange", "amq.topic"),)
    assert destination_needs("read", "/topic/a.b") == (Need("read", "exchange", "amq.topic"),)
    assert destination_needs("admin", "/topic/a.b") == (Need("read", "exchange", "amq.topic"),)
    assert destination_needs("write", "/temp-queue/r") == (Need("write", "exchange", "amq.default"),)
    assert destination_needs("read", "/temp-queue/r") == (Need("configure", "queue", "amq.gen-r"),
                                                          Need("read", "queue", "amq.gen-r"))
    assert destination_needs("admin", "/exchange/events") == (Need("configure", "exchange", "events"),)
    assert destination_needs("write", "/exchange/events") == (Need("write", "exchange", "events"),)
    with pytest.raises(ValueError, match="unknown action"):
        destination_needs("configure", "/queue/jobs")


def test_the_usual_rabbitmq_grant_for_server_named_queues_covers_temporary_queues() -> None:
    perms = permissions(Entry("/", configure="^amq\\.gen-", write="^amq\\.default$", read="^amq\\.gen-", user="alice"))
    control = AccessControl(Authorizer((), enabled=False), perms)
    assert control.allowed(ALICE, "/", "read", "/temp-queue/replies")
    assert control.allowed(ALICE, "/", "write", "/temp-queue/s9.1.replies")
    assert not control.allowed(ALICE, "/", "read", "/queue/replies")


# --- both maps together ----------------------------------------------------


def acl(*entries: AclEntry) -> Authorizer:
    return Authorizer(entries, enabled=True)


EVERYTHING_IN_A = Entry("team-a", configure=".*", write=".*", read=".*", group="team-a")


def test_the_vhost_map_cannot_widen_the_destination_map() -> None:
    authorizer = acl(AclEntry("/queue/orders.>", read=frozenset({"team-a"})))
    control = AccessControl(authorizer, permissions(EVERYTHING_IN_A))
    assert control.allowed(ALICE, "team-a", "read", "/queue/orders.eu")
    assert not control.allowed(ALICE, "team-a", "write", "/queue/orders.eu")  # the ACL says read only
    assert not control.allowed(ALICE, "team-a", "read", "/queue/payroll")  # no ACL entry: nobody


def test_the_destination_map_cannot_widen_the_vhost_map() -> None:
    authorizer = acl(AclEntry(">", read=frozenset({"team-a", "team-b"}), write=frozenset({"team-a", "team-b"})))
    control = AccessControl(authorizer, permissions(
        Entry("team-a", configure="^orders", write="^amq\\.default$", read="^orders", group="team-a")))
    assert control.allowed(ALICE, "team-a", "write", "/queue/orders.eu")
    assert not control.allowed(ALICE, "team-a", "write", "/queue/payroll")  # no configure on payroll
    assert not control.allowed(ALICE, "team-b", "read", "/queue/orders.eu")  # no entry in team-b
    assert not control.allowed(BOB, "team-a", "read", "/queue/orders.eu")  # bob has no entry in team-a
    assert not control.may_open(BOB, "team-a")


def test_explicit_needs_replace_the_destination_mapping_but_not_the_destination_map() -> None:
    authorizer = acl(AclEntry("/queue/jobs", read=frozenset({"team-a"})))
    consumer = Entry("team-a", configure="", write="", read="^jobs$", group="team-a")
    control = AccessControl(authorizer, permissions(consumer))
    consume = amqp_needs("basic.consume", args(queue="jobs"))
    assert control.allowed(ALICE, "team-a", "read", "/queue/jobs", consume)  # AMQP consume: read only
    assert not control.allowed(ALICE, "team-a", "read", "/queue/jobs")  # STOMP SUBSCRIBE declares: configure
    assert not control.allowed(ALICE, "team-a", "write", "/queue/jobs", consume)  # the ACL still says no


def test_with_one_map_configured_that_map_alone_decides() -> None:
    only_acl = AccessControl(acl(AclEntry("/queue/a", read=frozenset({"team-a"}))), VhostPermissions((), enabled=True))
    assert only_acl.enabled
    assert only_acl.may_open(BOB, "anything")
    assert only_acl.allowed(ALICE, "x", "read", "/queue/a")
    assert not only_acl.allowed(BOB, "x", "read", "/queue/a")
    only_vhosts = AccessControl(Authorizer((), enabled=True), permissions(EVERYTHING_IN_A))
    assert only_vhosts.enabled
    assert only_vhosts.allowed(ALICE, "team-a", "admin", "/queue/anything")
    assert not only_vhosts.allowed(BOB, "team-a", "read", "/queue/anything")


def test_with_neither_map_configured_the_node_allows_everything_as_before() -> None:
    control = AccessControl(Authorizer((), enabled=False), VhostPermissions((), enabled=False))
    assert not control.enabled
    assert control.may_open(BOB, "/")
    assert control.allowed(BOB, "/", "admin", "/queue/anything")
