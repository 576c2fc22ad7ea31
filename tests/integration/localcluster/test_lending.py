"""A borrower runs on an idle owner's GPU and is gone soon after the owner turns busy, for
pods placed by the scheduler and for gated pods; the owner's claim, and the GPU's devices and
counters, end as they were (docs/overcommit.md)."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake.load import apply_pod_load
from dra_driver.backends.fake.state import FileStateStore
from dra_driver.deviceclasses import device_classes
from localcluster.cluster import TELEMETRY_INTERVAL_S, LocalCluster
from tests.support.polling import eventually

DRIVER = DEFAULT_DRIVER_NAME
GATE = f"{DRIVER}/allocation"
LEND_AFTER_S = 2.0
TARGET_S = TELEMETRY_INTERVAL_S + 2.0


def _template(name: str, device_class: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "req", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def _pod(
    name: str, template: str, load: str, *, gated: bool, namespace: str = "default"
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
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {f"{DRIVER}/fake-utilization": load},
        },
        "spec": spec,
    }


def _interference(port: int) -> tuple[float, float]:
    """(count, sum) of the plugin's interference histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    figures = {}
    for line in text.splitlines():
        if line.startswith("dra_gpu_take_back_interference_seconds_"):
            name, value = line.rsplit(" ", 1)
            figures[name.split("{")[0]] = float(value)
    return (
        figures.get("dra_gpu_take_back_interference_seconds_count", 0.0),
        figures.get("dra_gpu_take_back_interference_seconds_sum", 0.0),
    )


def _devices_and_counters(objects: client.CustomObjectsApi) -> Any:
    """The node's published devices and counters, taints left out."""
    listed: Any = objects.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
    found = []
    for item in sorted(listed["items"], key=lambda s: s["metadata"]["name"]):
        spec = dict(item["spec"])
        spec["devices"] = [
            {k: v for k, v in d.items() if k != "taints"} for d in spec.get("devices") or []
        ]
        found.append(spec)
    return found


@pytest.mark.parametrize("gated", [False, True], ids=["scheduler", "controller"])
async def test_a_borrower_runs_while_the_owner_idles_and_goes_when_it_is_busy(
    gated: bool, tmp_path: Path
) -> None:
    gpus = tmp_path / "gpus.yaml"  # a GPU in MIG mode lends nothing
    gpus.write_text("gpus:\n  - profile: H100-SXM5-80GB\n    count: 1\n    migEnabled: false\n")
    async with LocalCluster(
        nodes=1, gpus=str(gpus), lend_after=LEND_AFTER_S, plugin_metrics=True
    ) as cluster:
        await cluster.wait_registered()
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        objects = client.CustomObjectsApi(cluster.api)
        node = cluster.nodes[0]
        cluster.apply(
            [
                *device_classes(DRIVER),
                _template("whole", "gpu.dra-driver.dev"),
                _template("borrowed", "gpu-opportunistic.dra-driver.dev"),
                _pod("owner", "whole", "0", gated=gated),
            ]
        )

        def phase(name: str) -> str | None:
            try:
                return str(core.read_namespaced_pod(name, "default").status.phase)
            except ApiException as err:
                if err.status == 404:
                    return None
                raise

        await eventually(
            lambda: phase("owner") == "Running", "the owner to run", timeout=60, in_thread=True
        )
        owner_claim = next(
            c
            for c in objects.list_namespaced_custom_object(
                "resource.k8s.io", "v1", "default", "resourceclaims"
            )["items"]
            if c["metadata"]["name"].startswith("owner-")
        )
        before = _devices_and_counters(objects)
        cluster.apply([_pod("borrower", "borrowed", "60", gated=gated)])
        await eventually(
            lambda: phase("borrower") == "Running",
            "the borrower to run on the idle owner's GPU",
            timeout=60,
            in_thread=True,
        )
        owner_uid = core.read_namespaced_pod("owner", "default").metadata.uid
        borrower_uid = core.read_namespaced_pod("borrower", "default").metadata.uid
        store = FileStateStore(node.fake_state_dir, node.name)
        with store.transaction() as state:
            gpu_uuid = next(iter(state.gpus))
            assert [p.pod_uid for p in state.processes] == [borrower_uid]

        # The owner turns busy.
        apply_pod_load(node.fake_state_dir, node.name, node.proc_root, owner_uid, [gpu_uuid], 80.0)
        busy_at = time.monotonic()

        def borrower_stopped() -> bool:
            with store.transaction() as state:
                return all(p.pod_uid != borrower_uid for p in state.processes)

        await eventually(
            borrower_stopped, "the borrower to stop", timeout=30, interval=0.05, in_thread=True
        )
        stopped_after = time.monotonic() - busy_at
        await eventually(
            lambda: phase("borrower") is None, "the borrower pod to go", timeout=60, in_thread=True
        )
        assert node.metrics_port is not None
        count, total = _interference(node.metrics_port)
        assert count >= 1
        assert total / count <= TARGET_S, f"interference {total / count:.2f} s"
        assert stopped_after <= TARGET_S + 1.0, f"stopped {stopped_after:.2f} s after turning busy"

        events = core.list_namespaced_event(
            "default", field_selector="involvedObject.name=borrower"
        ).items
        assert any(e.reason == "GpuTakenBack" and "busy" in e.message for e in events)
        # The owner keeps its claim as it was, and runs on.
        owner_now = objects.get_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", owner_claim["metadata"]["name"]
        )
        assert owner_now["status"]["allocation"] == owner_claim["status"]["allocation"]
        assert phase("owner") == "Running"

        def released() -> bool:
            claims = objects.list_namespaced_custom_object(
                "resource.k8s.io", "v1", "default", "resourceclaims"
            )["items"]
            return all(not c["metadata"]["name"].startswith("borrower-") for c in claims)

        await eventually(
            released, "the borrower's claim to be released", timeout=60, in_thread=True
        )
        assert _devices_and_counters(objects) == before
        # The lent share now says the owner is busy: no new borrower is placed there.
        slices = objects.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
        lent = [
            d
            for s in slices["items"]
            for d in s["spec"].get("devices") or []
            if d["name"].endswith("-lent")
        ]
        assert [t["effect"] for d in lent for t in d.get("taints") or []] == ["NoExecute"]


def _queue(name: str, **spec: Any) -> list[dict[str, Any]]:
    """A namespace and the GpuQueue that names it."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        {
            "apiVersion": "gpu.dra-driver.dev/v1alpha1",
            "kind": "GpuQueue",
            "metadata": {"name": name},
            "spec": {"namespaces": [name], **spec},
        },
    ]


async def test_a_queue_that_refuses_to_lend_keeps_its_idle_owners_gpu_from_borrowers(
    tmp_path: Path,
) -> None:
    """Two idle owners on one node, each in its own queue's namespace: the GPU of the one whose
    GpuQueue says `lending: Never` keeps its NoSchedule taint, the other's opens, and a borrower
    goes there."""
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("gpus:\n  - profile: H100-SXM5-80GB\n    count: 2\n    migEnabled: false\n")
    async with LocalCluster(nodes=1, gpus=str(gpus), lend_after=LEND_AFTER_S) as cluster:
        await cluster.wait_registered()
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        objects = client.CustomObjectsApi(cluster.api)
        cluster.apply(
            [
                *device_classes(DRIVER),
                *_queue("private", lending="Never"),
                *_queue("shared"),
                _template("whole", "gpu.dra-driver.dev", "private"),
                _template("whole", "gpu.dra-driver.dev", "shared"),
                _template("borrowed", "gpu-opportunistic.dra-driver.dev"),
            ]
        )

        def running(name: str, namespace: str) -> bool:
            return core.read_namespaced_pod(name, namespace).status.phase == "Running"

        def device(pod: str, namespace: str) -> str:
            (status,) = core.read_namespaced_pod(pod, namespace).status.resource_claim_statuses
            found: Any = objects.get_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", status.resource_claim_name
            )
            (result,) = found["status"]["allocation"]["devices"]["results"]
            return str(result["device"])

        def taints() -> dict[str, list[str]]:
            listed: Any = objects.list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices"
            )
            return {
                d["name"]: [f"{t['key']}={t['value']}:{t['effect']}" for t in d.get("taints") or []]
                for s in listed["items"]
                for d in s["spec"].get("devices") or []
                if d["name"].endswith("-lent")
            }

        # The refusing owner first: left to itself its GPU would open no later than the other's.
        for namespace in ("private", "shared"):
            cluster.apply([_pod("owner", "whole", "0", gated=False, namespace=namespace)])
            await eventually(
                lambda namespace=namespace: running("owner", namespace),
                f"the owner in {namespace} to run",
                timeout=60,
                in_thread=True,
            )
        private = f"{device('owner', 'private')}-lent"
        shared = f"{device('owner', 'shared')}-lent"
        closed = [f"{DRIVER}/lending=closed:NoSchedule"]
        # Open while nobody held them; closed once a sample finds both owners (neither has
        # idled long enough yet).
        await eventually(
            lambda: taints()[private] == closed and taints()[shared] == closed,
            "both lent shares closed once the owners are seen",
            timeout=10 * TELEMETRY_INTERVAL_S,
            in_thread=True,
        )
        await eventually(
            lambda: taints()[shared] == [],
            f"{shared}, of the idle owner whose queue lends, to open",
            timeout=2 * LEND_AFTER_S + 3 * TELEMETRY_INTERVAL_S + 5,
            in_thread=True,
        )
        assert taints()[private] == closed
        cluster.apply([_pod("borrower", "borrowed", "60", gated=False)])
        await eventually(
            lambda: running("borrower", "default"),
            "the borrower to run",
            timeout=60,
            in_thread=True,
        )
        assert device("borrower", "default") == shared
        assert taints()[private] == closed


async def test_a_borrower_asking_for_more_memory_than_any_gpu_lends_is_told_so(
    tmp_path: Path,
) -> None:
    """The lent share offers the GPU's memory less the headroom (4 GiB by default): a borrower
    asking for more fits no device, waits with a reason, and nothing is allocated."""
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("gpus:\n  - profile: H100-SXM5-80GB\n    count: 1\n    migEnabled: false\n")
    async with LocalCluster(nodes=1, gpus=str(gpus), lend_after=LEND_AFTER_S) as cluster:
        await cluster.wait_registered()
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        objects = client.CustomObjectsApi(cluster.api)
        template = _template("greedy", "gpu-opportunistic.dra-driver.dev")
        request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        request["capacity"] = {"requests": {"memory": "78Gi"}}
        cluster.apply(
            [*device_classes(DRIVER), template, _pod("greedy", "greedy", "50", gated=True)]
        )

        def reason() -> str:
            conditions = core.read_namespaced_pod("greedy", "default").status.conditions or []
            return next(
                (
                    c.message or ""
                    for c in conditions
                    if c.type == f"{DRIVER}/DevicesAllocated" and c.status == "False"
                ),
                "",
            )

        # Closed until the first sample finds nobody holding the GPU; then too small for it.
        await eventually(
            lambda: "memory" in reason(), "the borrower told that memory is short", in_thread=True
        )
        claims = objects.list_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims"
        )
        assert all(not (c.get("status") or {}).get("allocation") for c in claims["items"])
        assert core.read_namespaced_pod("greedy", "default").spec.scheduling_gates
