"""meshgate.config: the optional [mesh] table (inter-broker links, discovery, forwarding)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from meshgate.config import (
    ConfigError,
    DiscoveryConfig,
    MeshConfig,
    RedistributionOverride,
    load_config,
    parse_override,
)
from tests.unit.config_support import load, refusal

SECRET = 'cluster_password = "a-long-random-secret"\n'


def mesh(tmp_path: Path, body: str = "", overrides: dict | None = None) -> MeshConfig:
    """Load a [mesh] table with a valid password plus ``body`` (dedented)."""
    config = load(tmp_path, "[mesh]\n" + SECRET + textwrap.dedent(body), overrides)
    assert config.mesh is not None
    return config.mesh


def mesh_error(tmp_path: Path, body: str, overrides: dict | None = None) -> ConfigError:
    return refusal(tmp_path, "[mesh]\n" + SECRET + textwrap.dedent(body), overrides)


# --- presence and defaults -------------------------------------------------


def test_no_mesh_table_means_standalone(tmp_path: Path) -> None:
    assert load_config(None).mesh is None
    assert load(tmp_path, 'name = "solo"\n[stomp]\nbind = "127.0.0.1:0"\n').mesh is None


def test_defaults(tmp_path: Path) -> None:
    m = mesh(tmp_path)
    assert m.bind == ("127.0.0.1", 61616)
    assert m.static == ()
    assert m.discovery is None
    assert m.duplex is True
    assert m.max_hops == 1
    assert m.network_ttl is None
    assert m.message_load_balancing == "ON_DEMAND"
    assert m.redistribution_delay_ms == 0
    assert m.redistribution == ()
    assert m.addresses == ()
    assert m.allow_direct_connections_only is False
    assert m.cluster_user == "meshgate"
    assert m.cluster_password == "a-long-random-secret"
    assert m.insecure_cluster is False
    assert m.check_period_ms == 5000
    assert m.connection_ttl_ms == 15000
    assert m.retry_interval_ms == 500
    assert m.retry_interval_multiplier == 2.0
    assert m.max_retry_interval_ms == 10000
    assert m.reconnect_attempts == -1
    assert m.scale_down is False
    assert m.group_name == ""


def test_discovery_defaults(tmp_path: Path) -> None:
    m = mesh(tmp_path, '[mesh.discovery]\ngroup = "udp://239.255.2.3:6155"\n')
    assert m.discovery == DiscoveryConfig(group=("239.255.2.3", 6155))
    assert m.discovery.interface == "127.0.0.1"
    assert m.discovery.broadcast_period_ms == 2000
    assert m.discovery.refresh_timeout_ms == 10000


def test_password_kept_out_of_repr(tmp_path: Path) -> None:
    m = mesh(tmp_path)
    assert "a-long-random-secret" not in repr(m)
    assert "a-long-random-secret" not in repr(load(tmp_path, "[mesh]\n" + SECRET))


# --- every key -------------------------------------------------------------


def test_every_key_parses(tmp_path: Path) -> None:
    m = mesh(
        tmp_path,
        """
        bind = "0.0.0.0:7000"
        static = ["10.0.0.2:7000", "[::1]:7001", "mg-3.example:7000"]
        duplex = false
        max_hops = 3
        message_load_balancing = "STRICT"
        redistribution_delay_ms = -1
        addresses = ["/queue/orders.", "/topic/", "!/queue/orders.local."]
        allow_direct_connections_only = true
        cluster_user = "mesh-eu"
        insecure_cluster = true
        check_period_ms = 1000
        connection_ttl_ms = 3000
        retry_interval_ms = 100
        retry_interval_multiplier = 1.5
        max_retry_interval_ms = 100
        reconnect_attempts = 0
        scale_down = true
        group_name = "eu-west"

        [mesh.discovery]
        group = "udp://231.7.7.7:9876"
        interface = "10.0.0.1"
        broadcast_period_ms = 500
        refresh_timeout_ms = 501

        [[mesh.redistribution]]
        destination = "/queue/orders.>"
        delay_ms = 5000

        [[mesh.redistribution]]
        destination = "/queue/*.audit"
        delay_ms = -1
        """,
    )
    assert m.bind == ("0.0.0.0", 7000)
    assert m.static == (("10.0.0.2", 7000), ("::1", 7001), ("mg-3.example", 7000))
    assert m.duplex is False
    assert m.max_hops == 3
    assert m.message_load_balancing == "STRICT"
    assert m.redistribution_delay_ms == -1
    assert m.addresses == ("/queue/orders.", "/topic/", "!/queue/orders.local.")
    assert m.allow_direct_connections_only is True
    assert m.cluster_user == "mesh-eu"
    assert m.insecure_cluster is True
    assert m.check_period_ms == 1000
    assert m.connection_ttl_ms == 3000
    assert m.retry_interval_ms == 100
    assert m.retry_interval_multiplier == 1.5
    assert isinstance(m.retry_interval_multiplier, float)
    assert m.max_retry_interval_ms == 100
    assert m.reconnect_attempts == 0
    assert m.scale_down is True
    assert m.group_name == "eu-west"
    assert m.discovery == DiscoveryConfig(
        group=("231.7.7.7", 9876),
        interface="10.0.0.1",
        broadcast_period_ms=500,
        refresh_timeout_ms=501,
    )
    assert m.redistribution == (
        RedistributionOverride("/queue/orders.>", 5000),
        RedistributionOverride("/queue/*.audit", -1),
    )


def test_integer_multiplier_becomes_float(tmp_path: Path) -> None:
    m = mesh(tmp_path, "retry_interval_multiplier = 3\n")
    assert m.retry_interval_multiplier == 3.0
    assert isinstance(m.retry_interval_multiplier, float)


@pytest.mark.parametrize(
    "line, key, words",
    [
        ('bind = "nohost"', "mesh.bind", "HOST:PORT"),
        ('static = "10.0.0.2:7000"', "mesh.static", "array"),
        ('static = ["10.0.0.2:7000", "oops"]', "mesh.static[1]", "HOST:PORT"),
        ('static = ["10.0.0.2:0"]', "mesh.static[0]", "port 0"),
        ('static = ["10.0.0.2:7000", "10.0.0.2:7000"]', "mesh.static[1]", "twice"),
        ('duplex = "yes"', "mesh.duplex", "true or false"),
        ("duplex = 1", "mesh.duplex", "true or false"),
        ("max_hops = 0", "mesh.max_hops", ">= 1"),
        ("network_ttl = 0", "mesh.network_ttl", ">= 1"),
        ("redistribution_delay_ms = -2", "mesh.redistribution_delay_ms", ">= -1"),
        ("allow_direct_connections_only = 0", "mesh.allow_direct_connections_only", "true or false"),
        ('cluster_user = ""', "mesh.cluster_user", "empty"),
        ("insecure_cluster = 1", "mesh.insecure_cluster", "true or false"),
        ("check_period_ms = 0", "mesh.check_period_ms", ">= 1"),
        ("connection_ttl_ms = 0", "mesh.connection_ttl_ms", ">= 1"),
        ("retry_interval_ms = 0", "mesh.retry_interval_ms", ">= 1"),
        ("retry_interval_multiplier = 0.5", "mesh.retry_interval_multiplier", ">= 1.0"),
        ("reconnect_attempts = -2", "mesh.reconnect_attempts", ">= -1"),
        ('scale_down = "true"', "mesh.scale_down", "true or false"),
        ('group_name = "eu west"', "mesh.group_name", "letters"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, line: str, key: str, words: str) -> None:
    exc = mesh_error(tmp_path, line + "\n")
    assert exc.key == key
    assert words in exc.problem


def test_mesh_must_be_a_table(tmp_path: Path) -> None:
    exc = refusal(tmp_path, 'mesh = "on"\n')
    assert exc.key == "mesh"
    assert "table" in exc.problem


# --- discovery -------------------------------------------------------------


@pytest.mark.parametrize("group", ["udp://224.0.0.1:9876", "udp://239.255.255.255:1", "udp://231.7.7.7:65535"])
def test_multicast_groups_accepted(tmp_path: Path, group: str) -> None:
    m = mesh(tmp_path, f'[mesh.discovery]\ngroup = "{group}"\n')
    assert m.discovery is not None
    host, port = group.removeprefix("udp://").split(":")
    assert m.discovery.group == (host, int(port))


@pytest.mark.parametrize(
    "group, words",
    [
        ("udp://10.0.0.1:9876", "not an IPv4 multicast"),
        ("udp://223.255.255.255:9876", "not an IPv4 multicast"),
        ("udp://240.0.0.1:9876", "not an IPv4 multicast"),
        ("udp://127.0.0.1:9876", "not an IPv4 multicast"),
        ("udp://231.7.7.7:0", "not 0"),
        ("231.7.7.7:9876", "udp://GROUP:PORT"),
        ("tcp://231.7.7.7:9876", "udp://GROUP:PORT"),
        ("udp://231.7.7.7", "udp://GROUP:PORT"),
        ("udp://231.7.7.7:70000", "udp://GROUP:PORT"),
        ("udp://[ff02::1]:9876", "udp://GROUP:PORT"),
        ("udp://mcast.example:9876", "udp://GROUP:PORT"),
    ],
)
def test_multicast_group_validation(tmp_path: Path, group: str, words: str) -> None:
    exc = mesh_error(tmp_path, f'[mesh.discovery]\ngroup = "{group}"\n')
    assert exc.key == "mesh.discovery.group"
    assert words in exc.problem


def test_discovery_needs_a_group_or_dns(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, "[mesh.discovery]\nbroadcast_period_ms = 100\n")
    assert exc.key == "mesh.discovery"
    assert "group" in exc.problem and "dns" in exc.problem


@pytest.mark.parametrize(("value", "expected"), [
    ("meshgate.mesh.svc.cluster.local:61616", ("meshgate.mesh.svc.cluster.local", 61616)),
    ("nodes.example.:7000", ("nodes.example", 7000)),
    ("mesh", ("mesh", None)),  # SRV records only
])
def test_dns_discovery_takes_a_name_and_a_port_or_a_name_alone(tmp_path: Path, value: str, expected: tuple) -> None:
    m = mesh(tmp_path, f'[mesh.discovery]\ndns = "{value}"\ndns_servers = ["127.0.0.1:5353"]\n')
    assert m.discovery.dns == expected and m.discovery.group is None
    assert m.discovery.dns_servers == (("127.0.0.1", 5353),)


@pytest.mark.parametrize(("value", "words"), [
    ("mesh:http", "NAME:PORT"),
    ("bad name:61616", "not a DNS name"),
    ("-mesh:61616", "not a DNS name"),
    ("mesh:0", "1 to 65535"),
    ("mesh:70000", "1 to 65535"),
    ("", "must not be empty"),
])
def test_dns_discovery_names_are_checked(tmp_path: Path, value: str, words: str) -> None:
    exc = mesh_error(tmp_path, f'[mesh.discovery]\ndns = "{value}"\n')
    assert exc.key == "mesh.discovery.dns"
    assert words in exc.problem


def test_dns_discovery_alone_needs_no_broadcast_settings(tmp_path: Path) -> None:
    m = mesh(tmp_path, '[mesh.discovery]\ndns = "mesh:61616"\nbroadcast_period_ms = 20000\n')
    assert m.discovery.dns == ("mesh", 61616)


@pytest.mark.parametrize("interface", ["eth0", "10.0.0", "::1", "239.1.1.1", ""])
def test_discovery_interface_must_be_an_ipv4_address(tmp_path: Path, interface: str) -> None:
    exc = mesh_error(tmp_path, f'[mesh.discovery]\ngroup = "udp://231.7.7.7:9876"\ninterface = "{interface}"\n')
    assert exc.key == "mesh.discovery.interface"


def test_refresh_timeout_must_exceed_broadcast_period(tmp_path: Path) -> None:
    body = '[mesh.discovery]\ngroup = "udp://231.7.7.7:9876"\nbroadcast_period_ms = 3000\nrefresh_timeout_ms = {}\n'
    for bad in (3000, 2999):
        exc = mesh_error(tmp_path, body.format(bad))
        assert exc.key == "mesh.discovery.refresh_timeout_ms"
        assert "mesh.discovery.broadcast_period_ms" in exc.problem
    assert mesh(tmp_path, body.format(3001)).discovery.refresh_timeout_ms == 3001
    # The default refresh timeout (10000) is checked against a raised period too.
    exc = mesh_error(tmp_path, '[mesh.discovery]\ngroup = "udp://231.7.7.7:9876"\nbroadcast_period_ms = 10000\n')
    assert exc.key == "mesh.discovery.refresh_timeout_ms"


@pytest.mark.parametrize("key", ["broadcast_period_ms", "refresh_timeout_ms"])
def test_discovery_periods_positive(tmp_path: Path, key: str) -> None:
    exc = mesh_error(tmp_path, f'[mesh.discovery]\ngroup = "udp://231.7.7.7:9876"\n{key} = 0\n')
    assert exc.key == f"mesh.discovery.{key}"


# --- max_hops / network_ttl ------------------------------------------------


def test_network_ttl_is_an_alias_of_max_hops(tmp_path: Path) -> None:
    m = mesh(tmp_path, "network_ttl = 4\n")
    assert m.max_hops == 4
    assert m.network_ttl is None  # folded into max_hops
    # Folding keeps dataclasses.replace() usable on the result.
    assert dataclasses.replace(m, duplex=False).max_hops == 4


def test_max_hops_and_network_ttl_together_are_refused(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, "max_hops = 2\nnetwork_ttl = 2\n")
    assert "mesh.max_hops" in str(exc)
    assert "mesh.network_ttl" in str(exc)
    # Also when one comes from the file and the other from the command line.
    exc = mesh_error(tmp_path, "max_hops = 2\n", {"mesh.network_ttl": 3})
    assert "mesh.max_hops" in str(exc) and "mesh.network_ttl" in str(exc)


# --- message load balancing ------------------------------------------------


@pytest.mark.parametrize(
    "given, stored",
    [
        ("off", "OFF"),
        ("Strict", "STRICT"),
        ("on_demand", "ON_DEMAND"),
        ("Off_With_Redistribution", "OFF_WITH_REDISTRIBUTION"),
        ("ON_DEMAND", "ON_DEMAND"),
    ],
)
def test_load_balancing_any_case_stored_upper(tmp_path: Path, given: str, stored: str) -> None:
    assert mesh(tmp_path, f'message_load_balancing = "{given}"\n').message_load_balancing == stored


@pytest.mark.parametrize("value", ['"ROUND_ROBIN"', '"on-demand"', '""', "1", "true"])
def test_load_balancing_bad_value(tmp_path: Path, value: str) -> None:
    exc = mesh_error(tmp_path, f"message_load_balancing = {value}\n")
    assert exc.key == "mesh.message_load_balancing"
    assert "OFF_WITH_REDISTRIBUTION" in exc.problem


# --- cluster password ------------------------------------------------------


@pytest.mark.parametrize("password", ["", "change-me", "CHANGE-ME", "  change-me ", "   "])
def test_weak_cluster_password_refused(tmp_path: Path, password: str) -> None:
    exc = refusal(tmp_path, f'[mesh]\ncluster_password = "{password}"\n')
    assert exc.key == "mesh.cluster_password"
    assert "insecure_cluster = true" in exc.problem
    assert "secret" in exc.problem


def test_missing_cluster_password_refused(tmp_path: Path) -> None:
    exc = refusal(tmp_path, '[mesh]\nbind = "127.0.0.1:0"\n')
    assert exc.key == "mesh.cluster_password"
    # An empty [mesh] table from the command line alone is refused too.
    with pytest.raises(ConfigError) as info:
        load_config(None, {"mesh.bind": "127.0.0.1:0"})
    assert info.value.key == "mesh.cluster_password"


@pytest.mark.parametrize("password", ["", "change-me"])
def test_insecure_cluster_overrides_refusal(tmp_path: Path, password: str) -> None:
    m = load(tmp_path, f'[mesh]\ncluster_password = "{password}"\ninsecure_cluster = true\n').mesh
    assert m is not None
    assert m.insecure_cluster is True
    assert m.cluster_password == password


def test_cluster_password_must_be_a_string(tmp_path: Path) -> None:
    exc = refusal(tmp_path, "[mesh]\ncluster_password = 1234\n")
    assert exc.key == "mesh.cluster_password"
    assert "string" in exc.problem


def test_error_does_not_leak_a_real_password(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, "check_period_ms = 0\n")
    assert "a-long-random-secret" not in str(exc)


# --- link health and retry -------------------------------------------------


@pytest.mark.parametrize("ttl", [5000, 4999, 1])
def test_connection_ttl_must_exceed_check_period(tmp_path: Path, ttl: int) -> None:
    exc = mesh_error(tmp_path, f"check_period_ms = 5000\nconnection_ttl_ms = {ttl}\n")
    assert exc.key == "mesh.connection_ttl_ms"
    assert "mesh.check_period_ms" in exc.problem


def test_connection_ttl_checked_against_default_check_period(tmp_path: Path) -> None:
    assert mesh_error(tmp_path, "connection_ttl_ms = 5000\n").key == "mesh.connection_ttl_ms"
    assert mesh_error(tmp_path, "check_period_ms = 15000\n").key == "mesh.connection_ttl_ms"
    assert mesh(tmp_path, "connection_ttl_ms = 5001\n").connection_ttl_ms == 5001


def test_max_retry_interval_bound(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, "retry_interval_ms = 1000\nmax_retry_interval_ms = 999\n")
    assert exc.key == "mesh.max_retry_interval_ms"
    assert "mesh.retry_interval_ms" in exc.problem
    # Equal is allowed: a fixed retry interval.
    m = mesh(tmp_path, "retry_interval_ms = 1000\nmax_retry_interval_ms = 1000\n")
    assert m.max_retry_interval_ms == m.retry_interval_ms == 1000
    # The default maximum (10000) is checked against a raised interval.
    assert mesh_error(tmp_path, "retry_interval_ms = 20000\n").key == "mesh.max_retry_interval_ms"


def test_multiplier_accepts_exactly_one(tmp_path: Path) -> None:
    assert mesh(tmp_path, "retry_interval_multiplier = 1.0\n").retry_interval_multiplier == 1.0
    assert mesh_error(tmp_path, "retry_interval_multiplier = nan\n").key == "mesh.retry_interval_multiplier"


# --- listener clash --------------------------------------------------------


def test_mesh_bind_must_differ_from_stomp_bind(tmp_path: Path) -> None:
    exc = refusal(tmp_path, '[stomp]\nbind = "127.0.0.1:7000"\n[mesh]\n' + SECRET + 'bind = "127.0.0.1:7000"\n')
    assert exc.key == "mesh.bind"
    assert "stomp.bind" in exc.problem


@pytest.mark.parametrize(
    "stomp, mesh_bind",
    [("0.0.0.0:7000", "127.0.0.1:7000"), ("127.0.0.1:7000", "0.0.0.0:7000"), ("[::1]:7000", "[::]:7000")],
)
def test_mesh_bind_clash_with_all_interfaces(tmp_path: Path, stomp: str, mesh_bind: str) -> None:
    exc = refusal(tmp_path, f'[stomp]\nbind = "{stomp}"\n[mesh]\n' + SECRET + f'bind = "{mesh_bind}"\n')
    assert exc.key == "mesh.bind"


def test_mesh_bind_must_differ_from_tls_bind(tmp_path: Path) -> None:
    cert = tmp_path / "server.pem"
    cert.write_text("not checked here")
    exc = refusal(
        tmp_path,
        f"""
        [stomp.tls]
        bind = "127.0.0.1:7443"
        certificate = "{cert}"
        private_key = "{cert}"
        [mesh]
        {SECRET}
        bind = "127.0.0.1:7443"
        """,
    )
    assert exc.key == "mesh.bind"
    assert "stomp.tls.bind" in exc.problem


def test_mesh_bind_port_zero_may_repeat(tmp_path: Path) -> None:
    config = load(tmp_path, '[stomp]\nbind = "127.0.0.1:0"\n[mesh]\n' + SECRET + 'bind = "127.0.0.1:0"\n')
    assert config.mesh is not None and config.mesh.bind == config.stomp.bind == ("127.0.0.1", 0)


def test_mesh_bind_same_port_other_host_allowed(tmp_path: Path) -> None:
    config = load(tmp_path, '[stomp]\nbind = "127.0.0.1:7000"\n[mesh]\n' + SECRET + 'bind = "127.0.0.2:7000"\n')
    assert config.mesh is not None and config.mesh.bind == ("127.0.0.2", 7000)


# --- addresses and carries() -----------------------------------------------


def test_no_addresses_carries_everything(tmp_path: Path) -> None:
    m = mesh(tmp_path)
    assert m.carries("/queue/orders.eu")
    assert m.carries("/topic/prices")


def test_addresses_include_prefixes(tmp_path: Path) -> None:
    m = mesh(tmp_path, 'addresses = ["/queue/orders.", "/topic/prices"]\n')
    assert m.carries("/queue/orders.eu")
    assert m.carries("/queue/orders.eu.paid")
    assert not m.carries("/queue/orders")  # prefix "/queue/orders." needs the dot
    assert not m.carries("/queue/invoices")
    assert m.carries("/topic/prices")
    assert m.carries("/topic/prices.eu")
    assert m.carries("/topic/pricesX")  # plain prefix, not element-wise
    assert not m.carries("/topic/orders.eu")


def test_addresses_only_excludes_means_all_but(tmp_path: Path) -> None:
    m = mesh(tmp_path, 'addresses = ["!/queue/local."]\n')
    assert m.carries("/queue/orders")
    assert m.carries("/topic/local.x")
    assert not m.carries("/queue/local.x")


def test_addresses_exclude_wins(tmp_path: Path) -> None:
    # Order does not matter: an exclusion beats any inclusion, broader or narrower.
    for addresses in (
        '["/queue/orders.", "!/queue/orders.local."]',
        '["!/queue/orders.local.", "/queue/orders."]',
        '["/queue/orders.local.x", "!/queue/orders."]',
    ):
        m = mesh(tmp_path, f"addresses = {addresses}\n")
        assert not m.carries("/queue/orders.local.x"), addresses
    m = mesh(tmp_path, 'addresses = ["/queue/orders.", "!/queue/orders.local."]\n')
    assert m.carries("/queue/orders.eu")
    assert not m.carries("/topic/orders.eu")


@pytest.mark.parametrize(
    "entry, words",
    [
        ("orders.", "/queue/ or /topic/"),
        ("!orders.", "/queue/ or /topic/"),
        ("/temp-queue/x", "/queue/ or /topic/"),
        ("!", "/queue/ or /topic/"),
        ("/queue/orders.>", "prefix"),
        ("!/topic/*.eu", "prefix"),
        ("", "empty"),
    ],
)
def test_addresses_validation(tmp_path: Path, entry: str, words: str) -> None:
    exc = mesh_error(tmp_path, f'addresses = ["/queue/ok.", "{entry}"]\n')
    assert exc.key == "mesh.addresses[1]"
    assert words in exc.problem


def test_addresses_must_be_an_array(tmp_path: Path) -> None:
    assert mesh_error(tmp_path, 'addresses = "/queue/"\n').key == "mesh.addresses"


# --- redistribution overrides ----------------------------------------------


def test_redistribution_delay_for_without_overrides(tmp_path: Path) -> None:
    assert mesh(tmp_path).redistribution_delay_for("/queue/a") == 0
    assert mesh(tmp_path, "redistribution_delay_ms = 250\n").redistribution_delay_for("/queue/a") == 250


def test_redistribution_first_match_wins(tmp_path: Path) -> None:
    m = mesh(
        tmp_path,
        """
        redistribution_delay_ms = 100

        [[mesh.redistribution]]
        destination = "/queue/orders.urgent"
        delay_ms = 0

        [[mesh.redistribution]]
        destination = "/queue/orders.>"
        delay_ms = 30000

        [[mesh.redistribution]]
        destination = "/queue/orders.urgent"
        delay_ms = 99

        [[mesh.redistribution]]
        destination = "/queue/*.audit"
        delay_ms = -1
        """,
    )
    assert m.redistribution_delay_for("/queue/orders.urgent") == 0  # first entry, not the third
    assert m.redistribution_delay_for("/queue/orders.eu") == 30000
    assert m.redistribution_delay_for("/queue/orders.eu.paid") == 30000
    assert m.redistribution_delay_for("/queue/orders") == 100  # '>' needs one more element
    assert m.redistribution_delay_for("/queue/billing.audit") == -1
    assert m.redistribution_delay_for("/topic/orders.eu") == 100  # kind must match
    assert m.redistribution_delay_for("/queue/other") == 100


def test_redistribution_catch_all(tmp_path: Path) -> None:
    m = mesh(tmp_path, '[[mesh.redistribution]]\ndestination = ">"\ndelay_ms = 7\n')
    assert m.redistribution_delay_for("/topic/x") == 7


@pytest.mark.parametrize(
    "entry, key, words",
    [
        ('destination = "orders.>"\ndelay_ms = 1', "mesh.redistribution[0].destination", "must start with"),
        ('destination = "/queue/a.>.b"\ndelay_ms = 1', "mesh.redistribution[0].destination", "last element"),
        ('destination = "/queue/a*"\ndelay_ms = 1', "mesh.redistribution[0].destination", "whole"),
        ('destination = "/queue/a"\ndelay_ms = -2', "mesh.redistribution[0].delay_ms", ">= -1"),
        ('destination = "/queue/a"', "mesh.redistribution[0].delay_ms", "required"),
        ("delay_ms = 1", "mesh.redistribution[0].destination", "required"),
        ('destination = "/queue/a"\ndelay_ms = 1\ndelay = 2', "mesh.redistribution[0].delay", "unknown key"),
    ],
)
def test_redistribution_validation(tmp_path: Path, entry: str, key: str, words: str) -> None:
    exc = mesh_error(tmp_path, "[[mesh.redistribution]]\n" + entry + "\n")
    assert exc.key == key
    assert words in exc.problem


def test_redistribution_must_be_array_of_tables(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, "redistribution = 5\n")
    assert exc.key == "mesh.redistribution"
    assert "[[mesh.redistribution]]" in exc.problem


# --- unknown keys ----------------------------------------------------------


def test_unknown_key_in_mesh(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, "max_hop = 2\n")
    assert exc.key == "mesh.max_hop"
    assert "unknown key" in exc.problem
    assert "max_hops" in exc.problem and "network_ttl" in exc.problem


def test_unknown_key_in_discovery(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, '[mesh.discovery]\ngroup = "udp://231.7.7.7:9876"\nrefresh_timeout = 5\n')
    assert exc.key == "mesh.discovery.refresh_timeout"
    assert "unknown key" in exc.problem
    assert "refresh_timeout_ms" in exc.problem


# --- command-line overrides ------------------------------------------------


def test_overrides(tmp_path: Path) -> None:
    m = mesh(tmp_path, overrides={"mesh.bind": "127.0.0.1:0", "mesh.static": ["127.0.0.1:7001"]})
    assert m.bind == ("127.0.0.1", 0)
    assert m.static == (("127.0.0.1", 7001),)


def test_overrides_alone_create_the_mesh_table() -> None:
    config = load_config(
        None,
        {
            "mesh.bind": "127.0.0.1:0",
            "mesh.static": ["127.0.0.1:7001"],
            "mesh.cluster_password": "s3cret-from-the-command-line",
            "mesh.discovery.group": "udp://239.1.2.3:9876",
        },
    )
    assert config.mesh is not None
    assert config.mesh.static == (("127.0.0.1", 7001),)
    assert config.mesh.discovery is not None
    assert config.mesh.discovery.group == ("239.1.2.3", 9876)


def test_set_style_overrides_parse(tmp_path: Path) -> None:
    overrides = dict(
        parse_override(text)
        for text in (
            "mesh.bind=127.0.0.1:0",
            'mesh.static=["127.0.0.1:7001", "127.0.0.1:7002"]',
            "mesh.duplex=false",
            "mesh.message_load_balancing=strict",
            "mesh.network_ttl=2",
        )
    )
    m = mesh(tmp_path, overrides=overrides)
    assert m.bind == ("127.0.0.1", 0)
    assert m.static == (("127.0.0.1", 7001), ("127.0.0.1", 7002))
    assert m.duplex is False
    assert m.message_load_balancing == "STRICT"
    assert m.max_hops == 2


def test_override_errors_name_the_key(tmp_path: Path) -> None:
    exc = mesh_error(tmp_path, "", {"mesh.static": ["127.0.0.1:7001", "bad"]})
    assert exc.key == "mesh.static[1]"


def test_peer_retention_defaults_to_a_week_and_zero_turns_it_off(tmp_path: Path) -> None:
    assert mesh(tmp_path, "").peer_retention_s == 7 * 24 * 3600
    assert mesh(tmp_path, "peer_retention_s = 0\n").peer_retention_s == 0
    exc = mesh_error(tmp_path, "peer_retention_s = -1\n")
    assert exc.key == "mesh.peer_retention_s"


# --- [mesh.tls] ----------------------------------------------------------------


def _tls_files(tmp_path: Path) -> dict[str, Path]:
    from tests.e2e.tls_support import issue

    ca = issue(tmp_path, "ca", "mesh CA", ca=True)
    _, _, cert, key = issue(tmp_path, "node", "node", issuer=ca[:2], client=True)
    _, _, _, other_key = issue(tmp_path, "other", "other", issuer=ca[:2], client=True)
    return {"certificate": cert, "private_key": key, "ca_certificate": ca[2], "other_key": other_key}


def _tls_table(files: dict[str, Path], **changes: str) -> str:
    keys = {name: str(files[name]) for name in ("certificate", "private_key", "ca_certificate")} | changes
    return "[mesh.tls]\n" + "".join(f'{name} = "{value}"\n' if name != "verify_hostname" else f"{name} = {value}\n"
                                    for name, value in keys.items())


def test_no_mesh_tls_table_means_plain_links(tmp_path: Path) -> None:
    assert mesh(tmp_path).tls is None


def test_mesh_tls_reads_the_three_files_and_verifies_hostnames_by_default(tmp_path: Path) -> None:
    files = _tls_files(tmp_path)
    tls = mesh(tmp_path, _tls_table(files)).tls
    assert tls is not None
    assert (tls.certificate, tls.private_key, tls.ca_certificate) == (
        str(files["certificate"]), str(files["private_key"]), str(files["ca_certificate"]))
    assert tls.verify_hostname is True
    assert tls.material.verify_hostname is True
    off = mesh(tmp_path, _tls_table(files, verify_hostname="false")).tls
    assert off is not None and off.verify_hostname is False


@pytest.mark.parametrize("missing", ["certificate", "private_key", "ca_certificate"])
def test_mesh_tls_needs_all_three_files(tmp_path: Path, missing: str) -> None:
    files = _tls_files(tmp_path)
    table = "".join(line + "\n" for line in _tls_table(files).splitlines() if not line.startswith(missing + " "))
    assert mesh_error(tmp_path, table).key.startswith("mesh.tls")


def test_mesh_tls_refuses_a_file_that_is_not_pem_naming_key_and_file(tmp_path: Path) -> None:
    files = _tls_files(tmp_path)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    exc = mesh_error(tmp_path, _tls_table(files, ca_certificate=str(junk)))
    assert exc.key == "mesh.tls.ca_certificate" and "junk.pem" in str(exc)


def test_mesh_tls_refuses_a_key_that_does_not_match_the_certificate(tmp_path: Path) -> None:
    files = _tls_files(tmp_path)
    exc = mesh_error(tmp_path, _tls_table(files, private_key=str(files["other_key"])))
    assert exc.key == "mesh.tls.private_key"
    assert "other.key" in str(exc) and "does not match the certificate" in str(exc) and "node.crt" in str(exc)
