"""The failover client's connection URLs (ActiveMQ's failover syntax and options) and its
load-balancing policies; no sockets."""

from __future__ import annotations

import random

import pytest

from meshgate.client.discovery import Discovery
from meshgate.client.policy import (
    FirstElementPolicy,
    RandomPolicy,
    RandomStickyPolicy,
    RoundRobinPolicy,
    make_policy,
)
from meshgate.client.url import (
    BrokerURI,
    DiscoveryURI,
    FailoverOptions,
    parse_url,
)

A, B, C, D = ("a", 1), ("b", 2), ("c", 3), ("d", 4)


# -- URLs ----------------------------------------------------------------------------------


def test_a_failover_url_lists_brokers_in_order_with_activemq_options():
    url = parse_url("failover:(tcp://a:61613,tcp://b:61623)?randomize=false&maxReconnectAttempts=5"
                    "&startupMaxReconnectAttempts=2&initialReconnectDelay=100&maxReconnectDelay=2000"
                    "&useExponentialBackOff=false&backOffMultiplier=3&timeout=1500&connectionTimeout=700")
    assert url.entries == (BrokerURI("a", 61613), BrokerURI("b", 61623))
    assert url.options == FailoverOptions(
        policy="first-element", max_reconnect_attempts=5, startup_max_reconnect_attempts=2,
        initial_reconnect_delay_ms=100, max_reconnect_delay_ms=2000, use_exponential_backoff=False,
        backoff_multiplier=3.0, timeout_ms=1500, connection_timeout_ms=700)


def test_defaults_are_activemqs():
    options = parse_url("failover:(tcp://a:1)").options
    assert options.policy == "random"  # randomize=true
    assert options.max_reconnect_attempts == -1  # forever
    assert options.startup_max_reconnect_attempts == -1
    assert options.initial_reconnect_delay_ms == 10
    assert options.max_reconnect_delay_ms == 30000
    assert options.use_exponential_backoff is True
    assert options.backoff_multiplier == 2.0
    assert options.timeout_ms == -1


@pytest.mark.parametrize("text", [
    "failover:tcp://a:1,tcp://b:2?randomize=false",
    "failover://(tcp://a:1,tcp://b:2)?randomize=false",
    "failover:( tcp://a:1 , tcp://b:2 )?randomize=false",
    "FAILOVER:(TCP://a:1,stomp://b:2)?randomize=false",
])
def test_the_other_spellings_activemq_accepts(text):
    url = parse_url(text)
    assert url.entries == (BrokerURI("a", 1), BrokerURI("b", 2))
    assert url.options.policy == "first-element"


def test_a_single_uri_needs_no_failover_prefix():
    assert parse_url("tcp://h:61613").entries == (BrokerURI("h", 61613),)
    assert parse_url("udp://239.1.2.3:6155").entries[0].kind == "udp"


@pytest.mark.parametrize("scheme", ["ssl", "stomp+ssl", "stomp+tls", "tls"])
def test_tls_schemes(scheme):
    broker = parse_url(f"failover:({scheme}://h:61614,tcp://h:61613)").entries[0]
    assert broker == BrokerURI("h", 61614, tls=True)
    assert str(broker) == "ssl://h:61614"


def test_ipv6_hosts():
    assert parse_url("tcp://[::1]:61613").entries == (BrokerURI("::1", 61613),)
    assert str(BrokerURI("::1", 61613)) == "tcp://[::1]:61613"


@pytest.mark.parametrize("name, policy", [
    ("round-robin", "round-robin"), ("random", "random"), ("random-sticky", "random-sticky"),
    ("first-element", "first-element"), ("Round-Robin", "round-robin"),
])
def test_policy_option(name, policy):
    assert parse_url(f"failover:(tcp://a:1)?policy={name}").options.policy == policy


def test_reconnect_delay_exponent_is_an_alias_of_backoff_multiplier():
    assert parse_url("failover:(tcp://a:1)?reconnectDelayExponent=1.5").options.backoff_multiplier == 1.5


def test_udp_discovery_uri():
    entry = parse_url("failover:(udp://239.255.2.3:6155?interface=10.0.0.5&window=800,tcp://h:1)").entries[0]
    assert isinstance(entry, DiscoveryURI)
    assert (entry.kind, entry.host, entry.port, entry.interface, entry.window_ms) == \
        ("udp", "239.255.2.3", 6155, "10.0.0.5", 800)
    assert parse_url("udp://239.255.2.3:6155").entries[0].interface == "127.0.0.1"  # as mesh.discovery's default


def test_udp_password_is_url_decoded_and_not_shown():
    entry = parse_url("udp://239.255.2.3:6155?password=s%26cret%3D1").entries[0]
    assert entry.password == "s&cret=1"
    assert "cret" not in repr(entry)


def test_dns_discovery_uris():
    srv_only = parse_url("dns://meshgate.mesh.svc.cluster.local").entries[0]
    assert (srv_only.kind, srv_only.host, srv_only.port, srv_only.service) == \
        ("dns", "meshgate.mesh.svc.cluster.local", None, "_stomp._tcp")
    with_a = parse_url("dns://mesh.test:61613?server=127.0.0.1:5353,10.0.0.1&service=_mg._tcp&tls=true").entries[0]
    assert with_a.port == 61613
    assert with_a.servers == (("127.0.0.1", 5353), ("10.0.0.1", 53))
    assert with_a.service == "_mg._tcp"
    assert with_a.tls is True


@pytest.mark.parametrize("text, problem", [
    ("", "empty"),
    ("failover:()", "no broker URIs"),
    ("failover:(tcp://a:1,,tcp://b:2)", "empty URI"),
    ("failover:(tcp://a:1", "unbalanced"),
    ("failover:(tcp://a:1)x", "after the closing parenthesis"),
    ("tcp://a:1,tcp://b:2", "without failover"),
    ("tcp://a", "no port"),
    ("tcp://a:", "no port"),
    ("tcp://:61613", "no host"),
    ("tcp://a:0", "bad port"),
    ("tcp://a:70000", "bad port"),
    ("tcp://a:6x", "bad port"),
    ("tcp://u:pw@a:1", "credentials"),
    ("tcp://a:1/path", "path"),
    ("tcp://a:1?wireFormat.maxInactivityDuration=0", "options on a broker URI"),
    ("http://a:1", "unknown scheme 'http'"),
    ("a:1", "not a URI"),
    ("failover:(tcp://a:1)?maxReconnectAttempts=-2", "maxReconnectAttempts must be at least -1"),
    ("failover:(tcp://a:1)?maxReconnectAttempts=many", "maxReconnectAttempts must be an integer"),
    ("failover:(tcp://a:1)?initialReconnectDelay=-1", "initialReconnectDelay must be at least 0"),
    ("failover:(tcp://a:1)?initialReconnectDelay=500&maxReconnectDelay=100", "less than initialReconnectDelay"),
    ("failover:(tcp://a:1)?backOffMultiplier=0.5", "backOffMultiplier must be at least 1.0"),
    ("failover:(tcp://a:1)?backOffMultiplier=2&reconnectDelayExponent=2", "not both"),
    ("failover:(tcp://a:1)?randomize=maybe", "randomize must be true or false"),
    ("failover:(tcp://a:1)?randomize=true&policy=random", "randomize or policy"),
    ("failover:(tcp://a:1)?policy=fastest", "unknown policy 'fastest'"),
    ("failover:(tcp://a:1)?colour=blue", "unknown option 'colour'"),
    ("failover:(tcp://a:1)?backup=true", "'backup' is not supported"),
    ("failover:(tcp://a:1)?nested.wireFormat.x=1", "is not supported"),
    ("failover:(tcp://a:1)?timeout", "has no value"),
    ("failover:(tcp://a:1)?timeout=1&timeout=2", "given twice"),
    ("udp://10.0.0.1:6155", "multicast group"),
    ("udp://239.1.2.3", "no port"),
    ("udp://239.1.2.3:6155?interface=eth0", "interface must be an IPv4 address"),
    ("udp://239.1.2.3:6155?window=0", "window must be at least 1"),
    ("udp://239.1.2.3:6155?ttl=1", "unknown option 'ttl'"),
    ("dns://bad_name!", "bad DNS name"),
    ("dns://mesh.test?service=stomp", "service must look like"),
    ("dns://mesh.test?tls=sometimes", "tls must be true or false"),
])
def test_bad_urls_raise_value_error_naming_the_problem(text, problem):
    with pytest.raises(ValueError) as raised:
        parse_url(text)
    assert problem in str(raised.value)


# -- back-off ------------------------------------------------------------------------------


def test_exponential_backoff_grows_by_the_multiplier_up_to_the_maximum():
    delays = parse_url("failover:(tcp://a:1)?initialReconnectDelay=100&maxReconnectDelay=1000").options.delays()
    assert [next(delays) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_without_exponential_backoff_the_delay_stays():
    delays = parse_url("failover:(tcp://a:1)?initialReconnectDelay=250&useExponentialBackOff=false").options.delays()
    assert [next(delays) for _ in range(3)] == [0.25, 0.25, 0.25]


def test_startup_limit_falls_back_to_max_reconnect_attempts():
    assert parse_url("failover:(tcp://a:1)?maxReconnectAttempts=3").options.startup_limit() == 3
    assert parse_url("failover:(tcp://a:1)?maxReconnectAttempts=3&startupMaxReconnectAttempts=0") \
        .options.startup_limit() == 0


# -- policies ------------------------------------------------------------------------------


def test_first_element_always_tries_in_order():
    policy = make_policy("first-element")
    assert isinstance(policy, FirstElementPolicy)
    assert policy.order([A, B, C, A]) == [A, B, C]
    policy.connected(B)
    policy.failed(A)
    assert policy.order([A, B, C]) == [A, B, C]


def test_round_robin_starts_anywhere_then_moves_on_after_the_broker_last_used():
    starts = {tuple(RoundRobinPolicy(random.Random(seed)).order([A, B, C])) for seed in range(30)}
    assert starts == {(A, B, C), (B, C, A), (C, A, B)}  # a random first broker, then in turn
    policy = make_policy("round-robin", random.Random(1))
    assert isinstance(policy, RoundRobinPolicy)
    policy.connected(A)
    assert policy.order([A, B, C]) == [B, C, A]
    policy.connected(B)
    assert policy.order([A, B, C]) == [C, A, B]
    policy.connected(C)
    assert policy.order([A, B, C]) == [A, B, C]


def test_random_shuffles_each_pass_and_puts_the_broker_that_failed_last():
    policy = make_policy("random", random.Random(7))
    assert isinstance(policy, RandomPolicy)
    orders = {tuple(policy.order([A, B, C, D])) for _ in range(50)}
    assert len(orders) > 5
    assert all(sorted(o) == [A, B, C, D] for o in orders)
    policy.failed(B)
    assert all(policy.order([A, B, C, D])[-1] == B for _ in range(20))


def test_random_sticky_stays_on_its_broker_until_it_fails():
    policy = make_policy("random-sticky", random.Random(3))
    assert isinstance(policy, RandomStickyPolicy)
    first = policy.order([A, B, C, D])[0]
    policy.connected(first)
    for _ in range(20):
        assert policy.order([A, B, C, D])[0] == first  # sticky
    policy.failed(first)
    again = [policy.order([A, B, C, D]) for _ in range(20)]
    assert all(o[-1] == first for o in again)  # the failed one is tried last
    assert len({o[0] for o in again}) > 1  # the next one is random again
    policy.connected(again[0][0])
    assert policy.order([A, B, C, D])[0] == again[0][0]


def test_random_sticky_picks_at_random_at_first():
    firsts = {RandomStickyPolicy(random.Random(seed)).order([A, B, C])[0] for seed in range(30)}
    assert firsts == {A, B, C}


def test_policies_cope_with_an_empty_list_and_with_a_broker_that_left_the_list():
    for name in ("round-robin", "random", "random-sticky", "first-element"):
        policy = make_policy(name, random.Random(0))
        assert policy.order([]) == []
        policy.connected(D)
        assert sorted(policy.order([A, B])) == [A, B]


def test_an_unknown_policy_is_a_value_error():
    with pytest.raises(ValueError, match="unknown policy 'nearest'"):
        make_policy("nearest")


# -- candidates ----------------------------------------------------------------------------


def test_fixed_brokers_are_the_candidates_in_url_order_without_duplicates():
    url = parse_url("failover:(tcp://a:1,ssl://b:2,tcp://a:1)")
    assert Discovery(url.entries).candidates() == [BrokerURI("a", 1), BrokerURI("b", 2, tls=True)]


def test_udp_discovery_needs_the_cluster_password():
    discovery = Discovery(parse_url("udp://239.255.9.9:45999").entries)
    with pytest.raises(ValueError, match="cluster password"):
        discovery.candidates()
