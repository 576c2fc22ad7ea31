"""The embedded tier's device-taint eviction decides as kube-controller-manager's
`claimEvictionTime` does: an untolerated NoExecute taint evicts at once, a toleration without
seconds never, ones with seconds the smallest of them after the taint's timeAdded, and a
toleration of another key, value or effect (an empty one included) not at all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from localcluster.roles.device_taint_eviction import _evict_at

ADDED = "2026-12-02T10:00:00Z"
TAINT = {"key": "gpu.dra-driver.dev/owner-busy", "value": "true", "effect": "NoExecute"}
DEVICE = ("gpu.dra-driver.dev", "node-1", "gpu-0-lent")


def _claim(*tolerations: dict[str, Any]) -> dict[str, Any]:
    result = {"driver": DEVICE[0], "pool": DEVICE[1], "device": DEVICE[2], "request": "r"}
    if tolerations:
        result["tolerations"] = list(tolerations)
    return {"status": {"allocation": {"devices": {"results": [result]}}}}


TAINTS = {DEVICE: [{**TAINT, "timeAdded": ADDED}]}
AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def test_an_untolerated_taint_evicts_from_when_it_was_added() -> None:
    assert _evict_at(_claim(), TAINTS) == AT


def test_a_toleration_without_seconds_keeps_the_pod() -> None:
    held = {"key": TAINT["key"], "operator": "Exists", "effect": "NoExecute"}
    limited = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    assert _evict_at(_claim(held), TAINTS) is None
    assert _evict_at(_claim(limited, held), TAINTS) is None


def test_a_toleration_with_seconds_puts_the_eviction_off() -> None:
    held = {
        "key": TAINT["key"],
        "operator": "Equal",
        "value": "true",
        "effect": "NoExecute",
        "tolerationSeconds": 30,
    }
    shorter = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
    assert _evict_at(_claim(held), TAINTS) == AT + timedelta(seconds=30)
    assert _evict_at(_claim(held, shorter), TAINTS) == AT + timedelta(seconds=10)


def test_a_toleration_of_another_key_value_or_effect_does_not_count() -> None:
    other_key = {"key": "something-else", "operator": "Exists", "effect": "NoExecute"}
    other_value = {"key": TAINT["key"], "value": "false", "effect": "NoExecute"}
    any_effect = {"key": TAINT["key"], "operator": "Exists"}  # upstream wants NoExecute named
    assert _evict_at(_claim(other_key), TAINTS) == AT
    assert _evict_at(_claim(other_value), TAINTS) == AT
    assert _evict_at(_claim(any_effect), TAINTS) == AT


def test_a_device_without_taints_is_left_alone() -> None:
    assert _evict_at(_claim(), {}) is None
