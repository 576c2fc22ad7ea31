"""`status` of kinds with a status subresource: set on create only where upstream allows it,
never through the main resource, and nothing but status through `/status`."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from tests.integration.apiserver.support import namespaces_fixture

namespaces = namespaces_fixture("st")

NS = "st"
ALLOCATION = {
    "devices": {
        "results": [{"request": "a", "driver": "gpu.example.com", "pool": "n", "device": "d0"}]
    }
}


def _claim(resource: client.ResourceV1Api, name: str) -> dict[str, Any]:
    response = resource.read_namespaced_resource_claim(name, NS, _preload_content=False)
    result: dict[str, Any] = json.loads(response.data)
    return result


def _claim_body(name: str) -> dict[str, Any]:
    request = {"name": "a", "exactly": {"deviceClassName": "gpu"}}
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
        "status": {
            "allocation": ALLOCATION,
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        },
    }


def test_create_drops_a_claims_status(resource: client.ResourceV1Api) -> None:
    resource.create_namespaced_resource_claim(NS, _claim_body("c-create"))
    assert _claim(resource, "c-create")["status"] == {}


def test_create_resets_a_pods_status(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "p-create"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"},
        },
    )
    status = core.read_namespaced_pod("p-create", NS).status
    assert (status.phase, status.pod_ip, status.qos_class) == ("Pending", None, "BestEffort")


def test_pod_qos_class_on_create(core: client.CoreV1Api) -> None:
    same = {"cpu": "1", "memory": "1Gi"}
    for name, resources, qos in (
        ("p-guaranteed", {"limits": same}, "Guaranteed"),
        ("p-burstable", {"requests": {"cpu": "1"}}, "Burstable"),
    ):
        core.create_namespaced_pod(
            NS,
            {
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
            },
        )
        assert core.read_namespaced_pod(name, NS).status.qos_class == qos


def test_create_keeps_a_nodes_status_and_sets_a_namespaces_phase(core: client.CoreV1Api) -> None:
    # Nodes are the exception upstream: kubelet registers its node with status.
    core.create_node(
        {
            "metadata": {"name": "st-node"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    assert [c.type for c in core.read_node("st-node").status.conditions] == ["Ready"]
    core.create_namespace({"metadata": {"name": "st-ns"}, "status": {"phase": "Terminating"}})
    assert core.read_namespace("st-ns").status.phase == "Active"


def test_main_resource_writes_ignore_status(resource: client.ResourceV1Api) -> None:
    resource.create_namespaced_resource_claim(NS, _claim_body("c-main"))
    resource.patch_namespaced_resource_claim(
        "c-main",
        NS,
        {"metadata": {"labels": {"l": "1"}}, "status": {"allocation": ALLOCATION}},
        _content_type="application/merge-patch+json",
    )
    claim = _claim(resource, "c-main")
    assert claim["metadata"]["labels"] == {"l": "1"}
    assert claim["status"] == {}
    claim["status"] = {"allocation": ALLOCATION}
    resource.replace_namespaced_resource_claim("c-main", NS, claim)
    assert _claim(resource, "c-main")["status"] == {}


def test_status_writes_change_only_status(resource: client.ResourceV1Api) -> None:
    resource.create_namespaced_resource_claim(NS, _claim_body("c-status"))
    resource.patch_namespaced_resource_claim_status(
        "c-status",
        NS,
        {
            "metadata": {"labels": {"l": "1"}},
            "spec": {"devices": None},
            "status": {"allocation": ALLOCATION},
        },
        _content_type="application/merge-patch+json",
    )
    claim = _claim(resource, "c-status")
    assert claim["status"] == {"allocation": ALLOCATION}
    assert "labels" not in claim["metadata"]
    assert claim["spec"]["devices"]["requests"][0]["name"] == "a"
