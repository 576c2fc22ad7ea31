"""`LocalCluster` as `dra-driver local-cluster` runs it: 2 nodes x 8 fake H100, one plugin process
per node. Pools complete, a GPU fault injected from outside reaches the slices, and a plugin
restart leaves neither duplicate nor orphaned slices."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import check_limits
from localcluster.cluster import LocalCluster
from tests.support.polling import eventually

GPUS = "H100-SXM5-80GB:8"


def slices_of(cluster: LocalCluster, node: str) -> list[dict[str, Any]]:
    assert cluster.api is not None
    found: Any = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={node}"
    )
    return list(found["items"])


def complete(slices: list[dict[str, Any]]) -> bool:
    pools = {
        (s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices
    }
    return len(pools) == 1 and next(iter(pools))[1] == len(slices)


def tainted(slices: list[dict[str, Any]], minor: int) -> bool:
    devices = [
        d
        for s in slices
        for d in s["spec"].get("devices") or []
        if d["name"] == f"gpu-{minor}" or d["name"].startswith(f"gpu-{minor}-")
    ]
    return bool(devices) and all(d.get("taints") for d in devices)


async def test_pools_health_and_restart() -> None:
    async with LocalCluster(
        nodes=2, gpus=GPUS, plugin_args=("--health-poll-interval=0.1",)
    ) as cluster:
        await cluster.wait_registered()
        names = [node.name for node in cluster.nodes]
        await eventually(
            lambda: all(complete(slices_of(cluster, n)) for n in names),
            "every pool complete",
            in_thread=True,
        )
        for name in names:
            slices = slices_of(cluster, name)
            assert check_limits(slices) == []
            assert not any(tainted(slices, m) for m in range(8))

        first = cluster.nodes[0]
        outside = FakeBackend.from_spec(GPUS, first.name, state_dir=first.fake_state_dir)
        outside.inject_unhealthy(5, xid=48)
        await eventually(
            lambda: tainted(slices_of(cluster, first.name), 5), "gpu-5 tainted", in_thread=True
        )
        after = slices_of(cluster, first.name)
        assert complete(after)
        assert not tainted(after, 4)
        assert not any(tainted(slices_of(cluster, names[1]), m) for m in range(8))
        outside.clear_unhealthy(5)
        await eventually(
            lambda: not tainted(slices_of(cluster, first.name), 5),
            "gpu-5 untainted",
            in_thread=True,
        )

        before = sorted(s["metadata"]["name"] for s in slices_of(cluster, first.name))
        old = first.agent.plugins[cluster.driver_name].sequence
        assert await cluster.stop_plugin(first) == 0
        cluster.start_plugin(first)
        # The new process registers only after its first publication.
        await first.agent.wait_until(
            lambda: (
                cluster.driver_name in first.agent.plugins
                and first.agent.plugins[cluster.driver_name].sequence > old
            ),
            timeout=60,
        )
        restarted = slices_of(cluster, first.name)
        assert sorted(s["metadata"]["name"] for s in restarted) == before
        assert complete(restarted)
