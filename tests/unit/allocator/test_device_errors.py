"""A malformed device fails the snapshot with the same words, and in the same order, whatever
the parse does to be fast: the first error in pool order (pools by driver and name, slices by
name, devices as listed) wins, a pool's counter sets are checked before its devices, and
slices of an older generation are never read for errors."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.allocator.errors import InputError
from dra_driver.allocator.snapshot import ClusterSnapshot
from tests.unit.allocator.objects import DRV, dev, device_class, slice_

GPU_CLASS = device_class("gpu", f'device.driver == "{DRV}"')
WHERE = "ResourceSlice s: device g"


def _build(*slices: dict[str, Any]) -> ClusterSnapshot:
    return ClusterSnapshot.build(list(slices), [GPU_CLASS])


def _counters(*names: str) -> list[dict[str, Any]]:
    return [{"name": "set", "counters": {n: {"value": "8"} for n in names}}]


def _consumes(counters: Any) -> list[dict[str, Any]]:
    return [{"counterSet": "set", "counters": counters}]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(
            {"consumesCounters": {"set": 1}},
            f"{WHERE}.consumesCounters: expected a list",
            id="consumes-not-a-list",
        ),
        pytest.param(
            {"consumesCounters": ["x"]},
            f"{WHERE}.consumesCounters[0]: expected an object, got str",
            id="consumes-entry",
        ),
        pytest.param(
            {"consumesCounters": [{"counters": {}}]},
            f"{WHERE}.consumesCounters[0].counterSet: expected a non-empty string, got None",
            id="counter-set-name",
        ),
        pytest.param(
            {"consumesCounters": [{"counterSet": "set", "counters": [1]}]},
            f"{WHERE}.consumesCounters[0].counters: expected an object, got list",
            id="counters-not-a-map",
        ),
        pytest.param(
            {"consumesCounters": _consumes({"mem": 3})},
            f"{WHERE}.consumesCounters[0].counters[mem]: expected an object, got int",
            id="counter-not-a-map",
        ),
        pytest.param(
            {"consumesCounters": _consumes({"mem": {"value": "lots"}})},
            f"{WHERE}.consumesCounters[0].counters[mem].value: 'lots' is not a quantity",
            id="counter-quantity",
        ),
        pytest.param(
            {"consumesCounters": _consumes({"mem": {"value": True}})},
            f"{WHERE}.consumesCounters[0].counters[mem].value: expected a quantity, got True",
            id="counter-boolean",
        ),
        pytest.param(
            {"taints": [{"key": "k", "effect": "NoSchedule"}, "x"]},
            f"{WHERE}.taints[1]: expected an object, got str",
            id="taint",
        ),
        pytest.param(
            {"consumesCounters": ["x"], "taints": ["x"]},
            f"{WHERE}.consumesCounters[0]: expected an object, got str",
            id="counters-before-taints",
        ),
    ],
)
def test_a_malformed_field_is_named_with_its_device(fields: dict[str, Any], message: str) -> None:
    raw = {**dev("g"), **fields}
    with pytest.raises(InputError) as raised:
        _build(slice_("s", [raw], counters=_counters("mem")))
    assert str(raised.value).startswith(message)


def test_a_device_without_a_name_is_named_by_its_position() -> None:
    with pytest.raises(InputError) as raised:
        _build(slice_("s", [dev("a"), {"attributes": {}}]))
    assert str(raised.value) == (
        "ResourceSlice s: spec.devices[1].name: expected a non-empty string, got None"
    )


def test_taints_that_are_not_a_list_fail_as_python_does() -> None:
    with pytest.raises(TypeError, match="'int' object is not iterable"):
        _build(slice_("s", [{**dev("g"), "taints": 5}]))


def test_a_device_that_is_not_an_object_fails_as_its_slice_is_read() -> None:
    # The slice is read before the next slice's header is looked at.
    broken_header = slice_("b", [dev("x")])
    del broken_header["spec"]["driver"]
    with pytest.raises(InputError) as raised:
        _build(slice_("a", [dev("x"), "g"]), broken_header)
    assert str(raised.value) == "ResourceSlice a: spec.devices[1]: expected an object, got str"


def test_every_slice_header_is_checked_before_any_device_field() -> None:
    broken_header = slice_("b", [dev("x")], node="node-b")
    del broken_header["spec"]["driver"]
    with pytest.raises(InputError) as raised:
        _build(slice_("a", [{"attributes": {}}]), broken_header)
    assert str(raised.value) == (
        "ResourceSlice b: spec.driver: expected a non-empty string, got None"
    )


def test_the_first_pool_in_order_reports_first() -> None:
    late = slice_("a-slice", [{**dev("late"), "taints": ["x"]}], node="node-z", pool="zz")
    early = slice_("z-slice", [{**dev("early"), "taints": ["x"]}], node="node-a", pool="aa")
    with pytest.raises(InputError) as raised:
        _build(late, early)
    assert str(raised.value) == (
        "ResourceSlice z-slice: device early.taints[0]: expected an object, got str"
    )


def test_within_a_pool_slices_report_in_name_order() -> None:
    second = slice_("s2", [{**dev("g2"), "taints": ["x"]}], pool="p", count=2)
    first = slice_("s1", [{**dev("g1"), "taints": ["x"]}], pool="p", count=2)
    with pytest.raises(InputError) as raised:
        _build(second, first)
    assert str(raised.value).startswith("ResourceSlice s1: device g1.taints[0]")


def test_a_pool_checks_its_counter_sets_before_its_devices() -> None:
    bad_set = slice_("s", [{**dev("g"), "taints": ["x"]}], counters=[{"counters": {}}])
    with pytest.raises(InputError) as raised:
        _build(bad_set)
    assert str(raised.value) == (
        "ResourceSlice s: spec.sharedCounters[0].name: expected a non-empty string, got None"
    )


def test_an_older_generation_is_never_read_for_errors() -> None:
    old = slice_("old", [{"attributes": {}}, {**dev("g"), "taints": 5}], pool="p", generation=1)
    new = slice_("new", [dev("g")], pool="p", generation=2)
    snapshot = _build(old, new)
    assert [d.name for d in snapshot.devices] == ["g"]


def test_a_missing_counter_makes_the_pool_invalid_rather_than_failing() -> None:
    raw = {**dev("g"), "consumesCounters": _consumes({"other": {"value": "1"}})}
    snapshot = _build(slice_("s", [raw], counters=_counters("mem")))
    assert snapshot.pools[0].invalid == (
        f"pool {DRV}/node-a is invalid: device g consumes counter set/other, "
        "which the pool does not define"
    )


def test_a_node_named_by_any_device_is_a_node_of_the_snapshot() -> None:
    # Even where the slice binds its devices itself, and even for a device that fails later.
    named = {**dev("g"), "nodeName": "node-x"}
    snapshot = _build(slice_("s", [named], node="node-a"))
    assert snapshot.node_names() == ["node-a", "node-x"]
    assert snapshot.devices[0].node_name == "node-a"
    old = slice_("old", [{"nodeName": "node-y"}], pool="p", generation=1)
    new = slice_("new", [dev("g")], pool="p", generation=2)
    assert "node-y" in _build(old, new).node_names()
