"""How the meshgate commands print management answers."""

from __future__ import annotations

from management.format import format_cluster_stat, format_connections, format_nodes, table
from model.mesh import ChannelSummary, ClusterView, Connection, Node, NodeSummary, PartialQueue, QueueSummary


def node(node_id: str, name: str, state: str = "up") -> Node:
    return Node(id=node_id, name=name, version="0", started_at=1.0, last_seen=100.0, state=state)


def test_nodes_show_messages_in_doubt_only_where_there_are_some_and_down_nodes_as_down():
    view = ClusterView(reporter="id-a", taken_at=100.0, nodes=[
        NodeSummary(node=node("id-a", "A"), links=["id-b"], queues=[QueueSummary("orders", 2, 0, 1, 3)],
                    answered=True),
        NodeSummary(node=node("id-b", "B"), links=["id-a"], queues=[QueueSummary("orders", 4, 1, 0, 0)], age=3.0),
        NodeSummary(node=node("id-c", "C", "down")),
    ])
    text = format_nodes(view)
    assert text.splitlines()[0] == "3 node(s), 2 up, as seen from A"
    assert "/queue/orders: 2 queued, 1 in flight, 3 in doubt, 0 consumer(s)" in text
    assert "/queue/orders: 4 queued, 0 in flight, 1 consumer(s)" in text
    assert "B (id-b) up; stomp ?; links: A; last heard 3 s ago" in text
    assert "C (id-c) down" in text


def test_nodes_show_a_queue_of_each_vhost_on_its_own_line_naming_a_vhost_other_than_the_default():
    view = ClusterView(reporter="id-a", taken_at=100.0, nodes=[
        NodeSummary(node=node("id-a", "A"), answered=True, queues=[
            QueueSummary("orders", 5, 0, 0, 0, "team-a"), QueueSummary("orders", 2, 1, 0, 0)])])
    assert format_nodes(view).splitlines()[2:] == [
        "    /queue/orders: 2 queued, 0 in flight, 1 consumer(s)",
        "    /queue/orders (vhost 'team-a'): 5 queued, 0 in flight, 0 consumer(s)"]


def test_nodes_show_the_shared_store_epoch_and_standby_only_for_nodes_with_ha():
    from model.mesh import Standby

    paired = Node(id="id-a", name="A", version="0", started_at=1.0, last_seen=100.0, ha_mode="shared-store", epoch=3,
                  standbys=[Standby(host="h2", pid=42, since=50.0)])
    alone = Node(id="id-b", name="B", version="0", started_at=1.0, last_seen=100.0, ha_mode="shared-store", epoch=1)
    text = format_nodes(ClusterView(reporter="id-a", taken_at=100.0, nodes=[
        NodeSummary(node=paired, answered=True), NodeSummary(node=alone, answered=True),
        NodeSummary(node=node("id-c", "C"), answered=True)]))
    lines = text.splitlines()
    assert lines[1].endswith("answered now; shared-store epoch 3, standby pid 42 on h2")
    assert lines[2].endswith("answered now; shared-store epoch 1, no standby")
    assert lines[3].endswith("answered now")


def test_cluster_stat_sums_the_partial_queues_and_lists_each_node():
    queues = [PartialQueue(node="id-a", name="orders", depth=2, in_flight=1, forwarding=1, in_doubt=3, consumers=0),
              PartialQueue(node="id-b", name="orders", depth=4, in_flight=0, consumers=2)]
    lines = format_cluster_stat(queues, {"id-a": "A", "id-b": "B"}).splitlines()
    assert lines[1].split() == ["/queue/orders", "11", "2"]
    assert lines[2].split() == ["A", "7", "0"] and lines[3].split() == ["B", "4", "2"]


def test_tables_align_numbers_right():
    assert table(["name", "n"], [["a", 1], ["bb", 100]]).splitlines() == ["name    n", "a       1", "bb    100"]


def test_connections_show_an_amqp_connections_channels_and_none_for_stomp():
    amqp = Connection(id="a-amqp-1", node="id-a", remote="h:1", user="guest", protocol="amqp", version="0-9-1",
                      since=0.0, subscriptions=2, unacked=5, channels=3,
                      channel_details=[ChannelSummary(number=n) for n in (1, 2, 3)])
    stomp = Connection(id="a-2", node="id-a", remote="h:2", user="guest", protocol="stomp", version="1.2", since=0.0)
    lines = format_connections([amqp, stomp], {"id-a": "A"}).splitlines()
    assert lines[0].split()[-3:] == ["channels", "subscriptions", "unacked"]
    assert lines[1].split()[-3:] == ["3", "2", "5"] and lines[2].split()[-3:] == ["-", "0", "0"]
