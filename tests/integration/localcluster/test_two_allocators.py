"""Two allocators on the same nodes, and a leader that dies mid-stream: no device is ever held
by two claims whose pods may run (the allocator's independent checker over the final claims
says so, once the claims the controller holds back after a collision are let go)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.checker.rules import check_allocations
from dra_driver.deviceclasses import device_classes
from localcluster.cluster import LocalCluster
from tests.support import objects
from tests.support.polling import eventually

DRIVER = DEFAULT_DRIVER_NAME
GATE = f"{DRIVER}/allocation"
GROUP, VERSION = "resource.k8s.io", "v1"


def _claim(name: str, kind: str) -> dict[str, Any]:
    return objects.claim(name, objects.request("req", f"{kind}.dra-driver.dev"))


def _pod(name: str, claim: str, *, gated: bool) -> dict[str, Any]:
    return objects.pod(name, [claim], gates=[GATE] if gated else [])


def _violations(cluster: LocalCluster) -> list[str]:
    assert cluster.api is not None
    objects = client.CustomObjectsApi(cluster.api)
    listed: Any = {
        plural: objects.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
        for plural in ("resourceslices", "deviceclasses", "resourceclaims")
    }
    found = check_allocations(
        listed["resourceslices"], listed["deviceclasses"], listed["resourceclaims"]
    )
    return [f"{v.claim}: {v.rule}: {v.message}" for v in found]


def _shared_by_runnable_pods(cluster: LocalCluster) -> list[str]:
    """Devices held whole by more than one claim whose pod is not gated. When both allocators
    give one device away at the same moment, the controller keeps its claim's allocation, its
    pod gated, until the other claim lets the device go (kube-scheduler counts the device
    once for both); two holders are fine only as long as at most one of them may run."""
    assert cluster.api is not None
    listed: Any = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        GROUP, VERSION, "resourceclaims"
    )
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod("default").items
    gated = {p.metadata.name for p in pods if p.spec.scheduling_gates}
    holders: dict[tuple[str, str], list[str]] = {}
    for claim in listed["items"]:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if not result.get("shareID") and not result.get("adminAccess"):
                device = (result["pool"], result["device"])
                holders.setdefault(device, []).append(claim["metadata"]["name"])
    found = []
    for device, names in holders.items():
        runnable = [n for n in names if f"p-{n[2:]}" not in gated]
        if len(runnable) > 1:
            found.append(f"{device}: {runnable}")
    return found


def _waits_for_a_reason(pod: Any) -> bool:
    """A pending pod one of the allocators has looked at and reported as not fitting."""
    wanted = {f"{DRIVER}/DevicesAllocated", "PodScheduled"}
    return any(
        c.type in wanted and c.status == "False"
        for c in (pod.status.conditions if pod.status else None) or []
    )


async def test_controller_and_scheduler_side_by_side_never_double_book() -> None:
    """Hundreds of pods, half gated, half not, racing in waves for the same GPUs' MIG slices and
    fractional shares; more are asked for than the nodes have."""
    waves, per_wave = 8, 30
    kinds = ("mig", "shared", "mig")
    async with LocalCluster(nodes=2, gpus="H100-SXM5-80GB:4", poll_s=0.05) as cluster:
        await cluster.wait_registered()
        cluster.apply(device_classes(DRIVER))
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        for wave in range(waves):
            batch = []
            for j in range(per_wave):
                i = wave * per_wave + j
                batch.append(_claim(f"c-{i}", kinds[i % len(kinds)]))
                batch.append(_pod(f"p-{i}", f"c-{i}", gated=i % 2 == 0))
            await asyncio.to_thread(cluster.apply, batch)
            if wave == 0:
                # The controller yields whenever the two collide, and the stand-in, polling in
                # this process, can win every race on a loaded machine: let the controller
                # place part of the first wave before the race is on, so both take part.
                def some_gated_pod_allocated() -> bool:
                    listed = core.list_namespaced_pod("default").items
                    return any(
                        not p.spec.scheduling_gates and int(p.metadata.name[2:]) % 2 == 0
                        for p in listed
                    )

                await eventually(
                    some_gated_pod_allocated,
                    "a first gated pod",
                    timeout=60,
                    interval=0.2,
                    in_thread=True,
                )

        def settled() -> bool:
            listed = core.list_namespaced_pod("default").items
            return all(p.spec.node_name or _waits_for_a_reason(p) for p in listed)

        await eventually(
            settled, "both allocators to finish", timeout=240, interval=0.2, in_thread=True
        )
        listed = core.list_namespaced_pod("default").items
        bound = [p for p in listed if p.spec.node_name]
        gated_bound = [p for p in bound if int(p.metadata.name[2:]) % 2 == 0]
        assert gated_bound and len(gated_bound) < len(bound), "both allocators must take part"
        assert len(bound) < waves * per_wave, "the nodes must have run out (contention)"
        assert _shared_by_runnable_pods(cluster) == []
        twice = [v for v in _violations(cluster) if ": device-twice: " not in v]
        assert twice == [], "only a device held back by the controller may have two holders"

        # kube-scheduler's pods go, with their claims: the controller lets go of what it held
        # back, and places those pods again, on devices nobody else holds.
        scheduled = [f"p-{i}" for i in range(1, waves * per_wave, 2)]  # bound, or soon
        custom = client.CustomObjectsApi(cluster.api)
        for name in scheduled:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, "default", "resourceclaims", f"c-{name[2:]}"
            )
        await eventually(
            lambda: _violations(cluster) == [],
            "the held claims let go",
            timeout=120,
            interval=0.5,
            in_thread=True,
        )
        await eventually(
            settled, "the controller to place again", timeout=120, interval=0.2, in_thread=True
        )
        assert _violations(cluster) == []
        assert _shared_by_runnable_pods(cluster) == []


async def test_leader_failover_mid_stream_without_double_allocation() -> None:
    timing = ("--lease-duration=2s", "--renew-deadline=1.5s", "--retry-period=0.2s")
    async with LocalCluster(
        nodes=2, gpus="H100-SXM5-80GB:4", controllers=2, controller_args=timing
    ) as cluster:
        await cluster.wait_registered()
        cluster.apply(device_classes(DRIVER))
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        objects = client.CustomObjectsApi(cluster.api)

        def holder() -> str | None:
            try:
                namespace, name = cluster.controller_lease
                lease: Any = objects.get_namespaced_custom_object(
                    "coordination.k8s.io", "v1", namespace, "leases", name
                )
            except client.ApiException:
                return None
            return lease["spec"].get("holderIdentity") or None

        def ungated(names: list[str]) -> Callable[[], bool]:
            def check() -> bool:
                return all(
                    not core.read_namespaced_pod(n, "default").spec.scheduling_gates for n in names
                )

            return check

        await eventually(
            lambda: holder() is not None, "a leader", timeout=30, interval=0.2, in_thread=True
        )
        first = holder()
        wave_one = [f"p-{i}" for i in range(20)]
        cluster.apply(
            [
                d
                for i in range(20)
                for d in (_claim(f"c-{i}", "mig"), _pod(f"p-{i}", f"c-{i}", gated=True))
            ]
        )
        # Kill the leader while it is working through the first wave.
        await eventually(
            lambda: (
                sum(
                    not core.read_namespaced_pod(n, "default").spec.scheduling_gates
                    for n in wave_one
                )
                >= 5
            ),
            "the first allocations",
            timeout=60,
            interval=0.2,
            in_thread=True,
        )
        leader = next(c for c in cluster.controllers if c.name == first)
        await cluster.stop_controller(leader, kill=True)
        wave_two = [f"p-{i}" for i in range(20, 40)]
        cluster.apply(
            [
                d
                for i in range(20, 40)
                for d in (_claim(f"c-{i}", "mig"), _pod(f"p-{i}", f"c-{i}", gated=True))
            ]
        )
        await eventually(
            ungated(wave_one + wave_two),
            "the standby to finish",
            timeout=90,
            interval=0.2,
            in_thread=True,
        )
        assert holder() not in (None, first)
        assert _violations(cluster) == []
