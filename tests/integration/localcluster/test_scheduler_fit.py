"""The scheduler stand-in honours NodeResourcesFit for the ungated pods it places."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, dynamic

from localcluster import ApiServer
from localcluster.roles import scheduler

# The stand-ins (scheduler, claims from templates, kubelet) themselves, on the embedded server;
# the upstream tier runs the real control plane instead.
pytestmark = pytest.mark.embedded_only

Obj = dict[str, Any]


@pytest.fixture
def cluster() -> Iterator[dynamic.DynamicClient]:
    with ApiServer(port=0) as server:
        api = client.ApiClient(client.Configuration(host=server.url))
        yield dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]
        api.close()


def pods(dyn: dynamic.DynamicClient) -> Any:
    return dyn.resources.get(api_version="v1", kind="Pod")


def add_node(dyn: dynamic.DynamicClient, name: str, cpu: str, max_pods: str = "110") -> None:
    dyn.resources.get(api_version="v1", kind="Node").create(
        body={
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": max_pods}},
        }
    )


def add_pod(dyn: dynamic.DynamicClient, name: str, cpu: str, **spec: Any) -> None:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    pods(dyn).create(
        namespace="default",
        body={
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [container], **spec},
        },
    )


def get(dyn: dynamic.DynamicClient, name: str) -> Obj:
    found: Obj = pods(dyn).get(name=name, namespace="default").to_dict()
    return found


def scheduled(dyn: dynamic.DynamicClient, name: str) -> Obj:
    conditions = get(dyn, name).get("status", {}).get("conditions") or []
    return next(c for c in conditions if c["type"] == "PodScheduled")


def test_pods_go_where_their_cpu_fits_and_the_rest_stay_pending(
    cluster: dynamic.DynamicClient,
) -> None:
    add_node(cluster, "node-a", cpu="4")
    add_node(cluster, "node-b", cpu="4")
    add_pod(cluster, "first", cpu="3")
    add_pod(cluster, "second", cpu="3")
    add_pod(cluster, "third", cpu="3")
    assert scheduler.reconcile_once(cluster) == 2
    assert get(cluster, "first")["spec"]["nodeName"] == "node-a"
    assert get(cluster, "second")["spec"]["nodeName"] == "node-b"
    assert not get(cluster, "third")["spec"].get("nodeName")
    condition = scheduled(cluster, "third")
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == "0/2 nodes are available: 2 Insufficient cpu."


def test_bound_pods_count_until_they_finish(cluster: dynamic.DynamicClient) -> None:
    add_node(cluster, "node-a", cpu="4", max_pods="2")
    add_pod(cluster, "running", cpu="3", nodeName="node-a")
    add_pod(cluster, "new", cpu="2")
    assert scheduler.reconcile_once(cluster) == 0
    assert scheduled(cluster, "new")["message"] == "0/1 nodes are available: 1 Insufficient cpu."
    pods(cluster).status.patch(
        name="running",
        namespace="default",
        body={"status": {"phase": "Succeeded"}},
        content_type="application/merge-patch+json",
    )
    assert scheduler.reconcile_once(cluster) == 1
    assert get(cluster, "new")["spec"]["nodeName"] == "node-a"


def test_the_pod_count_is_checked(cluster: dynamic.DynamicClient) -> None:
    add_node(cluster, "node-a", cpu="4", max_pods="1")
    add_pod(cluster, "running", cpu="0", nodeName="node-a")
    add_pod(cluster, "new", cpu="0")
    assert scheduler.reconcile_once(cluster) == 0
    assert scheduled(cluster, "new")["message"] == "0/1 nodes are available: 1 Too many pods."
