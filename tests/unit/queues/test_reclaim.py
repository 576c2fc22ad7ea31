"""Choosing victims: only borrowed pods, whole gangs, fewest then cheapest, each one needed."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from dra_driver.queues import (
    Amounts,
    Ledger,
    QueueTree,
    Running,
    Unit,
    borrowed_units,
    choose_victims,
)
from dra_driver.queues.reclaim import BorrowedUnits, lender

REQUESTER = "owed"


def q(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def pod(
    name: str,
    queue: str = "borrower",
    node: str = "n1",
    gpus: float = 1.0,
    priority: int = 0,
    created: str = "2025-01-01T00:00:00Z",
    gang: str | None = None,
) -> Running:
    return Running(
        key=("ns", name),
        queue=queue,
        nodes=frozenset({node}),
        priority=priority,
        created=created,
        amounts=Amounts(gpus, 0),
        gang=gang,
    )


def book(*queues: dict[str, Any]) -> Ledger:
    tree = QueueTree.build([q(REQUESTER, guaranteed={"gpu": 4}), *queues])
    return Ledger(tree, Amounts(16, 0))


def names(units: Sequence[Unit]) -> list[list[str]]:
    return sorted(sorted(p.key[1] for p in u.pods) for u in units)


class Nodes:
    """A toy cluster: `free` GPUs per node; the waiting pod needs `need` on one node."""

    def __init__(self, need: float, **free: float) -> None:
        self.need = need
        self.free = free
        self.calls: list[tuple[str, list[str]]] = []

    def fits(self, node: str, freed: Sequence[Running]) -> bool:
        self.calls.append((node, sorted(p.key[1] for p in freed)))
        room = self.free.get(node, 0.0) + sum(p.amounts.gpu for p in freed if node in p.nodes)
        return room >= self.need


def chosen(result: tuple[str, list[Unit]] | None) -> tuple[str, list[str]] | None:
    if result is None:
        return None
    node, units = result
    return node, sorted(p.key[1] for u in units for p in u.pods)


def test_only_pods_beyond_their_queues_guarantee_are_borrowed() -> None:
    ledger = book(q("borrower", guaranteed={"gpu": 2}), q("free"))
    running = [
        pod("old-low", created="2025-01-01T00:00:00Z"),
        pod("new-high", priority=10, created="2025-03-01T00:00:00Z"),
        pod("new-low", created="2025-02-01T00:00:00Z"),
        pod("nothing-guaranteed", queue="free"),
        pod("mine", queue=REQUESTER),
    ]
    # Ranked as they would be admitted: new-high (priority), old-low (older) fill the guarantee.
    assert names(borrowed_units(ledger, running, REQUESTER)) == [
        ["new-low"],
        ["nothing-guaranteed"],
    ]


def test_protection_ranks_by_priority_before_age() -> None:
    ledger = book(q("borrower", guaranteed={"gpu": 1}))
    running = [
        pod("oldest", created="2024-01-01T00:00:00Z"),
        pod("important", priority=5, created="2025-06-01T00:00:00Z"),
    ]
    assert names(borrowed_units(ledger, running, REQUESTER)) == [["oldest"]]


def test_a_gang_is_a_unit_only_when_every_member_is_borrowed() -> None:
    ledger = book(q("borrower", guaranteed={"gpu": 1}), q("free"))
    whole = [pod("w0", "free", gang="g1"), pod("w1", "free", node="n2", gang="g1")]
    split = [
        pod("s0", priority=9, gang="g2"),  # protected: fills the guarantee
        pod("s1", gang="g2"),
    ]
    units = borrowed_units(ledger, [*whole, *split], REQUESTER)
    assert names(units) == [["w0", "w1"]]
    (unit,) = units
    assert unit.nodes == {"n1", "n2"} and unit.amounts == Amounts(2, 0)


def test_the_fewest_victims_win_over_lower_priority() -> None:
    units = [
        Unit((pod("big", node="n1", gpus=2, priority=5),)),
        Unit((pod("small-a", node="n2", priority=0),)),
        Unit((pod("small-b", node="n2", priority=0),)),
    ]
    assert chosen(choose_victims(units, Nodes(2).fits)) == ("n1", ["big"])


def test_then_the_lowest_priority() -> None:
    units = [
        Unit((pod("high", node="n1", priority=3),)),
        Unit((pod("low", node="n2", priority=1),)),
    ]
    assert chosen(choose_victims(units, Nodes(1).fits)) == ("n2", ["low"])


def test_then_the_newest() -> None:
    units = [
        Unit((pod("older", node="n1", created="2025-01-01T00:00:00Z"),)),
        Unit((pod("newer", node="n2", created="2025-02-01T00:00:00Z"),)),
    ]
    assert chosen(choose_victims(units, Nodes(1).fits)) == ("n2", ["newer"])


def test_on_one_node_the_cheapest_single_victim_is_preferred() -> None:
    units = [
        Unit((pod("a", priority=4),)),
        Unit((pod("b", priority=1, created="2025-01-01T00:00:00Z"),)),
        Unit((pod("c", priority=1, created="2025-05-01T00:00:00Z"),)),
    ]
    assert chosen(choose_victims(units, Nodes(1).fits)) == ("n1", ["c"])


def test_nobody_is_chosen_when_nothing_makes_room() -> None:
    units = [Unit((pod("a", node="n1"),)), Unit((pod("b", node="n2"),))]
    nodes = Nodes(2)  # each node frees one GPU at most
    assert choose_victims(units, nodes.fits) is None
    assert choose_victims([], nodes.fits) is None


def test_every_victim_chosen_is_needed() -> None:
    units = [
        Unit((pod("a", gpus=1, created="2025-03-01T00:00:00Z"),)),
        Unit((pod("b", gpus=1, created="2025-02-01T00:00:00Z"),)),
        Unit((pod("c", gpus=2, priority=9),)),
    ]
    nodes = Nodes(3)
    result = choose_victims(units, nodes.fits)
    assert chosen(result) == ("n1", ["a", "c"])  # a, b, c together fit; b is not needed
    assert result is not None
    node, picked = result
    for unit in picked:
        rest = [p for u in picked if u is not unit for p in u.pods]
        assert not nodes.fits(node, rest)


def test_a_gang_goes_whole_and_counts_every_member() -> None:
    gang = Unit((pod("g0", gang="g"), pod("g1", gang="g")))
    single = Unit((pod("one", node="n2", gpus=2, priority=7),))
    # Two victims on n1 (the gang) against one on n2: n2, despite its priority.
    assert chosen(choose_victims([gang, single], Nodes(2).fits)) == ("n2", ["one"])
    assert chosen(choose_victims([gang], Nodes(2).fits)) == ("n1", ["g0", "g1"])


def test_a_pod_evicted_in_the_pass_can_leave_the_next_one_protected() -> None:
    # Guarantee 10: A (9) is protected, B (2) and C (1) are borrowed; once B goes, A and C
    # fit the guarantee together, so C is protected for the next waiting pod of the pass.
    ledger = book(q("borrower", guaranteed={"gpu": 10}))
    running = [
        pod("A", gpus=9, created="2025-01-01T00:00:01Z"),
        pod("B", gpus=2, created="2025-01-01T00:00:02Z"),
        pod("C", gpus=1, created="2025-01-01T00:00:03Z"),
    ]
    index = BorrowedUnits(ledger, running)
    assert names(index.units(REQUESTER)) == [["B"], ["C"]]
    assert names(index.units(REQUESTER, gone={("ns", "B")})) == []
    assert names(index.units(REQUESTER, gone={("ns", "B")})) == names(
        borrowed_units(ledger, [running[0], running[2]], REQUESTER)
    )


def organisations() -> Ledger:
    """Two organisations of two teams each; org-y's team y1 is the one short of its guarantee."""
    tree = QueueTree.build(
        [
            q("org-x", guaranteed={"gpu": 4}),
            q("x1", parent="org-x", guaranteed={"gpu": 1}),
            q("x2", parent="org-x", guaranteed={"gpu": 1}),
            q("org-y", guaranteed={"gpu": 4}),
            q("y1", parent="org-y", guaranteed={"gpu": 2}),
            q("y2", parent="org-y"),
        ]
    )
    assert tree.problems == {}
    return Ledger(tree, Amounts(12, 0))


def test_across_organisations_a_team_is_judged_by_its_organisations_guarantee() -> None:
    ledger = organisations()
    # Team x1 is three GPUs past its own guarantee, but org-x holds only its guarantee of four:
    # nothing of org-x is borrowed as team y1 of the other organisation sees it.
    running = [
        pod("x1-a", queue="x1", created="2025-01-01T00:00:00Z"),
        pod("x1-b", queue="x1", created="2025-01-02T00:00:00Z"),
        pod("x1-c", queue="x1", created="2025-01-03T00:00:00Z"),
        pod("x2-a", queue="x2", priority=5, created="2025-01-04T00:00:00Z"),
    ]
    assert names(borrowed_units(ledger, running, "y1")) == []
    # Once org-x passes its guarantee, its pods are ranked together: the one past four is
    # borrowed, whichever team it belongs to; team x2's pod outranks every pod of x1.
    late = pod("x2-late", queue="x2", created="2025-01-05T00:00:00Z")
    assert names(borrowed_units(ledger, [*running, late], "y1")) == [["x2-late"]]
    newest_of_x1 = pod("x1-d", queue="x1", created="2025-01-06T00:00:00Z")
    assert names(borrowed_units(ledger, [*running, newest_of_x1], "y1")) == [["x1-d"]]


def test_between_sibling_teams_each_team_is_judged_by_its_own_guarantee() -> None:
    ledger = organisations()
    running = [
        pod("y2-a", queue="y2"),  # y2 has no guarantee of its own: all of it is borrowed
        pod("x1-a", queue="x1"),
        pod("x1-b", queue="x1", created="2025-01-02T00:00:00Z"),
    ]
    # y1's sibling y2 is judged alone; org-x (within its four) lends nothing.
    assert names(borrowed_units(ledger, running, "y1")) == [["y2-a"]]


def test_a_requester_outside_the_tree_sees_each_organisation_as_the_lender() -> None:
    tree = organisations().tree
    assert lender(tree, "x1", "gone") == "org-x"
    assert lender(tree, "y2", "y1") == "y2" and lender(tree, "y2", "x1") == "org-y"


def test_the_requesters_own_pods_are_never_victims() -> None:
    ledger = book(q("borrower"))
    mine = [
        pod(f"mine-{i}", queue=REQUESTER, created=f"2025-01-0{i + 1}T00:00:00Z") for i in range(6)
    ]
    # Six GPUs against a guarantee of four: two are past it, but they are the requester's own.
    assert names(borrowed_units(ledger, [*mine, pod("other")], REQUESTER)) == [["other"]]


def test_a_gang_with_a_member_protected_by_another_queue_is_not_a_unit() -> None:
    ledger = book(q("borrower", guaranteed={"gpu": 1}), q("free"))
    # g0 fills borrower's guarantee; g1 runs in a queue with none. The gang is not borrowed as
    # a whole, whichever queue's pods come first.
    gang = [pod("g0", gang="g"), pod("g1", "free", gang="g")]
    for running in (gang, gang[::-1]):
        assert names(borrowed_units(ledger, running, REQUESTER)) == []


def test_pods_of_a_queue_that_is_gone_are_left_alone() -> None:
    ledger = book(q("borrower"))
    running = [pod("orphan", queue="deleted"), pod("b0"), pod("b1")]
    index = BorrowedUnits(ledger, running)
    assert names(index.units(REQUESTER)) == [["b0"], ["b1"]]
    # Evicting the orphan (listed first) and b0 leaves b1; a key nobody runs changes nothing.
    gone = [("ns", "orphan"), ("ns", "b0"), ("ns", "never-ran")]
    assert names(index.units(REQUESTER, gone=gone)) == [["b1"]]
    index = BorrowedUnits(ledger, running)
    assert names(index.units(REQUESTER, gone=[("ns", "b0")])) == [["b1"]]


def test_pods_evicted_together_leave_the_rest_of_their_queue_borrowed() -> None:
    ledger = book(q("borrower", guaranteed={"gpu": 1}))
    running = [pod(p, created=f"2025-01-01T00:00:0{i}Z") for i, p in enumerate("ABCD")]
    index = BorrowedUnits(ledger, running)
    assert names(index.units(REQUESTER)) == [["B"], ["C"], ["D"]]
    assert names(index.units(REQUESTER, gone=[("ns", "B"), ("ns", "C")])) == [["D"]]


def test_a_sibling_teams_pod_evicted_in_the_pass_is_gone_for_the_next() -> None:
    ledger = organisations()
    running = [pod("y2-a", queue="y2"), pod("y2-b", queue="y2", created="2025-01-02T00:00:00Z")]
    index = BorrowedUnits(ledger, running)
    assert names(index.units("y1")) == [["y2-a"], ["y2-b"]]
    assert names(index.units("y1", gone=[("ns", "y2-a")])) == [["y2-b"]]


def test_equal_single_victims_go_to_the_first_node_by_name() -> None:
    units = [Unit((pod("on-n2", node="n2"),)), Unit((pod("on-n1", node="n1"),))]
    assert chosen(choose_victims(units, Nodes(1).fits)) == ("n1", ["on-n1"])


def test_two_pods_of_lower_priority_beat_a_gang_of_two() -> None:
    gang = Unit((pod("g0", priority=5, gang="g"), pod("g1", priority=5, gang="g")))
    pair = [Unit((pod("p0", node="n2"),)), Unit((pod("p1", node="n2"),))]
    assert chosen(choose_victims([gang, *pair], Nodes(2).fits)) == ("n2", ["p0", "p1"])


def test_at_a_full_tie_the_first_node_by_name_wins() -> None:
    gang = Unit((pod("g0", gang="g"), pod("g1", gang="g")))
    pair = [Unit((pod("p0", node="n2"),)), Unit((pod("p1", node="n2"),))]
    # The gang on n1 against two pods on n2: same count, priority and age; n1 first.
    assert chosen(choose_victims([*pair, gang], Nodes(2).fits)) == ("n1", ["g0", "g1"])
    pairs = [*pair, Unit((pod("q0", node="n3"),)), Unit((pod("q1", node="n3"),))]
    assert chosen(choose_victims(pairs[::-1], Nodes(2).fits)) == ("n2", ["p0", "p1"])
    # Two singles on n1 tie with the gang on n1 itself: the gang, found first, stays.
    singles = [Unit((pod("s0"),)), Unit((pod("s1"),))]
    assert chosen(choose_victims([*singles, gang], Nodes(2).fits)) == ("n1", ["g0", "g1"])


def test_several_victims_are_looked_for_on_every_node_that_has_two() -> None:
    lone = Unit((pod("lone", node="n1"),))
    short = [Unit((pod("s0", node="n2", gpus=0.5),)), Unit((pod("s1", node="n2", gpus=0.5),))]
    pair = [Unit((pod("p0", node="n3"),)), Unit((pod("p1", node="n3"),))]
    # n1 has one candidate, n2's two together free too little: n3's pair is the answer.
    assert chosen(choose_victims([lone, *short, *pair], Nodes(2).fits)) == ("n3", ["p0", "p1"])


def test_pruning_drops_the_costliest_victim_it_can_do_without_first() -> None:
    units = [
        Unit((pod("cheap", gpus=1, priority=0),)),
        Unit((pod("dear", gpus=1, priority=1),)),
        Unit((pod("big", gpus=3, priority=2),)),
    ]
    # All three free five GPUs for a pod of four; with big, either small one is enough: the
    # dearer one is spared.
    assert chosen(choose_victims(units, Nodes(4).fits)) == ("n1", ["big", "cheap"])


def test_the_units_kept_across_evictions_are_the_units_worked_out_afresh() -> None:
    """`BorrowedUnits` keeps each lender's split and drops only the pods that go: whatever
    goes, in whatever order, it answers what a fresh count of the pods left answers."""
    for seed in range(40):
        rnd = random.Random(seed)
        ledger = book(
            q("borrower", guaranteed={"gpu": rnd.choice([0, 2, 5])}),
            q("other", guaranteed={"gpu": rnd.choice([0, 1, 3])}),
        )
        running = [
            pod(
                f"p{i}",
                queue=rnd.choice(["borrower", "other", REQUESTER]),
                gpus=rnd.choice([0.5, 1.0, 2.0]),
                priority=rnd.choice([0, 0, 1, 5]),
                created=f"2025-01-01T00:00:{rnd.randrange(60):02d}Z",
                gang=rnd.choice([None, None, None, "g"]),
            )
            for i in range(rnd.randrange(3, 14))
        ]
        index = BorrowedUnits(ledger, running)
        gone: set[tuple[str, str]] = set()
        assert names(index.units(REQUESTER)) == names(borrowed_units(ledger, running, REQUESTER))
        for victim in rnd.sample(running, len(running)):
            gone.add(victim.key)
            left = [p for p in running if p.key not in gone]
            assert names(index.units(REQUESTER, gone=gone)) == names(
                borrowed_units(ledger, left, REQUESTER)
            ), (seed, sorted(gone))


class Halves:
    """A toy cluster of GPUs shared by halves: the waiting pod needs one whole GPU, which a
    GPU is once every pod on it is freed."""

    def __init__(self, gpus: dict[str, Sequence[str]]) -> None:
        self.gpus = gpus

    def fits(self, node: str, freed: Sequence[Running]) -> bool:
        gone = {p.key[1] for p in freed}
        return any(set(pods) <= gone for pods in self.gpus.values())


def half(name: str, queue: str, created: str) -> Running:
    return pod(name, queue=queue, gpus=0.5, created=f"2025-01-0{created}T00:00:00Z")


def lenders_half_a_gpu_over() -> tuple[Ledger, list[Running]]:
    """Lenders a and b, each guaranteed one GPU and holding one and a half, in halves: each
    one's newest half (borrowed) shares a GPU with its own oldest (protected)."""
    ledger = book(q("a", guaranteed={"gpu": 1}), q("b", guaranteed={"gpu": 1}))
    running = [
        half("a-old", "a", "1"),
        half("a-mid", "a", "2"),
        half("a-new", "a", "3"),
        half("b-old", "b", "1"),
        half("b-mid", "b", "2"),
        half("b-new", "b", "3"),
    ]
    return ledger, running


def test_when_borrowed_pods_free_no_whole_gpu_the_lenders_surplus_may_go() -> None:
    ledger, running = lenders_half_a_gpu_over()
    cluster = Halves({"g1": ["a-old", "a-new"], "g2": ["a-mid", "b-mid"], "g3": ["b-old", "b-new"]})
    lenders = BorrowedUnits(ledger, running)
    borrowed = lenders.units(REQUESTER)
    assert names(borrowed) == [["a-new"], ["b-new"]]
    assert choose_victims(borrowed, cluster.fits) is None  # two halves of two GPUs
    spare, allowed = lenders.surplus(REQUESTER)
    # One half of each lender's may go: each still holds its guaranteed GPU afterwards.
    assert chosen(choose_victims(spare, cluster.fits, allowed)) == ("n1", ["a-mid", "b-mid"])


def test_the_surplus_never_takes_a_lender_below_its_guarantee() -> None:
    ledger, running = lenders_half_a_gpu_over()
    # Each GPU is one lender's own: freeing one takes that lender half a GPU below.
    cluster = Halves({"g1": ["a-old", "a-new"], "g2": ["b-mid", "b-new"], "g3": ["a-mid"]})
    running = [p for p in running if p.key[1] != "b-old"]  # b holds exactly its guarantee
    lenders = BorrowedUnits(ledger, running)
    spare, allowed = lenders.surplus(REQUESTER)
    assert names(spare) == [["a-mid"], ["a-new"], ["a-old"]]  # b lends nothing
    assert not allowed([running[0], running[2]])  # a-old and a-new: a would hold half a GPU
    assert allowed([running[1]])
    assert chosen(choose_victims(spare, cluster.fits, allowed)) == ("n1", ["a-mid"])
    cluster.gpus.pop("g3")
    assert choose_victims(spare, cluster.fits, allowed) is None


def test_the_surplus_offers_no_pod_larger_than_it_and_no_gang() -> None:
    ledger = book(q("a", guaranteed={"gpu": 1}))
    running = [
        pod("a-old", "a", gpus=1, created="2025-01-01T00:00:00Z"),
        pod("a-big", "a", gpus=2, created="2025-01-02T00:00:00Z"),
        pod("a-g0", "a", gpus=0.5, created="2025-01-03T00:00:00Z", gang="g"),
        pod("a-g1", "a", gpus=0.5, created="2025-01-03T00:00:00Z", gang="g"),
        pod("mine", REQUESTER),
    ]
    spare, _ = BorrowedUnits(ledger, running).surplus(REQUESTER)
    assert names(spare) == [["a-big"], ["a-old"]]  # a holds three over its guarantee
