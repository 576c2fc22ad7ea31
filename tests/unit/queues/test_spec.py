"""GpuQueue specs read into numbers; every bad field is named with its queue."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.queues import (
    LENDING_ALLOWED,
    LENDING_NEVER,
    RECLAIM_BORROWED,
    RECLAIM_NEVER,
    Amounts,
    Bounds,
    QueueSpecError,
    parse_queue,
)
from dra_driver.queues.spec import format_gpu, format_memory, pod_priority

GI = 2**30


def obj(spec: Any, name: str = "team") -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": "2025-01-02T03:04:05Z"}, "spec": spec}


def test_a_full_spec_is_read_into_numbers() -> None:
    spec = parse_queue(
        obj(
            {
                "namespaces": ["a", "b-2"],
                "parent": "org",
                "guaranteed": {"gpu": "2", "memory": "80Gi"},
                "limit": {"gpu": 4.5, "memory": "160Gi"},
                "weight": 3,
                "reclaim": RECLAIM_NEVER,
                "lending": LENDING_NEVER,
            }
        )
    )
    assert spec.name == "team" and spec.namespaces == ("a", "b-2") and spec.parent == "org"
    assert (spec.guaranteed.gpu, spec.guaranteed.memory) == (2.0, 80 * GI)
    assert (spec.limit.gpu, spec.limit.memory) == (4.5, 160 * GI)
    assert spec.weight == 3.0 and spec.reclaim == RECLAIM_NEVER and spec.lending == LENDING_NEVER
    assert spec.created == "2025-01-02T03:04:05Z" and not spec.last


def test_an_empty_spec_has_no_bounds_weight_one_and_reclaims_borrowed() -> None:
    spec = parse_queue(obj(None))
    assert spec.guaranteed.is_empty() and spec.limit.is_empty()
    assert spec.weight == 1.0 and spec.reclaim == RECLAIM_BORROWED and spec.parent is None
    assert spec.lending == LENDING_ALLOWED


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ("nope", "spec", "expected an object"),
        ({"namespaces": "a"}, "spec.namespaces", "expected a list"),
        (
            {"namespaces": ["ok", "Not_A_Name"]},
            "spec.namespaces[1]",
            "'Not_A_Name' is not a namespace name",
        ),
        ({"namespaces": ["x" * 64]}, "spec.namespaces[0]", f"'{'x' * 64}' is not a namespace"),
        ({"namespaces": [7]}, "spec.namespaces[0]", "7 is not a namespace name"),
        ({"namespaces": ["a", "a"]}, "spec.namespaces", "a namespace is listed twice"),
        ({"parent": ""}, "spec.parent", "expected the name"),
        ({"parent": 3}, "spec.parent", "expected the name"),
        ({"parent": "team"}, "spec.parent", "a queue cannot be its own parent"),
        ({"guaranteed": ["1"]}, "spec.guaranteed", "expected an object"),
        (
            {"guaranteed": {"cpu": "1"}},
            "spec.guaranteed.cpu",
            "unknown resource; a queue counts gpu and memory",
        ),
        ({"guaranteed": {"gpu": "lots"}}, "spec.guaranteed.gpu", ""),
        ({"guaranteed": {"gpu": True}}, "spec.guaranteed.gpu", "expected a quantity"),
        ({"guaranteed": {"memory": "-1Gi"}}, "spec.guaranteed.memory", "must not be negative"),
        ({"limit": "4"}, "spec.limit", "expected an object"),
        ({"limit": {"memory": [1]}}, "spec.limit.memory", "expected a quantity"),
        ({"limit": {"gpu": -2}}, "spec.limit.gpu", "must not be negative, got -2"),
        (
            {"guaranteed": {"gpu": 4}, "limit": {"gpu": 2}},
            "spec.limit.gpu",
            "is below the guarantee of the same resource",
        ),
        (
            {"guaranteed": {"memory": "2Gi"}, "limit": {"memory": "1Gi"}},
            "spec.limit.memory",
            "is below the guarantee of the same resource",
        ),
        ({"weight": "heavy"}, "spec.weight", "expected a number"),
        ({"weight": True}, "spec.weight", "expected a number"),
        ({"weight": 0}, "spec.weight", "must be above 0 and at most 10000, got 0"),
        ({"weight": -1}, "spec.weight", "must be above 0"),
        ({"weight": 10_001}, "spec.weight", "must be above 0 and at most 10000"),
        ({"weight": float("nan")}, "spec.weight", "must be above 0"),
        ({"reclaim": "Sometimes"}, "spec.reclaim", "must be Borrowed or Never, got 'Sometimes'"),
        ({"lending": "Always"}, "spec.lending", "must be Allowed or Never, got 'Always'"),
        ({"lending": False}, "spec.lending", "must be Allowed or Never, got False"),
        ({"lending": None}, "spec.lending", "must be Allowed or Never, got None"),
    ],
)
def test_every_bad_field_is_named_with_the_queue(spec: Any, field: str, says: str) -> None:
    with pytest.raises(QueueSpecError) as err:
        parse_queue(obj(spec))
    message = str(err.value)
    # The message goes on with what is wrong, from its first word.
    assert message.startswith(f"GpuQueue team: {field}: {says}"), message


@pytest.mark.parametrize("meta", [None, {}, {"name": ""}, {"name": 5}])
def test_a_queue_without_a_name_is_refused(meta: Any) -> None:
    with pytest.raises(QueueSpecError, match=r"^GpuQueue: metadata\.name is missing"):
        parse_queue({"metadata": meta, "spec": {}})


def test_limit_equal_to_the_guarantee_is_fine() -> None:
    spec = parse_queue(obj({"guaranteed": {"gpu": 2}, "limit": {"gpu": 2}}))
    assert spec.limit.gpu == spec.guaranteed.gpu == 2.0


def test_amounts_subtract_both_resources() -> None:
    assert Amounts(3.0, 80 * GI) - Amounts(1.0, 30 * GI) == Amounts(2.0, 50 * GI)


def test_a_residue_up_to_the_tolerance_is_zero() -> None:
    # Seven sevenths taken back from a whole can leave a rounding residue; up to the tolerance
    # it counts as nothing, in either resource.
    assert Amounts(1e-9, 1e-9).is_zero()
    assert not Amounts(1e-8, 0).is_zero() and not Amounts(0, 1e-8).is_zero()


def test_the_deficit_is_what_is_missing_per_bounded_resource() -> None:
    bounds = Bounds(gpu=4.0, memory=100 * GI)
    assert bounds.deficit(Amounts(1.0, 30 * GI)) == Amounts(3.0, 70 * GI)
    assert bounds.deficit(Amounts(4.0, 100 * GI)) == Amounts()  # reached: nothing lacks
    assert bounds.deficit(Amounts(6.0, 200 * GI)) == Amounts()  # past it: nothing lacks
    # An unbounded resource lacks nothing, whatever is held of it.
    assert Bounds().deficit(Amounts(0.5, 0.5)) == Amounts()
    assert Bounds(gpu=2.0).deficit(Amounts(0.5, 0.5)) == Amounts(1.5, 0.0)


@pytest.mark.parametrize(
    ("pod", "priority"),
    [
        ({"spec": {"priority": 7}}, 7),
        ({"spec": {"priority": -3}}, -3),
        ({"spec": {}}, 0),
        ({"spec": None}, 0),
        ({}, 0),
        ({"spec": {"priority": True}}, 0),
        ({"spec": {"priority": "5"}}, 0),
    ],
)
def test_a_pods_priority_is_its_resolved_integer_or_zero(pod: Any, priority: int) -> None:
    assert pod_priority(pod) == priority


@pytest.mark.parametrize(
    ("value", "text"),
    [(2.0, "2"), (0.0, "0"), (1.5, "1.50"), (0.25, "0.25"), (0.999, "1"), (1.004, "1")],
)
def test_gpus_are_shown_whole_or_to_two_places(value: float, text: str) -> None:
    assert format_gpu(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(80 * GI, "80Gi"), (0.0, "0Gi"), (1.5 * GI, "1536Mi"), (300 * 2**20, "300Mi")],
)
def test_memory_is_shown_in_gi_when_whole_else_in_mi(value: float, text: str) -> None:
    assert format_memory(value) == text


def test_within_the_tolerance_of_a_bound_is_at_the_bound() -> None:
    assert Bounds(gpu=0.0).exceeded(Amounts(1e-9, 0)) == []
    assert Bounds(gpu=0.0).exceeded(Amounts(1e-8, 0)) == ["gpu"]
    assert not Bounds(gpu=1.0).short_of(Amounts(1 - 1e-9, 0))
    assert Bounds(gpu=1.0).short_of(Amounts(1 - 1e-8, 0))


def test_a_bad_quantity_says_what_a_quantity_looks_like() -> None:
    with pytest.raises(QueueSpecError, match='"lots" is not a quantity; write digits'):
        parse_queue(obj({"guaranteed": {"gpu": "lots"}}))


def test_zero_fractions_and_the_longest_namespace_name_are_fine() -> None:
    spec = parse_queue(
        obj({"namespaces": ["x" * 63], "guaranteed": {"gpu": 0}, "limit": {"gpu": "500m"}})
    )
    assert spec.namespaces == ("x" * 63,)
    assert (spec.guaranteed.gpu, spec.limit.gpu) == (0.0, 0.5)


def test_the_heaviest_weight_is_fine_and_a_missing_creation_time_is_empty() -> None:
    spec = parse_queue({"metadata": {"name": "team"}, "spec": {"weight": 10_000}})
    assert spec.weight == 10_000.0
    assert spec.created == ""
