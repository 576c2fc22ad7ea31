"""Both allocation paths on the whole local cluster: the controller process allocates gated pods,
the scheduler stand-in the others, kubelet's stand-in prepares both, and the controller releases
what it allocated once the pods are gone."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.deviceclasses import device_classes
from localcluster.cluster import LocalCluster
from localcluster.roles.node_agent import PREPARED_ANNOTATION
from tests.support import objects
from tests.support.polling import eventually

DRIVER = DEFAULT_DRIVER_NAME
GATE = f"{DRIVER}/allocation"


def _template(name: str, kind: str, count: int = 1) -> dict[str, Any]:
    return objects.template(name, objects.request("req", f"{kind}.dra-driver.dev", count))


def _pod(
    name: str, template: str, *, gated: bool, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod whose one container uses the claim made from `template` (entry `d`)."""
    container = {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "d"}]}}
    return objects.pod(
        name,
        templates={"d": template},
        labels=labels or {},
        gates=[GATE] if gated else [],
        containers=[container],
    )


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

        await eventually(
            prepared, "every pod to be prepared", timeout=60, interval=0.1, in_thread=True
        )

        def told_why() -> bool:
            events = core.list_namespaced_event(
                "default", field_selector="involvedObject.name=greedy"
            ).items
            return any(e.reason == "FailedAllocation" for e in events)

        await eventually(
            told_why, "an Event saying why greedy waits", timeout=60, interval=0.1, in_thread=True
        )
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
        await eventually(
            lambda: not claims(),
            "every claim to be released and deleted",
            timeout=60,
            interval=0.1,
            in_thread=True,
        )
        log = cluster.controllers[0].log_path
        assert log is not None and "claim deallocated" in log.read_text()
