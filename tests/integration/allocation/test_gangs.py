"""Gangs are allocated whole or not at all."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from dra_driver.allocator.result import allocation_node
from tests.integration.allocation.harness import (
    DRIVER,
    Cluster,
    claim,
    eventually,
    pod,
    start_controller,
)


def gang_labels(name: str, size: int) -> dict[str, str]:
    return {f"{DRIVER}/gang": name, f"{DRIVER}/gang-size": str(size)}


async def test_gang_that_fits_only_partly_gets_nothing(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1)  # 8 GPUs; the gang wants 2 x 5
    for i in (1, 2):
        cluster.create_claim(claim(f"big-{i}", count=5))
        cluster.create_pod(pod(f"worker-{i}", [f"big-{i}"], labels=gang_labels("big", 2)))
    running = await start_controller(api)
    try:
        await eventually(
            lambda: all(
                any(e["reason"] == "FailedAllocation" for e in cluster.events_for(f"worker-{i}"))
                for i in (1, 2)
            ),
            what="both members to be told why they wait",
        )
        message = next(
            e["message"]
            for e in cluster.events_for("worker-2")
            if e["reason"] == "FailedAllocation"
        )
        assert "gang member default/worker-2" in message
        # Nothing was written for the member that would have fitted alone.
        assert all(not cluster.get_claim(f"big-{i}").get("status") for i in (1, 2))
        assert cluster.gated("worker-1") and cluster.gated("worker-2")
        # A pod that needs the whole node gets it meanwhile: the gang's attempt held back no
        # device, not even one (a probe that fits in what the attempt leaves would not notice).
        cluster.create_claim(claim("solo", count=8))
        cluster.create_pod(pod("solo", ["solo"]))
        await eventually(lambda: not cluster.gated("solo"), what="the solo pod")
    finally:
        await running.shutdown()


async def test_incomplete_gang_waits_for_its_last_member(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(2)
    for i in (1, 2, 3):
        cluster.create_claim(claim(f"part-{i}", count=4))
    cluster.create_pod(pod("member-1", ["part-1"], labels=gang_labels("trio", 3)))
    cluster.create_pod(pod("member-2", ["part-2"], labels=gang_labels("trio", 3)))
    running = await start_controller(api)
    try:
        await eventually(lambda: running.daemon.reconciler.passes >= 1, what="a first pass")
        assert cluster.gated("member-1") and cluster.gated("member-2")
        assert not cluster.get_claim("part-1").get("status")
        cluster.create_pod(pod("member-3", ["part-3"], labels=gang_labels("trio", 3)))
        await eventually(
            lambda: not any(cluster.gated(f"member-{i}") for i in (1, 2, 3)),
            what="the whole gang",
        )
    finally:
        await running.shutdown()
    nodes = [
        allocation_node(cluster.get_claim(f"part-{i}")["status"]["allocation"]) for i in (1, 2, 3)
    ]
    # 12 GPUs over two 8-GPU nodes: two members share a node, and no claim spans nodes.
    assert sorted(nodes.count(n) for n in set(nodes)) == [1, 2]


async def test_gang_prefers_one_node_and_one_nvlink_domain(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(3)
    for i in (1, 2):
        cluster.create_claim(claim(f"half-{i}", count=2))
        cluster.create_pod(pod(f"peer-{i}", [f"half-{i}"], labels=gang_labels("pair", 2)))
    running = await start_controller(api)
    try:
        await eventually(
            lambda: not cluster.gated("peer-1") and not cluster.gated("peer-2"), what="the pair"
        )
    finally:
        await running.shutdown()
    allocations = [cluster.get_claim(f"half-{i}")["status"]["allocation"] for i in (1, 2)]
    assert allocation_node(allocations[0]) == allocation_node(allocations[1])


TWO_DOMAINS = """\
gpus:
  - {profile: H100-SXM5-80GB, nvlinkDomain: blue}
  - {profile: H100-SXM5-80GB, count: 2, nvlinkDomain: green}
  - {profile: H100-SXM5-80GB, count: 3, nvlinkDomain: blue}
"""


async def test_gang_members_share_one_nvlink_domain_of_a_split_node(
    cluster: Cluster, api: client.ApiClient, tmp_path: Path
) -> None:
    # Each node has two NVLink domains, interleaved: gpu-0 and gpu-3..5 are blue, gpu-1 and
    # gpu-2 green. Placed one by one, the first member would take gpu-0 and gpu-3 (blue) and the
    # second gpu-1 and gpu-2 (green); placed together, all four GPUs share the blue domain.
    spec = tmp_path / "two-domains.yaml"
    spec.write_text(TWO_DOMAINS)
    cluster.add_nodes(2, gpus=str(spec))
    domains = {f"gpu-{i}": "green" if i in (1, 2) else "blue" for i in range(6)}
    for i in (1, 2):
        cluster.create_claim(claim(f"quarter-{i}", count=2))
        cluster.create_pod(pod(f"rank-{i}", [f"quarter-{i}"], labels=gang_labels("ring", 2)))
    running = await start_controller(api)
    try:
        await eventually(
            lambda: not cluster.gated("rank-1") and not cluster.gated("rank-2"), what="the ring"
        )
    finally:
        await running.shutdown()
    allocations = [cluster.get_claim(f"quarter-{i}")["status"]["allocation"] for i in (1, 2)]
    assert allocation_node(allocations[0]) == allocation_node(allocations[1])
    devices = [r["device"] for a in allocations for r in a["devices"]["results"]]
    assert len(set(devices)) == 4
    assert {domains[d] for d in devices} == {"blue"}, devices
