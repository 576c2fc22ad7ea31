"""Two teams sharing the local cluster through GPU queues: borrowing, reclaim, and no reclaim.

Queue a (namespace qa) and queue b (namespace qb) are each guaranteed half of the cluster's
GPUs. Queue a first takes every GPU with one-GPU pods (half of them borrowed); then as many pods
of queue b as its guarantee arrive, and the controller evicts exactly that many of a's pods, the
ones on borrowed capacity, and places b's pods on the GPUs they free. Then the same again with
`reclaim: Never` on b: nothing is evicted and b's pods wait with a condition saying why.

The demo runs it after the examples and the end-to-end test runs it; it returns what went wrong
(nothing, when the controller behaves), and prints what it saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TextIO

from kubernetes import client

from api.device_type import DeviceType
from dra_driver.controller_names import default_gate
from dra_driver.deviceclasses import class_name
from dra_driver.queues import GROUP, PLURAL, VERSION
from localcluster.cluster import LocalCluster
from localcluster.roles.node_agent import PREPARED_ANNOTATION
from localcluster.scenario_pods import one_gpu_pod

#: The issue's bound for b's pods to be running after they arrive.
RECLAIM_DEADLINE_S = 30.0
#: The controller posts the victims' Events when its allocation work pauses, within 5 s.
EVENTS_WITHIN_S = 10.0


async def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    """Poll what the roles and daemons write until `check` holds; False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


class _Teams:
    def __init__(self, cluster: LocalCluster) -> None:
        assert cluster.api is not None
        self.cluster = cluster
        # Typed as Any: bodies are plain dicts, which the client sends as they are.
        self.core: Any = client.CoreV1Api(cluster.api)
        self.objects = client.CustomObjectsApi(cluster.api)
        self.gate = default_gate(cluster.driver_name)
        self.driver = cluster.driver_name

    def gpus(self) -> int:
        found: Any = self.objects.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices"
        )
        return sum(
            1
            for s in found["items"]
            if s["spec"]["driver"] == self.driver
            for d in s["spec"].get("devices") or []
            if (d.get("attributes") or {}).get("type", {}).get("string") == DeviceType.GPU
        )

    def setup(self, guarantee: int) -> None:
        for team in ("a", "b"):
            namespace = f"q{team}"
            self.core.create_namespace({"metadata": {"name": namespace}})
            self.objects.create_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "GpuQueue",
                    "metadata": {"name": team},
                    "spec": {"namespaces": [namespace], "guaranteed": {"gpu": str(guarantee)}},
                },
            )
            self.objects.create_namespaced_custom_object(
                "resource.k8s.io",
                "v1",
                namespace,
                "resourceclaimtemplates",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "one-gpu", "namespace": namespace},
                    "spec": {
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "gpu",
                                        "exactly": {
                                            "deviceClassName": class_name("gpu", self.driver)
                                        },
                                    }
                                ]
                            }
                        }
                    },
                },
            )

    def create_pods(self, team: str, names: range) -> list[str]:
        created = []
        for index in names:
            name = f"{team}-{index}"
            self.core.create_namespaced_pod(
                f"q{team}", one_gpu_pod(name, f"q{team}", "one-gpu", gate=self.gate)
            )
            created.append(name)
        return created

    def pods(self, team: str) -> list[Any]:
        return [
            p
            for p in self.core.list_namespaced_pod(f"q{team}").items
            if p.metadata.deletion_timestamp is None
        ]

    def running(self, team: str) -> int:
        return sum(
            1 for p in self.pods(team) if PREPARED_ANNOTATION in (p.metadata.annotations or {})
        )

    def reclaimed(self) -> int:
        return sum(
            1 for e in self.core.list_namespaced_event("qa").items if e.reason == "Reclaimed"
        )

    def why_waiting(self, team: str) -> str:
        """The controller's reason for the first pod of the team that does not run."""
        kind = f"{self.driver}/DevicesAllocated"
        for pod in self.pods(team):
            if PREPARED_ANNOTATION in (pod.metadata.annotations or {}):
                continue
            for cond in pod.status.conditions or []:
                if cond.type == kind:
                    return f"{pod.metadata.name}: {cond.message}"
            return f"{pod.metadata.name}: no condition yet"
        return "every pod runs"

    def waiting_because(self, team: str, words: str) -> int:
        kind = f"{self.driver}/DevicesAllocated"
        count = 0
        for pod in self.pods(team):
            for cond in pod.status.conditions or []:
                if cond.type == kind and cond.status == "False" and words in (cond.message or ""):
                    count += 1
        return count

    def delete_pods(self, team: str) -> None:
        for pod in self.pods(team):
            self.core.delete_namespaced_pod(pod.metadata.name, f"q{team}")

    def set_reclaim(self, team: str, policy: str) -> None:
        self.objects.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, team, {"spec": {"reclaim": policy}}
        )

    def claims_left(self, team: str) -> int:
        found: Any = self.objects.list_namespaced_custom_object(
            "resource.k8s.io", "v1", f"q{team}", "resourceclaims"
        )
        return len(found["items"])


async def two_teams(cluster: LocalCluster, out: TextIO, timeout_s: float = 120.0) -> list[str]:
    """Run the scenario (see the module docstring); the problems found, empty when all held."""
    teams = _Teams(cluster)
    total = await asyncio.to_thread(teams.gpus)
    half = total // 2
    if half < 1:
        return [f"the queue scenario needs at least 2 GPUs, the cluster has {total}"]
    problems: list[str] = []
    print(f"\nqueues: a (namespace qa) and b (namespace qb), each guaranteed {half} GPUs", file=out)
    await asyncio.to_thread(teams.setup, half)

    await asyncio.to_thread(teams.create_pods, "a", range(total))
    if not await _until(lambda: teams.running("a") == total, timeout_s):
        why = await asyncio.to_thread(teams.why_waiting, "a")
        return [f"queue a: {teams.running('a')} of {total} pods run; all should (borrowing): {why}"]
    print(f"  queue a runs {total} pods: {half} within its guarantee, {half} borrowed", file=out)

    started = time.monotonic()
    await asyncio.to_thread(teams.create_pods, "b", range(half))
    placed = await _until(lambda: teams.running("b") == half, timeout_s)
    took = time.monotonic() - started
    # The victims' Events go out once the controller's allocation work pauses (at most 5 s).
    await _until(lambda: teams.reclaimed() >= half, EVENTS_WITHIN_S)
    evicted = await asyncio.to_thread(teams.reclaimed)
    left = await asyncio.to_thread(teams.running, "a")
    print(
        f"  queue b's {half} pods run after {took:.1f} s; {evicted} pods of queue a were "
        f"evicted, {left} still run",
        file=out,
    )
    if not placed:
        problems.append(f"queue b: {teams.running('b')} of {half} pods run after {took:.0f} s")
    elif took > RECLAIM_DEADLINE_S:
        problems.append(f"queue b's pods took {took:.1f} s to run (at most {RECLAIM_DEADLINE_S})")
    if evicted != half or left != half:
        problems.append(f"expected exactly {half} evictions and {half} pods of a left")

    # Again with reclaim: Never on b: a borrows again, b's pods must wait and say why.
    await asyncio.to_thread(teams.delete_pods, "b")
    if not await _until(lambda: teams.claims_left("b") == 0, timeout_s):
        problems.append("queue b's claims were not released after its pods were deleted")
    await asyncio.to_thread(teams.create_pods, "a", range(total, total + half))
    if not await _until(lambda: teams.running("a") == total, timeout_s):
        problems.append(f"queue a could not borrow again ({teams.running('a')} of {total} run)")
    await asyncio.to_thread(teams.set_reclaim, "b", "Never")
    await asyncio.to_thread(teams.create_pods, "b", range(half, 2 * half))
    why = "reclaim policy is Never"
    told = await _until(lambda: teams.waiting_because("b", why) == half, timeout_s)
    evicted_after = await asyncio.to_thread(teams.reclaimed)
    print(
        f"  with reclaim: Never on b: {teams.waiting_because('b', why)} of b's pods wait "
        f"('{why}'), {evicted_after - evicted} more evictions",
        file=out,
    )
    if not told:
        problems.append("queue b's pods do not say they wait because of its reclaim policy")
    if evicted_after != evicted or teams.running("a") != total:
        problems.append("a pod was evicted although queue b's reclaim policy is Never")

    for team in ("a", "b"):
        await asyncio.to_thread(teams.delete_pods, team)
    if not await _until(lambda: teams.claims_left("a") + teams.claims_left("b") == 0, timeout_s):
        problems.append("the queues' claims were not all released after their pods were deleted")
    return problems
