"""Idle units first: a unit whose devices are all idle is evicted before a busy one, but never
at the cost of more victims, and never one that does not help the waiting pod fit."""

from __future__ import annotations

from datetime import UTC, datetime

from dra_driver.queues import Amounts, Running, Unit, choose_victims
from dra_driver.queues.gang_reclaim import choose_gang_victims
from tests.unit.queues.test_gang_reclaim import Toy
from tests.unit.queues.test_reclaim import Nodes, chosen

LONG_AGO = datetime(2025, 1, 1, tzinfo=UTC)


def pod(
    name: str,
    node: str = "n1",
    gpus: float = 1.0,
    priority: int = 0,
    created: str = "2025-01-01T00:00:00Z",
    idle: bool = False,
    gang: str | None = None,
) -> Running:
    return Running(
        key=("ns", name),
        queue="borrower",
        nodes=frozenset({node}),
        priority=priority,
        created=created,
        amounts=Amounts(gpus, 0),
        gang=gang,
        idle_since=LONG_AGO if idle else None,
    )


def singles(*pods: Running) -> list[Unit]:
    return [Unit((p,)) for p in pods]


def gang_names(found: object) -> list[str]:
    assert not isinstance(found, str), found
    return sorted(p.key[1] for p in found.pods)  # type: ignore[attr-defined]


def test_an_idle_pod_goes_before_a_busy_one_of_lower_priority_and_newer() -> None:
    # Without idleness the busy pod (lowest priority, newest) would be the one.
    busy = pod("busy", priority=0, created="2025-06-01T00:00:00Z")
    idle = pod("idle", priority=5, created="2025-01-01T00:00:00Z", idle=True)
    assert chosen(choose_victims(singles(busy, idle), Nodes(1).fits)) == ("n1", ["idle"])


def test_an_idle_pod_on_another_node_goes_before_a_busy_one() -> None:
    busy = pod("busy", node="a-node")
    idle = pod("idle", node="z-node", idle=True)
    found = choose_victims(singles(busy, idle), Nodes(1).fits)
    assert chosen(found) == ("z-node", ["idle"])


def test_without_idleness_the_order_is_as_before() -> None:
    older = pod("older", created="2025-01-01T00:00:00Z")
    newer = pod("newer", created="2025-06-01T00:00:00Z")
    assert chosen(choose_victims(singles(older, newer), Nodes(1).fits)) == ("n1", ["newer"])


def test_idle_pods_go_before_a_busy_one_even_when_more_of_them_go() -> None:
    # One busy two-GPU pod on n1, or two idle one-GPU pods on n2: the idle pods lose no work.
    busy = pod("busy", node="n1", gpus=2)
    idle = [pod("i1", node="n2", idle=True), pod("i2", node="n2", idle=True)]
    assert chosen(choose_victims(singles(busy, *idle), Nodes(2).fits)) == ("n2", ["i1", "i2"])


def test_among_idle_choices_the_fewest_victims_win() -> None:
    # Two idle one-GPU pods on n2, or one idle two-GPU pod on n1.
    one = pod("one", node="n1", gpus=2, idle=True)
    idle = [pod("i1", node="n2", idle=True), pod("i2", node="n2", idle=True)]
    assert chosen(choose_victims(singles(*idle, one), Nodes(2).fits)) == ("n1", ["one"])


def test_an_idle_gang_of_two_goes_before_a_busy_pod() -> None:
    busy = pod("busy", priority=0)
    members = (pod("g1", idle=True, gang="g", priority=9), pod("g2", idle=True, gang="g"))
    found = choose_victims([Unit((busy,)), Unit(members)], Nodes(1).fits)
    assert chosen(found) == ("n1", ["g1", "g2"])


def test_an_idle_pod_that_does_not_make_room_is_not_evicted() -> None:
    busy = pod("busy", node="n1", gpus=2)
    idle = pod("idle", node="n2", gpus=1, idle=True)
    assert chosen(choose_victims(singles(busy, idle), Nodes(2).fits)) == ("n1", ["busy"])
    assert choose_victims(singles(idle), Nodes(2).fits) is None


def test_on_one_node_idle_pods_are_taken_before_busy_ones() -> None:
    # Two GPUs needed on n1; the busy pods are the cheapest by priority and age.
    pods = [
        pod("busy1", priority=0, created="2025-06-01T00:00:00Z"),
        pod("busy2", priority=0, created="2025-05-01T00:00:00Z"),
        pod("idle1", priority=3, idle=True),
        pod("idle2", priority=4, idle=True),
    ]
    assert chosen(choose_victims(singles(*pods), Nodes(2).fits)) == ("n1", ["idle1", "idle2"])


def test_with_as_many_victims_the_node_with_fewer_busy_ones_wins() -> None:
    a = [
        pod("a-busy", node="a", created="2025-09-01T00:00:00Z"),
        pod("a-idle", node="a", idle=True),
    ]
    b = [pod("b-idle1", node="b", priority=1, idle=True), pod("b-idle2", node="b", idle=True)]
    assert chosen(choose_victims(singles(*a, *b), Nodes(2).fits)) == ("b", ["b-idle1", "b-idle2"])


def test_a_gangs_member_takes_the_idle_victim() -> None:
    busy = pod("busy", created="9")
    idle = pod("idle", created="1", priority=3, idle=True)
    found = choose_gang_victims(singles(busy, idle), 1, Toy([1], n1=0))
    assert gang_names(found) == ["idle"]


def test_pruning_a_gangs_victims_drops_busy_ones_first() -> None:
    # As in test_gang_reclaim's every-unit case (member by member finds nothing, so every unit
    # is tried and pruned): with a0 idle, the busy a1 and a2 are dropped and a0 kept, where
    # without idleness the oldest (a0) would be dropped first.
    borrowed = [pod("a0", created="1", idle=True), pod("a1", created="2")]
    borrowed += [pod("a2", created="3"), pod("b0", node="n2", created="1")]
    found = choose_gang_victims(singles(*borrowed), 2, Toy([2, 3], n1=1, n2=2))
    assert gang_names(found) == ["a0", "b0"]


def test_a_unit_is_idle_only_when_every_pod_is() -> None:
    assert Unit((pod("x", idle=True), pod("y", idle=True))).idle
    assert not Unit((pod("x", idle=True), pod("y"))).idle
