"""The node agent's reading of the fake-utilization annotation: the forms over time, and a bad
value refused with whose it is (the Event a pod's author sees is this message)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.backends.fake.load_curve import VALID_FORMS, LoadCurve
from localcluster.roles.node_agent import FAKE_UTILIZATION_ANNOTATION, fake_utilization
from tests.support import objects


def _pod(value: object) -> dict[str, Any]:
    pod = objects.pod("p")
    # Set outright: a value that is not text can only come from a caller's own dict.
    pod["metadata"]["annotations"] = {FAKE_UTILIZATION_ANNOTATION: value}
    return pod


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("80", LoadCurve.constant(80)),
        ("0", LoadCurve.constant(0)),
        ("0:5,20:80", LoadCurve.from_steps([(0, 5), (20, 80)])),
        (
            "daily:peak=80,valley=5,day=120,phase=0.25",
            LoadCurve.daily(peak=80, valley=5, day_s=120, phase=0.25),
        ),
    ],
)
def test_every_form_reads_as_a_curve(value: str, expected: LoadCurve) -> None:
    assert fake_utilization(_pod(value)) == expected


def test_zero_is_still_no_load() -> None:
    curve = fake_utilization(_pod("0"))
    assert curve is not None and curve.is_zero


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("5:80", "the first step must start at 0 s, not 5"),
        ("0:5,20:80,10:0", "step offsets must increase: 10 after 20"),
        ("daily:peak=80,day=120", "daily curve lacks valley"),
        ("101", "percent must be from 0 to 100, got 101"),
        (80, "int is not text"),
    ],
)
def test_a_bad_value_names_the_pod_the_annotation_the_value_and_the_valid_forms(
    value: object, problem: str
) -> None:
    with pytest.raises(ValueError) as refused:
        fake_utilization(_pod(value))
    assert str(refused.value) == (
        f"pod default/p: annotation {FAKE_UTILIZATION_ANNOTATION}={value!r}: {problem}; "
        f"expected {VALID_FORMS}"
    )
