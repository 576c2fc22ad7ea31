"""Choosing victims for a gang: every member fits at once, each victim needed, none when the
gang would not fit anyway."""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.queues import Amounts, Ledger, QueueTree, Running, Unit
from dra_driver.queues.gang_reclaim import choose_gang_victims, gang_admissible


def pod(name: str, node: str, gpus: float = 1.0, priority: int = 0, created: str = "1") -> Running:
    return Running(
        key=("ns", name),
        queue="borrower",
        nodes=frozenset({node}),
        priority=priority,
        created=created,
        amounts=Amounts(gpus, 0),
    )


class Toy:
    """Nodes with `free` GPUs; member i needs `needs[i]` GPUs on one node; at most `allowed`
    GPUs for the whole gang (its queue's guarantee)."""

    def __init__(self, needs: Sequence[float], allowed: float = 100.0, **free: float) -> None:
        self.needs = list(needs)
        self.free = free
        self.allowed = allowed
        self.placed: dict[int, str] = {}
        self.trials = 0

    def _room(self, node: str, freed: Sequence[Running]) -> float:
        room = self.free.get(node, 0.0) + sum(r.amounts.gpu for r in freed if node in r.nodes)
        return room - sum(self.needs[m] for m, n in self.placed.items() if n == node)

    def place(self, member: int, freed: Sequence[Running], node: str | None = None) -> bool:
        self.trials += 1
        for where in sorted(self.free) if node is None else [node]:
            if self._room(where, freed) >= self.needs[member]:
                self.placed[member] = where
                return True
        return False

    def unplace(self, member: int) -> None:
        self.placed.pop(member, None)

    def admissible(self, freed: Sequence[Running]) -> str | None:
        asks = sum(self.needs[m] for m in self.placed)
        return None if asks <= self.allowed else f"asks {asks:g}, allowed {self.allowed:g}"

    def lacking(self, member: int) -> str:
        return f"member {member} has no room"

    def reset(self) -> None:
        self.placed.clear()


def units(*pods: Running) -> list[Unit]:
    return [Unit((p,)) for p in pods]


def names(found: object) -> list[str]:
    assert not isinstance(found, str), found
    return sorted(p.key[1] for p in found.pods)  # type: ignore[attr-defined]


def test_members_that_need_two_nodes_take_victims_on_both() -> None:
    borrowed = [pod(f"a{i}", "n1") for i in range(4)] + [pod(f"b{i}", "n2") for i in range(4)]
    toy = Toy([4, 4], n1=0, n2=0)
    assert names(choose_gang_victims(units(*borrowed), 2, toy)) == sorted(
        p.key[1] for p in borrowed
    )
    assert toy.placed == {}  # nothing of the trials is left behind


def test_free_room_is_used_first_and_only_needed_victims_go() -> None:
    borrowed = [pod("a0", "n1", created="1"), pod("a1", "n1", created="2")]
    borrowed.append(pod("a2", "n1", created="3"))
    # Member 0 takes n2's free GPUs; member 1 needs 2 more on n1: the two newest go.
    toy = Toy([4, 3], n1=1, n2=4)
    assert names(choose_gang_victims(units(*borrowed), 2, toy)) == ["a1", "a2"]
    assert toy.trials <= 15  # member 0 placed at once, no victims tried for it


def test_when_members_one_by_one_find_nothing_every_unit_is_tried_then_pruned() -> None:
    # Member by member: member 0 fits n2's free room, member 1 then needs n1's two newest;
    # but decided together member 0 takes n1 once they are gone, and member 1 fits nowhere.
    # Trying every borrowed unit at once works; pruning leaves the two that are needed.
    borrowed = [pod("a0", "n1", created="1"), pod("a1", "n1", created="2")]
    borrowed += [pod("a2", "n1", created="3"), pod("b0", "n2", created="1")]
    found = choose_gang_victims(units(*borrowed), 2, Toy([2, 3], n1=1, n2=2))
    assert names(found) == ["a2", "b0"]


def test_a_gang_that_does_not_fit_even_with_every_borrowed_pod_gone_evicts_nothing() -> None:
    borrowed = [pod("a0", "n1"), pod("a1", "n1")]
    found = choose_gang_victims(units(*borrowed), 2, Toy([4, 4], n1=2, n2=0))
    assert isinstance(found, str)
    assert "even with every pod on borrowed capacity evicted" in found
    assert "has no room" in found


def test_a_gang_beyond_its_guarantee_evicts_nothing() -> None:
    borrowed = [pod(f"a{i}", "n1") for i in range(8)]
    found = choose_gang_victims(units(*borrowed), 2, Toy([4, 4], allowed=6, n1=0))
    assert isinstance(found, str) and "allowed 6" in found


def test_the_fewest_victims_win_and_each_one_is_needed() -> None:
    # One two-GPU pod rather than two one-GPU pods; for two such members, all three.
    big = pod("big", "n1", gpus=2, created="0")
    small = [pod("s0", "n1", created="5"), pod("s1", "n1", created="6")]
    assert names(choose_gang_victims(units(big, *small), 1, Toy([2], n1=0))) == ["big"]
    assert names(choose_gang_victims(units(big, *small), 2, Toy([2, 2], n1=0, n2=0))) == [
        "big",
        "s0",
        "s1",
    ]
    extra = pod("x", "n2", gpus=4)
    assert names(choose_gang_victims(units(big, *small, extra), 2, Toy([2, 2], n1=0, n2=0))) == [
        "x"
    ]


def test_no_borrowed_pod_means_nothing_to_choose() -> None:
    assert choose_gang_victims([], 2, Toy([1, 1], n1=0)) == "no pod runs on borrowed capacity"


def test_a_member_that_fits_on_free_room_leaves_the_next_one_to_choose() -> None:
    # Member 0 fits n0's free GPU; member 1 needs two on n1, where one pod of two GPUs is
    # fewer victims than two of one.
    big = pod("big", "n1", gpus=2, created="0")
    small = [pod("s0", "n1", created="5"), pod("s1", "n1", created="6")]
    assert names(choose_gang_victims(units(big, *small), 2, Toy([1, 2], n0=1, n1=0))) == ["big"]


def test_pruning_the_gangs_victims_spares_the_dearer_one() -> None:
    # Members take cheap, then dear, then big; with big gone, cheap alone makes room for the
    # rest of the gang as well as dear does: dear, of higher priority, stays.
    cheap = pod("cheap", "n1", gpus=1, priority=0, created="8")
    dear = pod("dear", "n1", gpus=2, priority=1, created="6")
    big = pod("big", "n1", gpus=3, priority=2, created="0")
    found = choose_gang_victims(units(big, cheap, dear), 3, Toy([1, 1, 2], n1=0))
    assert names(found) == ["big", "cheap"]


def gang(name: str, created: str, *where: tuple[str, float]) -> Unit:
    members = [
        Running(
            key=("ns", f"{name}{i}"),
            queue="borrower",
            nodes=frozenset({node}),
            priority=0,
            created=created,
            amounts=Amounts(gpus, 0),
            gang=name,
        )
        for i, (node, gpus) in enumerate(where)
    ]
    return Unit(tuple(members))


def test_a_victim_gang_over_two_nodes_counts_for_the_node_it_makes_room_on() -> None:
    # Gang g frees one GPU on n1 and two on n2; gang h frees three on n3. The member needs two:
    # g, on n2, is the fewer victims.
    g = gang("g", "1", ("n1", 1), ("n2", 2))
    h = gang("h", "2", ("n3", 1), ("n3", 1), ("n3", 1))
    found = choose_gang_victims([g, h], 1, Toy([2], n1=0, n2=0, n3=0))
    assert names(found) == ["g0", "g1"]


def gang_ledger() -> Ledger:
    tree = QueueTree.build(
        [
            {"metadata": {"name": "org"}, "spec": {"guaranteed": {"gpu": 2}, "limit": {"gpu": 4}}},
            {"metadata": {"name": "team"}, "spec": {"parent": "org", "guaranteed": {"gpu": 2}}},
            {"metadata": {"name": "sibling"}, "spec": {"parent": "org"}},
        ]
    )
    assert tree.problems == {}
    book = Ledger(tree, Amounts(8, 0))
    book.add("sibling", Amounts(3, 0))
    return book


def test_a_gang_past_its_queues_guarantee_is_refused_before_any_limit() -> None:
    book = gang_ledger()
    book.add("team", Amounts(1, 0))
    assert gang_admissible(book, "team", Amounts(1.5, 0), []) == (
        "the gang asks 1.50 GPUs, more than queue team's guarantee leaves it"
    )
    # Within the guarantee, the organisation's limit is what refuses it.
    refusal = gang_admissible(book, "team", Amounts(1, 0), [])
    assert refusal is not None and refusal.startswith("queue org would pass its gpu limit")


def test_a_gang_is_admitted_once_its_victims_are_gone_and_the_ledger_is_put_back() -> None:
    book = gang_ledger()
    victim = Running(
        key=("ns", "v"),
        queue="sibling",
        nodes=frozenset({"n1"}),
        priority=0,
        created="1",
        amounts=Amounts(1, 0),
    )
    assert gang_admissible(book, "team", Amounts(2, 0), []) is not None  # org: 3 + 2 > 4
    assert gang_admissible(book, "team", Amounts(2, 0), [victim]) is None  # 2 + 2
    assert book.used("sibling") == Amounts(3, 0) and book.total_used() == Amounts(3, 0)
