"""Gated pods go only where their CPU and memory requests fit, as the kube-scheduler would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client, dynamic

from controller.reconciler import condition_type
from dra_driver.allocator.result import allocation_node
from localcluster.roles import scheduler
from tests.integration.allocation.harness import (
    DRIVER,
    Cluster,
    claim,
    eventually,
    pod,
    start_controller,
)


def sized(cpu: str = "16", memory: str = "64Gi", pods: str = "110") -> dict[str, str]:
    return {"cpu": cpu, "memory": memory, "pods": pods}


def asking(name: str, claims: list[str], gated: bool = True, **requests: str) -> dict[str, Any]:
    body = pod(name, claims, gated=gated)
    body["spec"]["containers"][0]["resources"] = {"requests": requests}
    return body


def allocated_on(cluster: Cluster, name: str) -> str | None:
    allocation = (cluster.get_claim(name).get("status") or {}).get("allocation")
    return None if allocation is None else allocation_node(allocation)


def failure(cluster: Cluster, name: str) -> str | None:
    for event in cluster.events_for(name):
        if event["reason"] == "FailedAllocation":
            return str(event["message"])
    return None


def condition(cluster: Cluster, name: str) -> dict[str, Any] | None:
    for found in cluster.get_pod(name).get("status", {}).get("conditions") or []:
        if found["type"] == condition_type(DRIVER):
            return dict(found)
    return None


async def test_pod_goes_to_the_node_with_room_for_its_cpu(
    cluster: Cluster, api: client.ApiClient
) -> None:
    # Both nodes have free GPUs; by devices alone the first one (by name) would be chosen.
    cluster.add_nodes(1, prefix="node", allocatable=sized(cpu="8"))
    cluster.add_nodes(1, prefix="roomy", allocatable=sized(cpu="32"))
    cluster.create_claim(claim("gpu"))
    cluster.create_pod(asking("trainer", ["gpu"], cpu="16"))
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("trainer"), what="the gate to be lifted")
    finally:
        await running.shutdown()
    assert allocated_on(cluster, "gpu") == "roomy-1"


async def test_pod_that_fits_nowhere_waits_naming_cpu_and_holds_no_devices(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(2, allocatable=sized(cpu="8"))
    cluster.create_claim(claim("gpu"))
    cluster.create_pod(asking("greedy", ["gpu"], cpu="16"))
    running = await start_controller(api)
    try:
        await eventually(lambda: failure(cluster, "greedy") is not None, what="an Event")
        await eventually(lambda: condition(cluster, "greedy") is not None, what="a condition")
    finally:
        await running.shutdown()
    expected = (
        "no eligible node has room for the pod (node node-1: insufficient cpu (asks 16, 8 free); "
        "node node-2: insufficient cpu (asks 16, 8 free))"
    )
    assert expected in str(failure(cluster, "greedy"))
    found = condition(cluster, "greedy")
    assert found is not None
    assert found["status"] == "False"
    assert expected in found["message"]
    assert cluster.gated("greedy")
    assert allocated_on(cluster, "gpu") is None


async def test_pod_is_placed_once_the_pod_holding_the_memory_is_deleted(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1, allocatable=sized(memory="64Gi"))
    hog = asking("hog", [], gated=False, memory="48Gi")
    hog["spec"]["nodeName"] = "node-1"
    cluster.create_pod(hog)
    cluster.create_claim(claim("gpu"))
    cluster.create_pod(asking("waiting", ["gpu"], memory="32Gi"))
    running = await start_controller(api)
    try:
        await eventually(lambda: failure(cluster, "waiting") is not None, what="an Event")
        assert "node node-1: insufficient memory (asks 32Gi, 16Gi free)" in str(
            failure(cluster, "waiting")
        )
        assert cluster.gated("waiting")
        # Deleted as its kubelet finishes it (kube-apiserver keeps a bound pod until then).
        await asyncio.to_thread(
            cluster.core.delete_namespaced_pod, "hog", "default", grace_period_seconds=0
        )
        await eventually(lambda: not cluster.gated("waiting"), what="the gate to be lifted")
    finally:
        await running.shutdown()
    assert allocated_on(cluster, "gpu") == "node-1"


@pytest.mark.embedded_only  # the scheduler stand-in binds with a spec patch (see its module)
async def test_pods_bound_by_the_scheduler_count_against_their_node(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(2, allocatable=sized(cpu="16"))
    cluster.create_pod(asking("web", [], gated=False, cpu="12"))
    bound = await asyncio.to_thread(scheduler.reconcile_once, dynamic.DynamicClient(api))  # type: ignore[no-untyped-call]
    assert bound == 1
    assert cluster.get_pod("web")["spec"]["nodeName"] == "node-1"
    cluster.create_claim(claim("gpu"))
    cluster.create_pod(asking("trainer", ["gpu"], cpu="8"))
    running = await start_controller(api)
    try:
        await eventually(lambda: not cluster.gated("trainer"), what="the gate to be lifted")
    finally:
        await running.shutdown()
    assert allocated_on(cluster, "gpu") == "node-2"


async def test_a_gangs_members_must_fit_together(cluster: Cluster, api: client.ApiClient) -> None:
    # Each node has room for one member's CPU only: the gang spreads over both nodes,
    # although by devices alone both members would share the first.
    cluster.add_nodes(2, allocatable=sized(cpu="10"))
    labels = {f"{DRIVER}/gang": "job", f"{DRIVER}/gang-size": "2"}
    for index in (1, 2):
        cluster.create_claim(claim(f"gpu-{index}"))
        member = asking(f"worker-{index}", [f"gpu-{index}"], cpu="6")
        member["metadata"]["labels"] = labels
        cluster.create_pod(member)
    running = await start_controller(api)
    try:
        for index in (1, 2):
            await eventually(lambda i=index: not cluster.gated(f"worker-{i}"), what="gates")  # type: ignore[misc]
    finally:
        await running.shutdown()
    assert {allocated_on(cluster, "gpu-1"), allocated_on(cluster, "gpu-2")} == {"node-1", "node-2"}
