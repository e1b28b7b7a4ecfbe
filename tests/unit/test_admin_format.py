"""How `meshgate topology` and `meshgate stat --cluster` print what nodes answer."""

from __future__ import annotations

from management.client import format_cluster_stat, format_topology

ANSWER = {
    "self": "id-a",
    "nodes": {
        "id-a": {"name": "A", "links": ["id-b"], "stomp": ["127.0.0.1", 1], "queues": {"orders": [2, 0, 1, 3]}},
        # A node from before in-doubt counts: three numbers per queue.
        "id-b": {"name": "B", "links": ["id-a"], "stomp": ["127.0.0.1", 2], "queues": {"orders": [4, 1, 0]}},
    },
}


def test_topology_shows_messages_in_doubt_only_where_there_are_some():
    text = format_topology(ANSWER)
    assert "/queue/orders: 2 queued, 1 in flight, 3 in doubt, 0 consumer(s)" in text
    assert "/queue/orders: 4 queued, 0 in flight, 1 consumer(s)" in text


def test_cluster_stat_counts_messages_in_doubt_as_held():
    lines = format_cluster_stat(ANSWER).splitlines()
    total = next(line for line in lines if line.startswith("/queue/orders"))
    assert total.split()[1:] == ["10", "1"]
    assert [line.split()[1] for line in lines if line.startswith("  ")] == ["6", "4"]
