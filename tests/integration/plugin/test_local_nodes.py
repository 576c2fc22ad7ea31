"""Two nodes with eight fake H100 each, each with its own plugin, against one API server:
complete pools, a GPU fault that reaches the slices and kubelet's health stream, and a plugin
restart that leaves neither duplicates nor orphans."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client

from dra_driver.kubeletapi.client import HealthClient
from dra_driver.kubeletapi.types import Health
from dra_driver.slices import check_limits
from localcluster.control_planes import Server
from tests.integration.plugin.harness import DRIVER, create_node, running_plugin, short_dir

NODES = ("node-1", "node-2")
GPUS = "H100-SXM5-80GB:8"
Obj = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    for node in NODES:
        create_node(api, node)


def stored(api: client.ApiClient, node: str) -> list[Obj]:
    found: Any = client.CustomObjectsApi(api).list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={node}"
    )
    # kube-apiserver leaves apiVersion and kind out of list items; the list names them.
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **item}
        for item in found["items"]
    ]


def complete(slices: Sequence[Mapping[str, Any]]) -> bool:
    pools = {
        (s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices
    }
    return len(pools) == 1 and next(iter(pools))[1] == len(slices)


def taints_of(slices: Sequence[Mapping[str, Any]], device_prefix: str) -> list[Any]:
    return [
        d.get("taints")
        for s in slices
        for d in s["spec"].get("devices") or []
        if d["name"] == device_prefix or d["name"].startswith(device_prefix + "-")
    ]


async def test_two_nodes_publish_complete_valid_pools_and_follow_health(
    server: Server, api: client.ApiClient
) -> None:
    with short_dir() as root:
        async with (
            running_plugin(server, root, NODES[0], GPUS) as first,
            running_plugin(server, root, NODES[1], GPUS) as second,
        ):
            for node in NODES:
                slices = stored(api, node)
                assert slices and complete(slices)
                assert check_limits(slices) == []
                for obj in slices:
                    assert obj["spec"]["driver"] == DRIVER
                    assert obj["metadata"]["ownerReferences"][0]["kind"] == "Node"
                    kubernetes_validate.validate(obj, "1.36.0", strict=True)
            names = {
                node: sorted(s["metadata"]["name"] for s in stored(api, node)) for node in NODES
            }
            assert not set(names[NODES[0]]) & set(names[NODES[1]])
            assert all(not t for t in taints_of(stored(api, NODES[0]), "gpu-3"))

            async with HealthClient(first.dra_socket) as health:
                stream = health.watch()
                initial = await anext(stream)
                assert {d.health for d in initial if d.device_name == "gpu-3"} == {Health.HEALTHY}
                rounds = first.daemon.publish_loop.rounds
                first.backend.inject_unhealthy(3, xid=79)
                update = await asyncio.wait_for(anext(stream), 10)
                sick = [d for d in update if d.device_name.startswith("gpu-3")]
                assert sick and {d.health for d in sick} == {Health.UNHEALTHY}
                assert "XID 79" in sick[0].message
                await asyncio.wait_for(first.daemon.publish_loop.wait_rounds(rounds + 1), 10)
                after = stored(api, NODES[0])
                assert complete(after)
                gpu3 = taints_of(after, "gpu-3")
                unhealthy = {
                    "key": f"{DRIVER}/unhealthy",
                    "value": "xid-79",
                    "effect": "NoSchedule",
                }
                assert gpu3 and all(
                    [{k: v for k, v in taint.items() if k != "timeAdded"} for taint in t]
                    == [unhealthy]
                    for t in gpu3
                )
                assert all(not t for t in taints_of(after, "gpu-2"))
                assert all(not t for t in taints_of(stored(api, NODES[1]), "gpu-3"))

                rounds = first.daemon.publish_loop.rounds
                first.backend.clear_unhealthy(3)
                await asyncio.wait_for(first.daemon.publish_loop.wait_rounds(rounds + 1), 10)
                assert all(not t for t in taints_of(stored(api, NODES[0]), "gpu-3"))
                await stream.aclose()
            assert second.daemon.publish_loop.last is not None

        # Restart one plugin: same slices, no duplicates, no orphans.
        before = names[NODES[0]]
        async with running_plugin(server, root, NODES[0], GPUS):
            slices = stored(api, NODES[0])
            assert sorted(s["metadata"]["name"] for s in slices) == before
            assert complete(slices)
