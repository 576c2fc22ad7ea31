"""The rows of `dra-driver queues` from objects as they may come: trees, queues whose parent is
missing, cycles, malformed fields the controller refused, and no queues at all."""

from __future__ import annotations

from typing import Any

from dra_driver.cli.queue_table import render_table, tree_rows


def _queue(name: str, parent: str | None = None, **spec: Any) -> dict[str, Any]:
    if parent is not None:
        spec["parent"] = parent
    return {"metadata": {"name": name}, "spec": spec}


def _order(objects: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(row.name, row.depth) for row in tree_rows(objects)]


def test_depth_first_with_siblings_by_name() -> None:
    objects = [
        _queue("z-team", "org"),
        _queue("org"),
        _queue("a-team", "org"),
        _queue("a-sub", "z-team"),
        _queue("alone"),
    ]
    assert _order(objects) == [
        ("alone", 0),
        ("org", 0),
        ("a-team", 1),
        ("z-team", 1),
        ("a-sub", 2),
    ]


def test_a_queue_whose_parent_is_not_listed_is_a_root_that_still_names_it() -> None:
    rows = tree_rows([_queue("child", "gone"), _queue("grandchild", "child")])
    assert [(r.name, r.depth, r.parent) for r in rows] == [
        ("child", 0, "gone"),
        ("grandchild", 1, "child"),
    ]


def test_queues_in_a_cycle_are_listed_once_after_the_tree() -> None:
    objects = [_queue("b", "a"), _queue("a", "b"), _queue("c", "a"), _queue("root")]
    assert _order(objects) == [("root", 0), ("a", 0), ("b", 1), ("c", 1)]


def test_malformed_fields_show_as_missing_and_defaults_as_the_controller_reads_them() -> None:
    obj = {
        "metadata": {"name": "odd"},
        "spec": {
            "namespaces": "team",
            "guaranteed": "8",
            "limit": {"memory": "1Ti"},
            "weight": "x",
        },
        "status": {"pending": "many", "conditions": ["bad", {"type": "Other", "status": "True"}]},
    }
    (row,) = tree_rows([obj])
    assert row.cells() == ("odd", "-", "-", "-", "-/1Ti", "1", "Borrowed", "-", "-", "-", "-", "-")


def test_refused_queues_are_explained_below_the_table_in_tree_order() -> None:
    def refused(name: str, parent: str | None, why: str) -> dict[str, Any]:
        obj = _queue(name, parent)
        obj["status"] = {"conditions": [{"type": "Valid", "status": "False", "message": why}]}
        return obj

    ok = _queue("fine")
    ok["status"] = {"conditions": [{"type": "Valid", "status": "True", "message": "served"}]}
    text = render_table(tree_rows([refused("y", "x", "second"), refused("x", None, "first"), ok]))
    assert text.endswith("\n\nx: first\ny: second\n")
    assert "served" not in text


def test_no_queues_says_so() -> None:
    assert "No GpuQueues" in render_table([])
    assert "VALID" in render_table(tree_rows([_queue("q")]))


def test_a_refused_queue_shows_no_usage_left_from_when_it_was_served() -> None:
    obj = _queue("was-fine", guaranteed={"gpu": "2"})
    obj["status"] = {
        "used": {"gpu": "3", "memory": "240Gi"},
        "borrowed": {"gpu": "1", "memory": "80Gi"},
        "pending": 4,
        "conditions": [{"type": "Valid", "status": "False", "message": "now refused"}],
    }
    (row,) = tree_rows([obj])
    assert row.cells()[3:] == ("2/-", "-", "1", "Borrowed", "-", "-", "-", "-", "False")
    assert (row.used, row.borrowed, row.pending) == ({}, {}, None)


def test_idle_devices_count_for_a_queue_and_every_queue_above_it() -> None:
    objects = [
        _queue("org"),
        _queue("team", "org", namespaces=["t1", "t2"]),
        _queue("night", "team", namespaces=["n"]),
        _queue("other", namespaces=["o"]),
    ]
    rows = {r.name: r for r in tree_rows(objects, {"t1": 1, "t2": 2, "n": 4, "stray": 8})}
    assert {name: row.idle for name, row in rows.items()} == {
        "org": 7,
        "team": 7,
        "night": 4,
        "other": 0,
    }
    assert rows["team"].cells()[9] == "7"
    assert all(r.idle is None for r in tree_rows(objects))  # claims unread: unknown


def test_idle_devices_in_a_cycle_are_counted_once() -> None:
    rows = tree_rows([_queue("a", "b", namespaces=["x"]), _queue("b", "a")], {"x": 1})
    assert {r.name: r.idle for r in rows} == {"a": 1, "b": 1}
