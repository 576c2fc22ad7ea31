"""Label and field selectors on list (watch uses the same predicates; see test_watch)."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException


@pytest.fixture(scope="module", autouse=True)
def pods(core: client.CoreV1Api) -> None:
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
    found = resource.list_resource_slice(field_selector="spec.driver=gpu.a.com,spec.pool.name=n1")
    assert [s.metadata.name for s in found.items] == ["s1"]


def test_bad_selector_is_bad_request(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("sel", field_selector="spec.nodeName in (a)")
    assert caught.value.status == 400
