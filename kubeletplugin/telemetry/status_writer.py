"""Writing one device's `Idle` condition into its claim's `status.devices`.

The write is a read-modify-write of the status subresource carrying the resourceVersion that
was read, so a concurrent writer (the scheduler, another driver, kubelet) is never overwritten:
a conflict reads the claim again and retries, a few times. Other drivers' entries and the other
conditions of our own entries are kept as they are (`dra_driver.device_status.with_condition`).
A claim that is gone, was re-created under the same name, or no longer holds the device needs no
condition, and the write is dropped.

The claim is read and written as plain JSON (`_preload_content=False`), as prepare reads it.
The PUT to `resourceclaims/<name>/status` goes through the custom-objects method, not
`ResourceV1Api.replace_namespaced_resource_claim_status`: that one validates its body into the
client's typed model first, which drops every field this client version does not know (the write
would then erase them) and rewrites the condition times in another format. Either way it is a
public client method, so the chart's RBAC stays derivable from the code
(tests/deploy/api_calls.py).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any

import structlog
from kubernetes import client

from dra_driver.device_status import DeviceKey, allocated_devices, with_condition
from kubeletplugin.prepare.claims import GROUP, PLURAL, VERSION, KubernetesClaimSource

log = structlog.get_logger(__name__)

MAX_CONFLICTS = 5
"""Conflicting writes in a row before the write is given up for this round (the sampler tries
again at its next check, since what it wrote still differs from what it observed)."""


class WriteOutcome(enum.Enum):
    WRITTEN = "written"
    GONE = "gone"  # the claim or the device's allocation is gone: nothing to write
    CONFLICTED = "conflicted"  # MAX_CONFLICTS conflicts in a row; try again later


class ClaimStatusWriter:
    def __init__(self, api: client.ApiClient, driver_name: str) -> None:
        self._source = KubernetesClaimSource(api)
        self._objects = client.CustomObjectsApi(api)
        self._driver = driver_name

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._source.get(namespace, name)

    def set_condition(
        self, namespace: str, name: str, uid: str, key: DeviceKey, condition: Mapping[str, Any]
    ) -> tuple[WriteOutcome, dict[str, Any] | None]:
        """Set `condition` on the device `key` of the claim; the outcome and the claim as last
        read or written (None when it is gone)."""
        for _ in range(MAX_CONFLICTS):
            claim = self._source.get(namespace, name)
            if claim is None or (claim.get("metadata") or {}).get("uid") != uid:
                return WriteOutcome.GONE, None
            if key not in allocated_devices(claim, self._driver):
                return WriteOutcome.GONE, claim
            status = dict(claim.get("status") or {})
            status["devices"] = with_condition(status.get("devices") or [], key, condition)
            body = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": claim["metadata"],
                "spec": claim.get("spec") or {},
                "status": status,
            }
            try:
                response: Any = self._objects.replace_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, PLURAL, name, body, _preload_content=False
                )
            except client.ApiException as err:
                if err.status == 409:
                    continue
                if err.status == 404:
                    return WriteOutcome.GONE, None
                raise
            written = json.loads(response.data)
            return WriteOutcome.WRITTEN, written if isinstance(written, dict) else claim
        return WriteOutcome.CONFLICTED, None


__all__ = ["MAX_CONFLICTS", "ClaimStatusWriter", "WriteOutcome"]
