"""GET /api/v1/pipeline: the metrics pipeline's status (model.rollups.PipelineStatus,
as the pipeline writes it to ``<prefix>:pipeline:status``), whether it runs, and how
old its last batch is. Against a real Redis (no mesh needed: it reads Redis alone)."""

from __future__ import annotations

import time

import msgspec
import pytest
import redis

from tests.console.api_support import expect_error, expect_ok
from tests.console.pipeline_support import PREFIX, clear, write_status

pytestmark = pytest.mark.django_db
P = "/api/v1/pipeline"


@pytest.fixture
def client(redis_only):
    client = redis.Redis.from_url(redis_only.url)
    clear(client)
    yield client
    clear(client)
    client.close()


def test_without_a_status_the_pipeline_is_not_running(client, viewer):
    assert expect_ok(viewer.get(P)) == {"running": False, "age": None, "stale_after": 30.0}


def test_a_fresh_status_is_running_with_every_field_and_its_age(client, viewer):
    status = write_status(client, applied_at=time.time() - 2)
    body = expect_ok(viewer.get(P))
    assert body["running"] is True, body
    assert 2 <= body["age"] < 10, body
    assert body["stale_after"] == 30.0
    assert {key: body[key] for key in msgspec.structs.asdict(status)} == msgspec.to_builtins(status)
    assert body["master"] == "local[2]" and body["batch"] == 7 and body["offsets"] == {f"{PREFIX}:snapshots": "1-0"}


def test_a_status_older_than_30_seconds_is_not_running(client, viewer):
    write_status(client, applied_at=time.time() - 120)
    body = expect_ok(viewer.get(P))
    assert body["running"] is False and 120 <= body["age"] < 130 and body["pipeline"] == "test-checkpoint", body
    write_status(client, applied_at=time.time() - 31)
    assert expect_ok(viewer.get(P))["running"] is False
    write_status(client, applied_at=time.time() - 25)
    assert expect_ok(viewer.get(P))["running"] is True


def test_slow_batches_give_the_pipeline_three_batches_time(client, viewer):
    # A pipeline catching up applies big batches slowly: 20 s a batch, so it runs until 60 s.
    write_status(client, applied_at=time.time() - 45, batch_seconds=20.0)
    body = expect_ok(viewer.get(P))
    assert body["running"] is True and body["stale_after"] == 60.0, body
    write_status(client, applied_at=time.time() - 65, batch_seconds=20.0)
    assert expect_ok(viewer.get(P))["running"] is False


def test_a_status_from_a_clock_ahead_has_age_zero(client, viewer):
    write_status(client, applied_at=time.time() + 5)
    body = expect_ok(viewer.get(P))
    assert body["running"] is True and body["age"] == 0.0, body


def test_an_unreadable_status_counts_as_none(client, viewer):
    client.set(f"{PREFIX}:pipeline:status", b"{not json")
    assert expect_ok(viewer.get(P)) == {"running": False, "age": None, "stale_after": 30.0}


def test_viewers_and_admins_read_it_anonymous_and_bad_tokens_are_refused(client, viewer, admin, anonymous):
    write_status(client)
    assert expect_ok(viewer.get(P))["running"] is True
    assert expect_ok(admin.get(P))["running"] is True
    expect_error(anonymous.get(P), 401, "unauthenticated")
    anonymous.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    expect_error(anonymous.get(P), 401, "unauthenticated")


def test_it_only_reads(client, admin):
    expect_error(admin.post(P, {}, format="json"), 405, "method_not_allowed")
