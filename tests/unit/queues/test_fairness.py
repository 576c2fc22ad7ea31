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


def test_removing_takes_from_what_the_queue_holds() -> None:
    book = ledger(q("a"), q("b"), a=Amounts(3, 30 * GI))
    book.remove("a", Amounts(1, 10 * GI))
    assert book.used("a") == Amounts(2, 20 * GI)
    # A queue with nothing recorded yet can be taken from and given back (a trial's freed pods).
    book.remove("b", Amounts(1, GI))
    book.add("b", Amounts(1, GI))
    assert book.used("b") == Amounts() and book.total_used() == Amounts(2, 20 * GI)


def test_borrowed_counts_each_resource_past_its_own_guarantee() -> None:
    book = ledger(q("g", guaranteed={"gpu": 2}), g=Amounts(1, 80 * GI))
    # Within the GPU guarantee; memory is not guaranteed, so all of it is borrowed.
    assert book.borrowed("g") == Amounts(0, 80 * GI)


def test_the_dominant_share_of_a_resource_the_cluster_has_none_of_is_left_out() -> None:
    book = ledger(q("gpus"), gpus=Amounts(2, 0))
    assert book.dominant_share("gpus") == 0.25
    book.capacity = Amounts(1, 0)  # one GPU that publishes no memory
    book.own["gpus"] = Amounts(1, 80 * GI)
    assert book.dominant_share("gpus") == 1.0
    book.capacity = Amounts()  # no GPU at all
    assert book.dominant_share("gpus") == 0.0


def test_the_next_queue_is_the_one_ordered_first() -> None:
    book = ledger(q("a"), q("b"), q("c", weight=4), a=2, b=1, c=3)
    assert book.next_queue(["a", "b", "c"]) == "c"
    assert book.next_queue(iter(["b", "a"])) == "b"


def test_a_limit_refusal_says_the_limit_what_is_held_and_what_is_asked() -> None:
    book = ledger(q("capped", limit={"gpu": 2}), q("none", limit={"gpu": 0}), capped=1)
    assert book.refusal("capped", Amounts(2, 0)) == (
        "queue capped would pass its gpu limit (2): it holds 1 and the pod asks 2"
    )
    assert book.refusal("none", Amounts(0.5, 0)) == (
        "queue none would pass its gpu limit (0): it holds 0 and the pod asks 0.50"
    )


def test_only_the_shortfall_of_other_waiting_queues_is_held() -> None:
    book = ledger(
        q("owed", guaranteed={"gpu": 4}),
        q("over", guaranteed={"gpu": 2, "memory": "10Gi"}),
        q("borrower"),
        owed=2,
        borrower=2,
        over=Amounts(1, 20 * GI),
    )
    # owed lacks two GPUs; over is past its memory guarantee, so not short of it, though it
    # lacks a GPU; a waiting name that is no queue (any more) is ignored.
    book.waiting.update({"owed", "over", "ghost"})
    free = 8 - 5
    # Exactly what is held is left free: allowed. One more is refused.
    assert book.refusal("borrower", Amounts(free - 2, 0)) is None
    refusal = book.refusal("borrower", Amounts(free - 1, 0))
    assert refusal == (
        "queue borrower is at its guarantee and the free gpu (3) is held for queues below "
        "theirs (2)"
    )


def test_a_queue_short_of_its_guarantee_is_not_held_back_by_its_own_shortfall() -> None:
    book = ledger(q("owed", guaranteed={"gpu": 4}), q("borrower"), owed=3, borrower=5)
    book.waiting.add("owed")
    # Nothing is free; owed asks past its guarantee: only limits could stop it.
    assert book.refusal("owed", Amounts(2, 0)) is None


def test_no_free_capacity_is_shown_as_none() -> None:
    book = ledger(q("owed", guaranteed={"gpu": 4}), q("borrower"), owed=0, borrower=8)
    book.waiting.add("owed")
    refusal = book.refusal("borrower", Amounts(1, 0))
    assert refusal is not None and "the free gpu (0) is held" in refusal
