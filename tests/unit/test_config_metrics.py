"""meshgate.config: the [metrics] table (where a node writes its snapshots and events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshgate.config import MetricsConfig, load_config
from tests.unit.config_support import error, load


def test_defaults_leave_metrics_off() -> None:
    metrics = load_config(None).metrics
    assert metrics.redis_url is None  # off
    assert metrics.interval_ms == 1000
    assert metrics.stream_prefix == "meshgate"
    assert metrics.maxlen == 100_000
    assert metrics.buffer == 10_000
    assert metrics == MetricsConfig()


def test_an_empty_table_equals_the_defaults(tmp_path: Path) -> None:
    assert load(tmp_path, "[metrics]\n").metrics == MetricsConfig()


def test_every_key_parses(tmp_path: Path) -> None:
    metrics = load(
        tmp_path,
        """
        [metrics]
        redis_url = "redis://redis.internal:6380/2"
        interval_ms = 250
        stream_prefix = "prod.eu-1:mesh_a"
        maxlen = 5000
        buffer = 20
        """,
    ).metrics
    assert metrics == MetricsConfig(redis_url="redis://redis.internal:6380/2", interval_ms=250,
                                    stream_prefix="prod.eu-1:mesh_a", maxlen=5000, buffer=20)


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:6379/0",
    "redis://:secret@[::1]:6379",
    "rediss://user:pass@redis.example.com:6380/1",
    "unix:///var/run/redis/redis.sock",
    "unix:///tmp/redis.sock?db=3",
])
def test_valid_redis_urls(tmp_path: Path, url: str) -> None:
    assert load(tmp_path, f'[metrics]\nredis_url = "{url}"\n').metrics.redis_url == url


def test_minimums_are_accepted(tmp_path: Path) -> None:
    metrics = load(tmp_path, "[metrics]\ninterval_ms = 100\nmaxlen = 1000\nbuffer = 10\n").metrics
    assert (metrics.interval_ms, metrics.maxlen, metrics.buffer) == (100, 1000, 10)


def test_overrides_set_metrics_keys(tmp_path: Path) -> None:
    config = load(tmp_path, "[metrics]\ninterval_ms = 500\n", {
        "metrics.redis_url": "redis://127.0.0.1:7000/0", "metrics.interval_ms": 2000})
    assert config.metrics.redis_url == "redis://127.0.0.1:7000/0"
    assert config.metrics.interval_ms == 2000
    assert load_config(None, {"metrics.stream_prefix": "x"}).metrics.stream_prefix == "x"


@pytest.mark.parametrize("text, key, hint", [
    ('redis_url = "http://127.0.0.1:6379"', "metrics.redis_url", "Redis URL"),
    ('redis_url = "127.0.0.1:6379"', "metrics.redis_url", "Redis URL"),
    ('redis_url = "redis:/127.0.0.1"', "metrics.redis_url", "Redis URL"),
    ('redis_url = ""', "metrics.redis_url", "must not be empty"),
    ("redis_url = 6379", "metrics.redis_url", "expected a string"),
    ("interval_ms = 99", "metrics.interval_ms", ">= 100"),
    ("interval_ms = 0", "metrics.interval_ms", ">= 100"),
    ('interval_ms = "1s"', "metrics.interval_ms", "expected an integer"),
    ("interval_ms = true", "metrics.interval_ms", "expected an integer"),
    ('stream_prefix = "has space"', "metrics.stream_prefix", "use letters, digits"),
    ('stream_prefix = "a/b"', "metrics.stream_prefix", "use letters, digits"),
    ('stream_prefix = "*"', "metrics.stream_prefix", "use letters, digits"),
    ('stream_prefix = ""', "metrics.stream_prefix", "must not be empty"),
    ("maxlen = 999", "metrics.maxlen", ">= 1000"),
    ("buffer = 9", "metrics.buffer", ">= 10"),
    ("buffer = 1.5", "metrics.buffer", "expected an integer"),
    ("interval = 1000", "metrics.interval", "unknown key"),
    ("url = 'redis://x'", "metrics.url", "unknown key"),
])
def test_bad_values_name_the_dotted_key(tmp_path: Path, text: str, key: str, hint: str) -> None:
    message = error(tmp_path, f"[metrics]\n{text}\n")
    assert message.startswith(f"{key}: ")
    assert hint in message


def test_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    message = error(tmp_path, "[metrics]\nredis = 'redis://x'\n")
    assert message.startswith("metrics.redis: unknown key")
    for known in ("redis_url", "interval_ms", "stream_prefix", "maxlen", "buffer"):
        assert known in message


def test_bad_url_message_shows_the_value(tmp_path: Path) -> None:
    message = error(tmp_path, '[metrics]\nredis_url = "mysql://db:3306"\n')
    assert message.startswith("metrics.redis_url: ")
    assert "'mysql://db:3306'" in message


def test_metrics_must_be_a_table(tmp_path: Path) -> None:
    assert error(tmp_path, 'metrics = "redis://x"\n').startswith("metrics: expected a table")


def test_bad_override_names_the_dotted_key(tmp_path: Path) -> None:
    message = error(tmp_path, "", {"metrics.redis_url": "localhost:6379"})
    assert message.startswith("metrics.redis_url: ")
