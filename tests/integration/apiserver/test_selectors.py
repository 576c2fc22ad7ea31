"""Label and field selectors on list (watch uses the same predicates; see test_watch)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.apiserver.support import namespaces_fixture

namespaces = namespaces_fixture("sel")


@pytest.fixture(scope="module", autouse=True)
def pods(core: client.CoreV1Api, namespaces: None) -> None:
    specs = {
        "p1": ({"app": "web", "tier": "front"}, "node-a"),
        "p2": ({"app": "web", "tier": "back"}, "node-b"),
        "p3": ({"app": "db"}, "node-a"),
        "p4": ({}, ""),
    }
    for name, (labels, node) in specs.items():
        spec: dict[str, object] = {"containers": [{"name": "c", "image": "x"}]}
        if node:
            spec["nodeName"] = node
        core.create_namespaced_pod(
            "sel", {"metadata": {"name": name, "labels": labels}, "spec": spec}
        )


def _names(core: client.CoreV1Api, **kwargs: str) -> list[str]:
    return sorted(p.metadata.name for p in core.list_namespaced_pod("sel", **kwargs).items)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["p1", "p2"]),
        ("app==web", ["p1", "p2"]),
        ("app!=web", ["p3", "p4"]),
        ("app in (web, db)", ["p1", "p2", "p3"]),
        ("app notin (web)", ["p3", "p4"]),
        ("tier", ["p1", "p2"]),
        ("!tier", ["p3", "p4"]),
        ("app=web,tier in (back)", ["p2"]),
        ("", ["p1", "p2", "p3", "p4"]),
    ],
)
def test_label_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    assert _names(core, label_selector=selector) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=node-a", ["p3", "p1"]),
        ("spec.nodeName==node-b", ["p2"]),
        ("spec.nodeName!=node-a", ["p2", "p4"]),
        ("spec.nodeName=", ["p4"]),
        ("metadata.name=p3", ["p3"]),
        ("metadata.namespace=sel,metadata.name!=p1", ["p2", "p3", "p4"]),
    ],
)
def test_field_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    assert _names(core, field_selector=selector) == sorted(expected)


def test_field_selector_on_resource_slices(resource: client.ResourceV1Api) -> None:
    for name, driver, pool in (
        ("s1", "gpu.a.com", "n1"),
        ("s2", "gpu.a.com", "n2"),
        ("s3", "b.com", "n1"),
    ):
        resource.create_resource_slice(
            {
                "metadata": {"name": name},
                "spec": {
                    "driver": driver,
                    "nodeName": pool,
                    "pool": {"name": pool, "generation": 0, "resourceSliceCount": 1},
                    "devices": [],
                },
            }
        )
    found = resource.list_resource_slice(field_selector="spec.driver=gpu.a.com,spec.nodeName=n1")
    assert [s.metadata.name for s in found.items] == ["s1"]
    pooled = resource.list_resource_slice(field_selector="spec.pool.name=n2")
    assert [s.metadata.name for s in pooled.items] == ["s2"]
    # Upstream selects slices on metadata.name, spec.nodeName, spec.driver and spec.pool.name.
    with pytest.raises(ApiException) as caught:
        resource.list_resource_slice(field_selector="spec.pool.generation=0")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool.generation"
    )


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("status.phase=Pending", ["p1", "p2", "p3", "p4"]),
        # Selected on the stored pod: the scheduler name is defaulted on create.
        ("spec.schedulerName=default-scheduler", ["p1", "p2", "p3", "p4"]),
        ("spec.schedulerName=", []),
        ("spec.hostNetwork=false", ["p1", "p2", "p3", "p4"]),
        ("spec.host=node-b", ["p2"]),
        ("spec.serviceAccountName=x,status.podIP=", []),
    ],
)
def test_pod_specific_field_selectors(
    core: client.CoreV1Api, selector: str, expected: list[str]
) -> None:
    assert _names(core, field_selector=selector) == expected


@pytest.mark.parametrize(
    ("call", "selector", "message"),
    [
        ("pods", "spec.containers=x", "field label not supported: spec.containers"),
        ("pods", "metadata.uid=x", "field label not supported: metadata.uid"),
        ("nodes", "metadata.namespace=x", "field label not supported: metadata.namespace"),
        ("nodes", "spec.podCIDR=x", "field label not supported: spec.podCIDR"),
        ("events", "message=x", "field label not supported: message"),
        (
            "configmaps",
            "data.x=y",
            '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
    ],
)
def test_unsupported_field_selector_is_bad_request(
    core: client.CoreV1Api, call: str, selector: str, message: str
) -> None:
    lists = {
        "pods": core.list_pod_for_all_namespaces,
        "nodes": core.list_node,
        "events": core.list_event_for_all_namespaces,
        "configmaps": core.list_config_map_for_all_namespaces,
    }
    with pytest.raises(ApiException) as caught:
        lists[call](field_selector=selector)
    assert caught.value.status == 400
    body = json.loads(caught.value.body)
    assert (body["reason"], body["message"]) == ("BadRequest", message)


def test_unsupported_field_selector_on_watch_is_bad_request(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("sel", watch=True, field_selector="spec.priority=1")
    assert caught.value.status == 400


def test_node_and_event_field_selectors(core: client.CoreV1Api) -> None:
    core.create_node({"metadata": {"name": "sel-cordoned"}, "spec": {"unschedulable": True}})
    core.create_node({"metadata": {"name": "sel-open"}})
    cordoned = core.list_node(field_selector="spec.unschedulable=true")
    assert [n.metadata.name for n in cordoned.items] == ["sel-cordoned"]
    # An absent boolean reads "false", as upstream's fmt.Sprint of the zero value.
    assert "sel-open" in [
        n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=false").items
    ]
    core.create_namespaced_event(
        "sel",
        {
            "metadata": {"name": "sel-ev"},
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "sel"},
            "reason": "Tested",
            "type": "Normal",
            "source": {"component": "tester"},
        },
    )
    found = core.list_namespaced_event(
        "sel", field_selector="involvedObject.name=p1,reason=Tested,type=Normal,source=tester"
    )
    assert [e.metadata.name for e in found.items] == ["sel-ev"]


def test_bad_selector_is_bad_request(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("sel", field_selector="spec.nodeName in (a)")
    assert caught.value.status == 400
