"""The gate protocol against the embedded API server: allocate, reserve, finalize, ungate."""

from __future__ import annotations

from kubernetes import client

from controller.reconciler import condition_type
from dra_driver.allocator.result import allocation_node
from tests.integration.allocation.harness import (
    DRIVER,
    FINALIZER,
    GATE,
    Cluster,
    claim,
    eventually,
    pod,
    start_controller,
)


async def test_gated_pod_gets_devices_and_loses_its_gate(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(2)
    cluster.create_claim(
        claim(
            "train",
            count=2,
            constraints=[{"requests": ["req"], "matchAttribute": f"{DRIVER}/nvlinkDomain"}],
        )
    )
    cluster.create_pod(pod("trainer", ["train"]))
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("trainer"), what="the gate to be lifted")
        registry = running.daemon.controller_metrics.registry
        # The gate is seen gone before the controller has counted the lift: wait for the count.
        await eventually(
            lambda: (
                registry.get_sample_value("dra_controller_allocation_seconds_count") == 1
                and registry.get_sample_value("dra_controller_pending_pods") == 0
            ),
            what="the allocation latency to be observed",
        )
        assert registry.get_sample_value("dra_controller_allocations_total") == 1
    finally:
        await running.shutdown()
    written = cluster.get_claim("train")
    allocation = written["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert len(results) == 2
    assert allocation_node(allocation) in ("node-1", "node-2")
    assert FINALIZER in written["metadata"]["finalizers"]
    uid = cluster.get_pod("trainer")["metadata"]["uid"]
    assert written["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": uid}]


async def test_ungated_pods_are_left_to_the_scheduler(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1)
    cluster.create_claim(claim("plain"))
    cluster.create_pod(pod("plain-pod", ["plain"], gated=False))
    cluster.create_claim(claim("mine"))
    cluster.create_pod(pod("mine-pod", ["mine"]))
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("mine-pod"), what="the gated pod")
    finally:
        await running.shutdown()
    assert "allocation" not in (cluster.get_claim("plain").get("status") or {})
    assert cluster.get_claim("mine")["status"]["allocation"]


async def test_pod_that_cannot_fit_keeps_its_gate_and_says_why(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1)
    cluster.create_claim(claim("too-big", count=9))
    cluster.create_pod(pod("greedy", ["too-big"]))
    running = await start_controller(api)
    try:
        await eventually(
            lambda: any(e["reason"] == "FailedAllocation" for e in cluster.events_for("greedy")),
            what="a FailedAllocation event",
        )
        event = next(e for e in cluster.events_for("greedy") if e["reason"] == "FailedAllocation")
        assert "node-1" in event["message"]
        assert "needs 9 device(s)" in event["message"]
        await eventually(
            lambda: any(
                c["type"] == condition_type(DRIVER) and c["status"] == "False"
                for c in cluster.get_pod("greedy").get("status", {}).get("conditions") or []
            ),
            what="the pod condition",
        )
        assert cluster.gated("greedy")
        assert "allocation" not in (cluster.get_claim("too-big").get("status") or {})
        # More GPUs arrive: the waiting pod is retried and fits now.
        cluster.add_nodes(1, gpus="H100-SXM5-80GB:16", prefix="big")
        await eventually(lambda: not cluster.gated("greedy"), what="the retry after new slices")
    finally:
        await running.shutdown()
    assert allocation_node(cluster.get_claim("too-big")["status"]["allocation"]) == "big-1"
    conditions = cluster.get_pod("greedy")["status"]["conditions"]
    assert [c["status"] for c in conditions if c["type"] == condition_type(DRIVER)] == ["True"]


async def test_only_our_gate_comes_off(cluster: Cluster, api: client.ApiClient) -> None:
    cluster.add_nodes(1)
    cluster.create_claim(claim("quota"))
    body = pod("held", ["quota"])
    # Another controller holds the pod too; its gate is not ours to lift.
    body["spec"]["schedulingGates"] = [{"name": "quota.example.com/admission"}, {"name": GATE}]
    cluster.create_pod(body)
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("held"), what="our gate to be lifted")
    finally:
        await running.shutdown()
    assert cluster.get_pod("held")["spec"].get("schedulingGates") == [
        {"name": "quota.example.com/admission"}
    ]
    assert cluster.get_claim("quota")["status"]["allocation"]
