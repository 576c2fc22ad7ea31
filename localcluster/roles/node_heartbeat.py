"""Kubelet's heartbeat for a node of the local cluster on the real control plane.

kube-controller-manager's node lifecycle controller marks a node whose Lease in
`kube-node-lease` has not been renewed within its grace period (50 s) as `Unknown` and taints it
`node.kubernetes.io/unreachable`, after which kube-scheduler places nothing there and pods are
evicted. Kubelet renews that Lease every 10 s; this does the same for the nodes the node agents
stand for. The embedded API server runs no such controller, so it needs none.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Final

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = structlog.get_logger(__name__)

NODE_LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_SECONDS: Final = 40
RENEW_S: Final = 10.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def renew(api: client.ApiClient, node_name: str, node_uid: str) -> None:
    """Create the node's Lease, or move its renew time to now."""
    leases = client.CoordinationV1Api(api)
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node_name,
            "namespace": NODE_LEASE_NAMESPACE,
            # As kubelet does: the Lease goes with its Node.
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
        },
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _now(),
        },
    }
    try:
        leases.patch_namespaced_lease(
            node_name, NODE_LEASE_NAMESPACE, {"spec": {"renewTime": _now()}}
        )
    except ApiException as error:
        if error.status != 404:
            raise
        leases.create_namespaced_lease(NODE_LEASE_NAMESPACE, body)  # type: ignore[arg-type]


async def run(api: client.ApiClient, node_name: str, stop: asyncio.Event) -> None:
    """Renew every 10 s until `stop`; a failed renewal is logged and tried again."""
    node = await asyncio.to_thread(client.CoreV1Api(api).read_node, node_name)
    uid = str(node.metadata.uid if node.metadata else "")
    while not stop.is_set():
        try:
            await asyncio.to_thread(renew, api, node_name, uid)
        except Exception as error:  # the next renewal tries again, as kubelet's does
            log.warning("node lease renewal failed", node=node_name, error=str(error))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RENEW_S)
