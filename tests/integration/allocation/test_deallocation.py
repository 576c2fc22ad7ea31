"""Claims the controller allocated are released when their last user is gone; others are not."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.integration.allocation.harness import (
    FINALIZER,
    GROUP,
    VERSION,
    Cluster,
    claim,
    eventually,
    pod,
    start_controller,
)


def drop_reservation(cluster: Cluster, name: str) -> None:
    """What the resourceclaim controller does once a pod is gone."""
    current = cluster.get_claim(name)
    body: dict[str, Any] = {
        "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
        "status": {"reservedFor": None},
    }
    cluster.objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "resourceclaims", name, body
    )


async def test_claim_is_deallocated_after_its_pod_is_deleted(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1)
    cluster.create_claim(claim("short-lived", kind="mig"))
    cluster.create_pod(pod("job", ["short-lived"]))
    cluster.create_claim(claim("by-scheduler"))
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("job"), what="allocation")
        # A claim the kube-scheduler allocated (no finalizer of ours) with no users.
        scheduler_claim = cluster.get_claim("by-scheduler")
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            "default",
            "resourceclaims",
            "by-scheduler",
            {"status": {"allocation": cluster.get_claim("short-lived")["status"]["allocation"]}},
        )
        assert scheduler_claim is not None
        cluster.core.delete_namespaced_pod("job", "default")
        drop_reservation(cluster, "short-lived")
        await eventually(
            lambda: "allocation" not in (cluster.get_claim("short-lived").get("status") or {}),
            what="deallocation",
        )
        await eventually(
            lambda: (
                FINALIZER
                not in (cluster.get_claim("short-lived")["metadata"].get("finalizers") or [])
            ),
            what="the finalizer to go",
        )
        assert cluster.get_claim("by-scheduler")["status"]["allocation"]
    finally:
        await running.shutdown()


async def test_claim_in_use_by_a_second_pod_stays(cluster: Cluster, api: client.ApiClient) -> None:
    cluster.add_nodes(1)
    cluster.create_claim(claim("shared"))
    cluster.create_pod(pod("first", ["shared"]))
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("first"), what="first pod")
        allocation = cluster.get_claim("shared")["status"]["allocation"]
        cluster.create_pod(pod("second", ["shared"]))
        await eventually(lambda: not cluster.gated("second"), what="second pod")
        reserved = cluster.get_claim("shared")["status"]["reservedFor"]
        assert sorted(r["name"] for r in reserved) == ["first", "second"]
        cluster.core.delete_namespaced_pod("first", "default")
        current = cluster.get_claim("shared")
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            "default",
            "resourceclaims",
            "shared",
            {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {"reservedFor": [r for r in reserved if r["name"] == "second"]},
            },
        )
        await eventually(lambda: running.daemon.reconciler.passes >= 3, what="more passes")
    finally:
        await running.shutdown()
    assert cluster.get_claim("shared")["status"]["allocation"] == allocation


async def test_deleted_claim_is_released_and_goes(cluster: Cluster, api: client.ApiClient) -> None:
    cluster.add_nodes(1)
    cluster.create_claim(claim("doomed"))
    cluster.create_pod(pod("user", ["doomed"]))
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("user"), what="allocation")
        cluster.core.delete_namespaced_pod("user", "default")
        drop_reservation(cluster, "doomed")
        cluster.objects.delete_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", "doomed"
        )

        def gone() -> bool:
            return all(c["metadata"]["name"] != "doomed" for c in cluster.claims())

        await eventually(gone, what="the claim to be deleted once released")
    finally:
        await running.shutdown()
