"""Evicting a running pod of the local cluster: its PodDisruptionBudget is honoured, and an
allowed eviction ends as kubelet ends a deleted pod (claims unprepared, reservations dropped,
the pod gone). Also: the chart's GpuQueue CRD is served from the start."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.deviceclasses import device_classes
from localcluster.cluster import LocalCluster
from tests.support.polling import eventually

DRIVER = DEFAULT_DRIVER_NAME


def _objects() -> list[dict[str, Any]]:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "req", "exactly": {"deviceClassName": "gpu.dra-driver.dev"}}
                    ]
                }
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "default", "labels": {"app": "train"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "d"}]}}
            ],
            "resourceClaims": [{"name": "d", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    return [*device_classes(DRIVER), template, pod]


async def test_an_evicted_pod_is_unprepared_and_goes() -> None:
    async with LocalCluster(nodes=1, gpus="H100-SXM5-80GB:2", controllers=0) as cluster:
        await cluster.wait_registered()
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        policy = client.PolicyV1Api(cluster.api)
        objects = client.CustomObjectsApi(cluster.api)
        assert objects.list_cluster_custom_object("gpu.dra-driver.dev", "v1alpha1", "gpuqueues")
        cluster.apply(_objects())
        agent = cluster.nodes[0].agent

        def running() -> bool:
            status = core.read_namespaced_pod("trainer", "default").status
            ready = [c.status for c in status.conditions or () if c.type == "Ready"]
            return status.phase == "Running" and ready == ["True"]

        await eventually(
            running, "the pod to run and be ready", timeout=60, interval=0.1, in_thread=True
        )
        # The agent writes the pod's status before it records the pod prepared, in one pass.
        await agent.wait_until(lambda: "default/trainer" in agent.prepared, timeout=30)

        policy.create_namespaced_pod_disruption_budget(
            "default",
            {
                "metadata": {"name": "train"},
                "spec": {"selector": {"matchLabels": {"app": "train"}}, "minAvailable": 1},
            },
        )
        eviction = client.V1Eviction(
            metadata=client.V1ObjectMeta(name="trainer", namespace="default")
        )
        with pytest.raises(ApiException) as caught:
            core.create_namespaced_pod_eviction("trainer", "default", eviction)
        assert caught.value.status == 429
        policy.delete_namespaced_pod_disruption_budget("train", "default")

        core.create_namespaced_pod_eviction("trainer", "default", eviction)

        def gone() -> bool:
            try:
                core.read_namespaced_pod("trainer", "default")
            except ApiException as err:
                return err.status == 404
            return False

        await eventually(gone, "the evicted pod to go", timeout=60, interval=0.1, in_thread=True)
        # The agent lets the pod go (its finalizer) before it forgets it, in the same pass: wait
        # for the pass to end rather than read its records in between.
        await agent.wait_until(lambda: "default/trainer" not in agent.prepared, timeout=30)

        def released() -> bool:
            # The agent drops reservations on the embedded control plane, before the pod goes;
            # on the real one kube-controller-manager does, after it (or deletes the claim).
            claims: Any = objects.list_namespaced_custom_object(
                "resource.k8s.io", "v1", "default", "resourceclaims"
            )
            return all(not (c.get("status") or {}).get("reservedFor") for c in claims["items"])

        await eventually(released, "no claim reserved for the pod", timeout=30, in_thread=True)
