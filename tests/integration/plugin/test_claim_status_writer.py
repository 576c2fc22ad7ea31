"""The Idle condition written into a claim's status through the real client, against the
embedded API server: other entries kept, conflicts retried, gone claims and devices dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from dra_driver.device_status import idle_condition, idleness
from kubeletplugin.prepare.claims import KubernetesClaimSource
from kubeletplugin.telemetry.status_writer import ClaimStatusWriter, WriteOutcome
from tests.integration.plugin.harness import DRIVER, MERGE, create_claim, result

NODE = "node-status-writer"
SINCE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaims"


def _claim(api: client.ApiClient, name: str) -> dict[str, Any]:
    """As stored: the raw JSON (the client's deserialiser would rewrite the times)."""
    found = KubernetesClaimSource(api).get("default", name)
    assert found is not None
    return found


def _set_status(api: client.ApiClient, name: str, status: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, name, {"status": status}, _content_type=MERGE
    )


def test_the_condition_is_set_and_everything_else_kept(api: client.ApiClient) -> None:
    name, uid = create_claim(
        api,
        [
            result("gpu", "gpu-0", NODE),
            result("nic", "eth0", NODE, driver="net.example.com"),
        ],
        reserved=True,
    )
    other = {
        "driver": "net.example.com",
        "pool": NODE,
        "device": "eth0",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Configured",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    _set_status(api, name, {"devices": [other]})
    writer = ClaimStatusWriter(api, DRIVER)
    outcome, written = writer.set_condition(
        "default", name, uid, (DRIVER, NODE, "gpu-0"), idle_condition(True, SINCE, "idle")
    )
    assert outcome is WriteOutcome.WRITTEN
    stored = _claim(api, name)
    assert written is not None
    assert written["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert stored["status"]["devices"][0] == other
    assert stored["status"]["reservedFor"][0]["uid"] == name
    state = idleness(stored)[(DRIVER, NODE, "gpu-0")]
    assert (state.idle, state.since) == (True, SINCE)

    outcome, _ = writer.set_condition(
        "default", name, uid, (DRIVER, NODE, "gpu-0"), idle_condition(False, SINCE, "used")
    )
    assert outcome is WriteOutcome.WRITTEN
    devices = _claim(api, name)["status"]["devices"]
    assert len(devices) == 2
    assert [c["status"] for c in devices[1]["conditions"]] == ["False"]


def test_a_conflicting_write_reads_again_and_retries(
    api: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, uid = create_claim(api, [result("gpu", "gpu-1", NODE)], reserved=True)
    writer = ClaimStatusWriter(api, DRIVER)
    source = writer._source
    real_get = source.get
    interfered: list[str] = []

    def get_then_interfere(namespace: str, claim: str) -> dict[str, Any] | None:
        read = real_get(namespace, claim)
        if not interfered:  # someone else writes between our read and our write: a 409
            interfered.append(claim)
            _set_status(
                api, claim, {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
            )
        return read

    monkeypatch.setattr(source, "get", get_then_interfere)
    outcome, _ = writer.set_condition(
        "default", name, uid, (DRIVER, NODE, "gpu-1"), idle_condition(True, SINCE, "idle")
    )
    assert outcome is WriteOutcome.WRITTEN
    stored = _claim(api, name)
    assert stored["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "u"}]
    assert idleness(stored)[(DRIVER, NODE, "gpu-1")].idle


def test_a_gone_claim_or_device_is_dropped(api: client.ApiClient) -> None:
    writer = ClaimStatusWriter(api, DRIVER)
    condition = idle_condition(True, SINCE, "idle")
    outcome, claim = writer.set_condition(
        "default", "no-such-claim", "u", (DRIVER, NODE, "x"), condition
    )
    assert (outcome, claim) == (WriteOutcome.GONE, None)

    name, uid = create_claim(api, [result("gpu", "gpu-0", NODE)], reserved=True)
    outcome, _ = writer.set_condition("default", name, uid, (DRIVER, NODE, "gpu-1"), condition)
    assert outcome is WriteOutcome.GONE
    outcome, _ = writer.set_condition(
        "default", name, "other-uid", (DRIVER, NODE, "gpu-0"), condition
    )
    assert outcome is WriteOutcome.GONE
    assert "devices" not in _claim(api, name)["status"]
