"""model/rollups.py: a queue's field in a rollup window and the pipeline's key of it
name its vhost; the default vhost's are what they were before vhosts."""

from __future__ import annotations

import pytest

from model.rollups import Counts, QueueWindow, parse_queue_field, queue_field, queue_key, split_queue_key


@pytest.mark.parametrize("vhost, name, field", [
    ("/", "orders", "queue:orders"),
    ("/", "team-a/orders", "queue:team-a/orders"),
    ("team-a", "orders", "vhost-queue:team-a/orders"),
    ("team b/é", "a/b:c", "vhost-queue:team%20b%2F%C3%A9/a/b:c"),
])
def test_a_queue_field_names_its_vhost_and_reads_back(vhost, name, field):
    assert queue_field(name, vhost) == field
    assert parse_queue_field(field) == (vhost, name)
    assert split_queue_key(queue_key(name, vhost)) == (vhost, name)


def test_the_default_vhosts_key_is_the_name_and_no_other_vhosts_key_is_a_name():
    assert queue_key("orders") == "orders" == queue_key("orders", "/")
    assert queue_key("orders", "team-a") not in {"orders", "team-a/orders", "team-aorders"}
    assert parse_queue_field("cluster") is None and parse_queue_field("vhost-queue:no-slash") is None


def test_a_window_written_before_vhosts_reads_as_the_default_vhost():
    import msgspec

    old = b'{"schema_version":1,"queue":"orders","start":60.0,"seconds":60,"total":{"enqueued":3}}'
    window = msgspec.json.decode(old, type=QueueWindow)
    assert (window.vhost, window.queue, window.total) == ("/", "orders", Counts(enqueued=3))
