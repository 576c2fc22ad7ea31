"""The Ledger: who goes next (guarantees, weighted dominant shares, paths) and who may take more."""

from __future__ import annotations

from typing import Any

from dra_driver.queues import DEFAULT_QUEUE, Amounts, Ledger, QueueTree

GI = 2**30
CLUSTER = Amounts(8.0, 640.0 * GI)


def q(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def ledger(*queues: dict[str, Any], **held: float | Amounts) -> Ledger:
    tree = QueueTree.build(queues)
    assert tree.problems == {}
    book = Ledger(tree, CLUSTER)
    for name, amount in held.items():
        book.add(name, amount if isinstance(amount, Amounts) else Amounts(amount, amount * 80 * GI))
    return book


def order(book: Ledger, *names: str) -> list[str]:
    return sorted(names, key=book.order_key)


def test_a_queue_below_its_guarantee_goes_first_whatever_it_holds() -> None:
    book = ledger(q("short", guaranteed={"gpu": 6}), q("idle"), short=5, idle=0)
    assert order(book, "idle", "short") == ["short", "idle"]
    book.add("short", Amounts(1, 80 * GI))  # at its guarantee: no longer first
    assert order(book, "idle", "short") == ["idle", "short"]


def test_then_the_lowest_weighted_dominant_share() -> None:
    book = ledger(q("a"), q("b"), q("c", weight=4), a=2, b=1, c=3)
    # shares: a 2/8, b 1/8, c (3/8)/4
    assert order(book, "a", "b", "c") == ["c", "b", "a"]


def test_the_dominant_share_is_the_larger_of_gpu_and_memory() -> None:
    book = ledger(q("gpus"), q("memory"), gpus=Amounts(2, 0), memory=Amounts(1, 320 * GI))
    # gpus: 2/8 = 0.25; memory: max(1/8, 320/640) = 0.5
    assert book.dominant_share("memory") == 0.5
    assert order(book, "memory", "gpus") == ["gpus", "memory"]


def test_queues_in_a_tree_compare_as_their_paths() -> None:
    book = ledger(
        q("light"),
        q("heavy"),
        q("light-team", parent="light"),
        q("heavy-team", parent="heavy"),
        q("heavy-other", parent="heavy"),
        **{"light-team": 3, "heavy-team": 1, "heavy-other": 4},
    )
    # The team of the organisation holding less goes first, though it holds more itself.
    assert book.used("heavy") == Amounts(5, 5 * 80 * GI)
    assert order(book, "heavy-team", "light-team") == ["light-team", "heavy-team"]
    # Inside one organisation the teams compare by their own shares.
    assert order(book, "heavy-other", "heavy-team") == ["heavy-team", "heavy-other"]


def test_the_default_queue_comes_last_at_equal_standing() -> None:
    book = ledger(q("busy"), busy=7)
    assert order(book, DEFAULT_QUEUE, "busy") == ["busy", DEFAULT_QUEUE]
    assert book.next_queue([DEFAULT_QUEUE, "busy"]) == "busy"
    assert book.next_queue([]) is None


def test_a_limit_of_the_queue_refuses_what_would_pass_it() -> None:
    book = ledger(q("capped", limit={"gpu": 2}), capped=1)
    assert book.refusal("capped", Amounts(1, 0)) is None
    refusal = book.refusal("capped", Amounts(2, 0))
    assert refusal is not None
    assert refusal.startswith("queue capped would pass its gpu limit (2): it holds 1")


def test_a_memory_limit_refuses_too() -> None:
    book = ledger(q("small", limit={"memory": "100Gi"}), small=1)
    refusal = book.refusal("small", Amounts(0.5, 40 * GI))
    assert refusal is not None and "its memory limit (100Gi)" in refusal


def test_a_limit_of_an_ancestor_refuses_what_would_pass_it() -> None:
    book = ledger(
        q("org", limit={"gpu": 3}),
        q("team", parent="org"),
        q("sibling", parent="org"),
        team=2,
        sibling=1,
    )
    refusal = book.refusal("team", Amounts(1, 0))
    assert refusal is not None and refusal.startswith("queue org would pass its gpu limit (3)")
    book.remove("sibling", Amounts(1, 80 * GI))
    assert book.refusal("team", Amounts(1, 0)) is None


def test_capacity_a_waiting_queue_below_its_guarantee_needs_is_held_for_it() -> None:
    book = ledger(q("owed", guaranteed={"gpu": 4}), q("borrower"), owed=0, borrower=4)
    assert book.refusal("borrower", Amounts(1, 0)) is None  # nobody waits: it may borrow
    book.waiting.add("owed")
    refusal = book.refusal("borrower", Amounts(1, 0))
    assert refusal is not None
    assert "is at its guarantee and the free gpu (4) is held for queues below theirs (4)" in (
        refusal
    )
    # The queue owed capacity is never held back for itself.
    assert book.refusal("owed", Amounts(1, 0)) is None


def test_a_queue_within_its_own_guarantee_is_never_held_back() -> None:
    book = ledger(
        q("owed", guaranteed={"gpu": 4}),
        q("guaranteed", guaranteed={"gpu": 4}),
        owed=0,
        guaranteed=Amounts(3, 0),
    )
    book.waiting.add("owed")
    assert book.refusal("guaranteed", Amounts(1, 0)) is None
    assert book.refusal("guaranteed", Amounts(2, 0)) is not None  # past it: held back


def test_borrowed_is_what_a_queue_holds_beyond_its_guarantee() -> None:
    book = ledger(q("g", guaranteed={"gpu": 2, "memory": "500Gi"}), g=3)
    assert book.borrowed("g") == Amounts(1, 0)
    assert not book.short_of_guarantee("g")
