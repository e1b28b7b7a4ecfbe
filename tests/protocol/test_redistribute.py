"""``redistribute`` (mesh.demand.Demand.redistribute_now): a backlog held by a
redistribution delay follows the consumers on other nodes at once; refused, saying
why, where it would do nothing."""

from __future__ import annotations

from tests.protocol.mesh_harness import MeshHarness


def held(delay_ms: int = 600_000, mode: str = "OFF_WITH_REDISTRIBUTION"):
    mesh = MeshHarness(message_load_balancing=mode, redistribution_delay_ms=delay_ms)
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, remote = b.consumer("orders")
    mesh.settle()
    for i in range(5):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    return mesh, a, remote


def test_a_held_backlog_goes_at_once_and_the_hold_is_gone():
    mesh, a, remote = held()
    demand = a.mesh.demand
    assert remote.messages == [] and demand.hold_pending("/", "orders")
    assert demand.redistribute_now("/", "orders") is None
    mesh.settle()
    assert len(remote.messages) == 5 and not demand.hold_pending("/", "orders")
    assert "is not held" in (demand.redistribute_now("/", "orders") or "")  # nothing holds it now


def test_a_backlog_kept_for_good_is_released_too():
    mesh, a, remote = held(delay_ms=-1)
    assert a.mesh.demand.redistribute_now("/", "orders") is None
    mesh.settle()
    assert len(remote.messages) == 5


def test_refusals_say_why():
    mesh, a, _ = held()
    demand = a.mesh.demand
    assert "no queue 'nothing'" in (demand.redistribute_now("/", "nothing") or "")
    a.send("lonely", b"x")
    assert "no other node is heard of with consumers" in (demand.redistribute_now("/", "lonely") or "")
    a.consumer("orders")
    mesh.settle()
    assert "consumer(s) on this node" in (demand.redistribute_now("/", "orders") or "")
    strict, a_strict, _ = held(mode="STRICT")
    assert 'mesh.message_load_balancing = "STRICT"' in (a_strict.mesh.demand.redistribute_now("/", "orders") or "")
