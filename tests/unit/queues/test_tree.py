"""The queue tree: bad queues set aside with a reason, the others kept."""

from __future__ import annotations

from typing import Any

from dra_driver.queues import DEFAULT_QUEUE, QueueSpec, QueueTree


def q(name: str, created: str = "", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def test_a_good_tree_keeps_every_queue_with_paths_and_children() -> None:
    tree = QueueTree.build(
        [
            q("org", guaranteed={"gpu": 4}),
            q("a", parent="org", namespaces=["na"], guaranteed={"gpu": 2}),
            q("b", parent="org", namespaces=["nb"], guaranteed={"gpu": 2}),
            q("leaf", parent="a", guaranteed={"gpu": 1}, namespaces=["nl"]),
        ]
    )
    assert tree.problems == {}
    assert set(tree.queues) == {"org", "a", "b", "leaf", DEFAULT_QUEUE}
    assert tree.path("leaf") == ["org", "a", "leaf"]
    assert sorted(tree.children("org")) == ["a", "b"]
    assert tree.queue_for("nl") == "leaf" and tree.queue_for("elsewhere") == DEFAULT_QUEUE
    assert tree.queues[DEFAULT_QUEUE].last


def test_an_unknown_parent_sets_the_queue_and_its_descendants_aside() -> None:
    tree = QueueTree.build(
        [
            q("child", parent="ghost", namespaces=["c"]),
            q("grandchild", parent="child", namespaces=["g"]),
            q("fine", namespaces=["f"]),
        ]
    )
    assert tree.problems["child"] == "GpuQueue child: spec.parent: GpuQueue ghost does not exist"
    assert tree.problems["grandchild"] == (
        "GpuQueue grandchild: spec.parent: an ancestor's parent GpuQueue ghost does not exist"
    )
    assert set(tree.queues) == {"fine", DEFAULT_QUEUE}
    assert tree.queue_for("c") == tree.queue_for("g") == DEFAULT_QUEUE  # fall to the default
    assert tree.queue_for("f") == "fine"


def test_a_cycle_sets_aside_its_members_and_what_hangs_below() -> None:
    tree = QueueTree.build([q("a", parent="b"), q("b", parent="a"), q("c", parent="a")])
    assert "spec.parent: the queues a -> b -> a form a cycle" in tree.problems["a"]
    assert "spec.parent: the queues b -> a -> b form a cycle" in tree.problems["b"]
    assert "an ancestor is in a cycle" in tree.problems["c"]
    assert set(tree.queues) == {DEFAULT_QUEUE}


def test_descendants_of_an_invalid_queue_are_set_aside() -> None:
    tree = QueueTree.build(
        [q("bad", weight=0), q("kid", parent="bad"), q("grandkid", parent="kid"), q("ok")]
    )
    assert tree.problems["bad"].startswith("GpuQueue bad: spec.weight:")
    assert tree.problems["kid"] == "GpuQueue kid: spec.parent: GpuQueue bad is not valid"
    assert "an ancestor's parent GpuQueue bad is not valid" in tree.problems["grandkid"]
    assert set(tree.queues) == {"ok", DEFAULT_QUEUE}


def test_children_guaranteeing_more_than_their_parent_are_all_set_aside() -> None:
    tree = QueueTree.build(
        [
            q("org", guaranteed={"gpu": 2, "memory": "100Gi"}),
            q("x", parent="org", guaranteed={"gpu": "1.5"}),
            q("y", parent="org", guaranteed={"gpu": 1}),
            q("below-x", parent="x"),
            q("other", guaranteed={"gpu": 8}),
        ]
    )
    for kid in ("x", "y"):
        assert tree.problems[kid].startswith(f"GpuQueue {kid}: spec.guaranteed.gpu: ")
        assert "guarantee 2.5 together, more than its 2" in tree.problems[kid]
    assert "below-x" in tree.problems
    assert set(tree.queues) == {"org", "other", DEFAULT_QUEUE}


def test_a_child_guaranteeing_memory_the_parent_does_not_sets_the_children_aside() -> None:
    tree = QueueTree.build(
        [
            q("org", guaranteed={"gpu": 2}),
            q("x", parent="org", guaranteed={"gpu": 1}),
            q("y", parent="org", guaranteed={"gpu": 1, "memory": "1Gi"}),
        ]
    )
    # The parent guarantees no memory: a child's memory guarantee is more than it has.
    assert "spec.guaranteed.memory" in tree.problems["y"]
    assert "x" not in tree.queues


def test_a_namespace_named_twice_stays_with_the_older_queue() -> None:
    tree = QueueTree.build(
        [
            q("aaa-newer", created="2025-06-01T00:00:00Z", namespaces=["shared", "mine"]),
            q("zzz-older", created="2024-01-01T00:00:00Z", namespaces=["shared"]),
            q("below-newer", parent="aaa-newer", namespaces=["deep"]),
        ]
    )
    assert tree.queue_for("shared") == "zzz-older"
    assert tree.problems["aaa-newer"] == (
        "GpuQueue aaa-newer: spec.namespaces: namespace shared already belongs to queue zzz-older"
    )
    assert "aaa-newer" not in tree.queues and tree.queue_for("mine") == DEFAULT_QUEUE
    # Its descendants lose their root with it.
    assert "below-newer" in tree.problems and tree.queue_for("deep") == DEFAULT_QUEUE
    assert set(tree.queues) == {"zzz-older", DEFAULT_QUEUE}


def test_the_default_queue_name_is_refused_but_the_default_queue_stays() -> None:
    tree = QueueTree.build([q(DEFAULT_QUEUE, namespaces=["x"]), q("fine")])
    assert tree.problems[DEFAULT_QUEUE].startswith(f"GpuQueue {DEFAULT_QUEUE}: metadata.name:")
    assert set(tree.queues) == {"fine", DEFAULT_QUEUE}
    assert tree.queues[DEFAULT_QUEUE].last and tree.queue_for("x") == DEFAULT_QUEUE


def test_a_configured_default_queue_name_is_the_one_refused() -> None:
    fallback = QueueSpec(name="fallback", last=True)
    tree = QueueTree.build([q("fallback"), q(DEFAULT_QUEUE, namespaces=["d"])], fallback)
    assert "fallback" in tree.problems and DEFAULT_QUEUE not in tree.problems
    assert tree.queue_for("d") == DEFAULT_QUEUE and tree.queue_for("other") == "fallback"


def test_an_unreadable_queue_does_not_stop_the_others() -> None:
    tree = QueueTree.build([q("bad", reclaim="Maybe"), q("good", namespaces=["g"])])
    assert "spec.reclaim" in tree.problems["bad"] and tree.queue_for("g") == "good"


def test_the_message_names_every_child_and_both_totals() -> None:
    tree = QueueTree.build(
        [
            q("org", guaranteed={"memory": "10Gi"}),
            q("x", parent="org", guaranteed={"gpu": "0.5"}),
            q("y", parent="org"),
        ]
    )
    # The parent guarantees no GPU: half of one is already more than it has.
    assert tree.problems["x"] == (
        "GpuQueue x: spec.guaranteed.gpu: the children of org (x, y) guarantee 0.5 together, "
        "more than its 0"
    )
    assert set(tree.queues) == {"org", DEFAULT_QUEUE}


def test_every_parent_is_checked_and_a_child_set_aside_keeps_no_namespace() -> None:
    tree = QueueTree.build(
        [
            q("org-a", guaranteed={"gpu": 1}),
            q("a1", parent="org-a", guaranteed={"gpu": 2}, namespaces=["na"]),
            q("org-b", guaranteed={"gpu": 1}),
            q("b1", parent="org-b", guaranteed={"gpu": 2}, namespaces=["nb"]),
        ]
    )
    assert set(tree.problems) == {"a1", "b1"}
    assert set(tree.queues) == {"org-a", "org-b", DEFAULT_QUEUE}
    assert tree.queue_for("na") == tree.queue_for("nb") == DEFAULT_QUEUE


def test_a_queue_after_one_that_lost_a_namespace_keeps_its_own() -> None:
    tree = QueueTree.build(
        [
            q("first", created="2024-01-01T00:00:00Z", namespaces=["shared"]),
            q("second", created="2024-02-01T00:00:00Z", namespaces=["shared"]),
            q("third", created="2024-03-01T00:00:00Z", namespaces=["own"]),
        ]
    )
    assert set(tree.problems) == {"second"}
    assert tree.queue_for("own") == "third"


def test_a_queue_without_a_name_is_reported_under_no_name() -> None:
    tree = QueueTree.build([{"metadata": {}, "spec": {}}, q("fine")])
    assert tree.problems == {"": "GpuQueue: metadata.name is missing"}


def test_the_default_queues_name_is_refused_with_why() -> None:
    tree = QueueTree.build([q(DEFAULT_QUEUE)])
    assert tree.problems[DEFAULT_QUEUE] == (
        f"GpuQueue {DEFAULT_QUEUE}: metadata.name: the name is taken by the default queue "
        "(set in the controller's settings)"
    )
