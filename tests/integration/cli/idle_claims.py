"""Allocated claims with the `Idle` conditions a kubelet plugin would write, created through
the API for the `queues` and `usage` command tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.device_status import idle_condition

DRIVER = DEFAULT_DRIVER_NAME
GROUP, VERSION = "resource.k8s.io", "v1"


def allocated_claim(
    api: client.ApiClient,
    namespace: str,
    name: str,
    node: str,
    devices: dict[str, bool | None],
    pods: tuple[str, ...] = (),
    idle_for: timedelta = timedelta(hours=2),
    driver: str = DRIVER,
    device_class: str = "gpu.dra-driver.dev",
) -> None:
    """Claim `namespace/name` allocated `devices` (device → Idle True, False, or no condition)
    on `node`'s pool, reserved for `pods`; a borrower asks for `gpu-opportunistic.dra-driver.dev`
    as `device_class`."""
    objects = client.CustomObjectsApi(api)
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    except client.ApiException as err:
        if err.status != 409:
            raise
    request = {"deviceClassName": device_class, "count": len(devices)}
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", body
    )
    since = datetime.now(UTC) - idle_for
    results = [{"request": "gpu", "driver": driver, "pool": node, "device": d} for d in devices]
    entries = [
        {
            "driver": driver,
            "pool": node,
            "device": d,
            "conditions": [idle_condition(idle, since, "test")],
        }
        for d, idle in devices.items()
        if idle is not None
    ]
    status: dict[str, Any] = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods] or None,
    }
    if entries:
        status["devices"] = entries
    created["status"] = status
    objects.replace_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "resourceclaims", name, created
    )
