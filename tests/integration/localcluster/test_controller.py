"""Both allocation paths on the whole local cluster: the controller process allocates gated pods,
the scheduler stand-in the others, kubelet's stand-in prepares both, and the controller releases
what it allocated once the pods are gone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.deviceclasses import device_classes
from localcluster.cluster import LocalCluster
from localcluster.roles.node_agent import PREPARED_ANNOTATION

DRIVER = DEFAULT_DRIVER_NAME
GATE = f"{DRIVER}/allocation"


def _template(name: str, kind: str, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "req",
                            "exactly": {
                                "deviceClassName": f"{kind}.dra-driver.dev",
                                "count": count,
                            },
                        }
                    ]
                }
            }
        },
    }


def _pod(
    name: str, template: str, *, gated: bool, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "d"}]}}
        ],
        "resourceClaims": [{"name": "d", "resourceClaimTemplateName": template}],
    }
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": spec,
    }


async def _eventually(check: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_gated_and_scheduled_pods_side_by_side_then_released() -> None:
    gang = {f"{DRIVER}/gang": "pair", f"{DRIVER}/gang-size": "2"}
    async with LocalCluster(nodes=2, gpus="H100-SXM5-80GB:4") as cluster:
        await cluster.wait_registered()
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        objects = client.CustomObjectsApi(cluster.api)
        cluster.apply(
            [
                *device_classes(DRIVER),
                _template("two-gpus", "gpu", 2),
                _template("slice", "mig"),
                _pod("gated-pair", "two-gpus", gated=True),
                _pod("gang-a", "slice", gated=True, labels=gang),
                _pod("gang-b", "slice", gated=True, labels=gang),
                _pod("plain", "two-gpus", gated=False),
                _template("too-many", "gpu", 5),
                _pod("greedy", "too-many", gated=True),
            ]
        )
        names = ("gated-pair", "gang-a", "gang-b", "plain")

        def prepared() -> bool:
            pods = [core.read_namespaced_pod(n, "default") for n in names]
            return all(PREPARED_ANNOTATION in (p.metadata.annotations or {}) for p in pods)

        await _eventually(prepared, what="every pod to be prepared")

        def told_why() -> bool:
            events = core.list_namespaced_event(
                "default", field_selector="involvedObject.name=greedy"
            ).items
            return any(e.reason == "FailedAllocation" for e in events)

        await _eventually(told_why, what="an Event saying why greedy waits")
        greedy = core.read_namespaced_pod("greedy", "default")
        assert [g.name for g in greedy.spec.scheduling_gates] == [GATE]
        assert greedy.spec.node_name is None

        def claims() -> dict[str, dict[str, Any]]:
            found: Any = objects.list_namespaced_custom_object(
                "resource.k8s.io", "v1", "default", "resourceclaims"
            )
            return {
                c["metadata"]["name"].rsplit("-d-", 1)[0]: c
                for c in found["items"]
                if not c["metadata"]["name"].startswith("greedy-")
            }

        by_pod = claims()
        ours = {n for n, c in by_pod.items() if GATE in (c["metadata"].get("finalizers") or [])}
        assert ours == {"gated-pair", "gang-a", "gang-b"}
        pods = {n: core.read_namespaced_pod(n, "default") for n in names}
        assert pods["gang-a"].spec.node_name == pods["gang-b"].spec.node_name
        prepared_devices = json.loads(pods["gated-pair"].metadata.annotations[PREPARED_ANNOTATION])
        assert len(next(iter(prepared_devices["claims"].values()))["devices"]) == 2
        for name in (*names, "greedy"):
            core.delete_namespaced_pod(name, "default")
        await _eventually(lambda: not claims(), what="every claim to be released and deleted")
        log = cluster.controllers[0].log_path
        assert log is not None and "claim deallocated" in log.read_text()
