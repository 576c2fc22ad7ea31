"""`spec.idleReclaim.after`: a Go-style duration above zero; every bad value is named with the
queue and the field."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.durations import format_duration
from dra_driver.durations import parse_go_duration as parse_duration
from dra_driver.queues import QueueSpecError, parse_queue


def obj(spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "team"}, "spec": spec}


@pytest.mark.parametrize(
    ("after", "seconds"),
    [("30m", 1800), ("1h30m", 5400), ("90s", 90), ("1.5h", 5400), ("500ms", 0.5), ("2h0m1s", 7201)],
)
def test_the_duration_is_read_in_seconds(after: str, seconds: float) -> None:
    spec = parse_queue(obj({"idleReclaim": {"after": after}}))
    assert spec.idle_reclaim_after_s == pytest.approx(seconds)


def test_without_idle_reclaim_idle_pods_are_never_reclaimed_within_the_guarantee() -> None:
    assert parse_queue(obj({})).idle_reclaim_after_s is None


@pytest.mark.parametrize(
    ("idle", "field", "says"),
    [
        ("30m", "spec.idleReclaim", "expected an object"),
        ({}, "spec.idleReclaim.after", "is required"),
        ({"after": "30m", "when": "x"}, "spec.idleReclaim.when", "unknown field"),
        ({"after": 30}, "spec.idleReclaim.after", "expected a duration"),
        ({"after": "30"}, "spec.idleReclaim.after", "'30' is not a duration"),
        ({"after": "thirty minutes"}, "spec.idleReclaim.after", "'thirty minutes' is not a"),
        ({"after": "-5m"}, "spec.idleReclaim.after", "'-5m' is not a duration"),
        ({"after": ""}, "spec.idleReclaim.after", "'' is not a duration"),
        ({"after": "0s"}, "spec.idleReclaim.after", "must be above 0, got '0s'"),
        ({"after": "0"}, "spec.idleReclaim.after", "must be above 0"),
        ({"after": "1d"}, "spec.idleReclaim.after", "'1d' is not a duration"),
    ],
)
def test_a_bad_idle_reclaim_is_named_with_the_queue_and_field(
    idle: Any, field: str, says: str
) -> None:
    with pytest.raises(QueueSpecError) as err:
        parse_queue(obj({"idleReclaim": idle}))
    assert str(err.value).startswith(f"GpuQueue team: {field}: {says}"), str(err.value)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (45, "45s"), (5400, "1h30m"), (7201, "2h1s"), (61.9, "1m1s")]
)
def test_durations_are_shown_short(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(int(seconds))
