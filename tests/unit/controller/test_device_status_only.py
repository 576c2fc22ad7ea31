"""Which claim writes are a plugin's device conditions only: those the controller keeps in its
view without deciding waiting pods again."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.view import device_status_only

ENTRY = {"driver": "d", "pool": "p", "device": "gpu-0"}


def claim() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "resourceVersion": "7",
            "finalizers": ["f"],
            "managedFields": [{"manager": "a"}],
        },
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {
            "allocation": {"devices": {"results": [ENTRY]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        },
    }


def with_idle(obj: dict[str, Any], status: str = "True") -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["metadata"]["resourceVersion"] = "8"
    changed["metadata"]["managedFields"] = [{"manager": "plugin"}]
    changed["status"]["devices"] = [{**ENTRY, "conditions": [{"type": "Idle", "status": status}]}]
    return changed


def test_a_new_idle_condition_is_a_device_status_change_only() -> None:
    old = claim()
    assert device_status_only(old, with_idle(old))
    assert device_status_only(with_idle(old), with_idle(with_idle(old), "False"))


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["status"].pop("allocation"),
        lambda c: c["status"].update(reservedFor=None),
        lambda c: c["metadata"].update(finalizers=[]),
        lambda c: c["metadata"].update(deletionTimestamp="2025-01-01T00:00:00Z"),
        lambda c: c["spec"].update(devices={}),
    ],
)
def test_a_change_a_decision_reads_is_not(change: Any) -> None:
    old = claim()
    new = with_idle(old)
    change(new)
    assert not device_status_only(old, new)


def test_no_change_or_no_old_claim_is_not_a_device_status_change() -> None:
    old = claim()
    same = copy.deepcopy(old)
    same["metadata"]["resourceVersion"] = "8"
    assert not device_status_only(old, same)
    assert not device_status_only(None, with_idle(old))
