"""Choosing victims for a gang: every member fits at once, each victim needed, none when the
gang would not fit anyway."""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.queues import Amounts, Running, Unit
from dra_driver.queues.gang_reclaim import choose_gang_victims


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
