"""The chart's GpuQueue CRD, installed as the local cluster installs it: good queues are
stored with their defaults, bad ones are refused with the field at fault."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.crds import bundled_definitions
from tests.integration.apiserver.support import established

GROUP, VERSION, PLURAL = "gpu.dra-driver.dev", "v1alpha1", "gpuqueues"


@pytest.fixture(scope="module", autouse=True)
def installed(api_client: client.ApiClient) -> Iterator[None]:
    ext = client.ApiextensionsV1Api(api_client)
    (crd,) = bundled_definitions()
    ext.create_custom_resource_definition(crd)
    established(ext, crd["metadata"]["name"])
    yield
    ext.delete_custom_resource_definition(crd["metadata"]["name"])


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GpuQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def causes(custom: client.CustomObjectsApi, body: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    assert caught.value.status == 422, caught.value.body
    found = json.loads(caught.value.body)["details"]["causes"]
    return [(c.get("field", ""), c["message"]) for c in found]


def test_the_short_name_and_status_are_served(custom: client.CustomObjectsApi) -> None:
    resources = custom.get_api_resources(GROUP, VERSION).resources
    assert [(r.name, r.short_names) for r in resources] == [
        ("gpuqueues", ["gq"]),
        ("gpuqueues/status", None),
    ]


def test_a_good_queue_gets_its_defaults(custom: client.CustomObjectsApi) -> None:
    created = custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        PLURAL,
        queue(
            "team-a",
            namespaces=["ml", "ml-dev"],
            parent="root",
            guaranteed={"gpu": 4, "memory": "320Gi"},
            limit={"gpu": "8"},
            surprise=True,
        ),
    )
    assert created["spec"] == {
        "namespaces": ["ml", "ml-dev"],
        "parent": "root",
        "guaranteed": {"gpu": 4, "memory": "320Gi"},
        "limit": {"gpu": "8"},
        "weight": 1,
        "reclaim": "Borrowed",
        "lending": "Allowed",
    }
    status = {
        "used": {"gpu": "2"},
        "pending": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Admitted",
                "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ],
    }
    written = custom.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, "team-a", {"status": status}
    )
    assert written["status"] == status


# After a schema error of the kinds that keep CEL rules from running, kube-apiserver adds a
# cause of its own saying so (`hasBlockingErr`).
SKIPPED = (
    "<nil>",
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
)


@pytest.mark.parametrize(
    ("spec", "field", "message", "rules_skipped"),
    [
        ({"weight": "high"}, "spec.weight", "must be of type integer", True),
        ({"weight": 0}, "spec.weight", "greater than or equal to 1", False),
        ({"reclaim": "Always"}, "spec.reclaim", 'supported values: "Borrowed", "Never"', True),
        ({"lending": "Always"}, "spec.lending", 'supported values: "Allowed", "Never"', True),
        ({"namespaces": ["a", "a"]}, "spec.namespaces[1]", 'Duplicate value: "a"', False),
        ({"namespaces": ["Bad_Name"]}, "spec.namespaces[0]", "should match", False),
        ({"parent": "-x"}, "spec.parent", "should match", False),
        ({"guaranteed": {"gpu": "four"}}, "spec.guaranteed.gpu", "should match", False),
        (
            {"guaranteed": {"gpu": "-1"}},
            "spec.guaranteed",
            "quantities must not be negative",
            False,
        ),
        ({"limit": {"gpus": 1}}, "spec.limit", "only gpu and memory may be set", False),
        # A rule's fieldPath into a map names the key as kube-apiserver does: `limit[gpu]`.
        (
            {"guaranteed": {"gpu": "8"}, "limit": {"gpu": 4}},
            "spec.limit[gpu]",
            "limit.gpu must not be less than guaranteed.gpu",
            False,
        ),
        (
            {"guaranteed": {"memory": "640Gi"}, "limit": {"memory": "600Gi"}},
            "spec.limit[memory]",
            "limit.memory must not be less than guaranteed.memory",
            False,
        ),
    ],
)
def test_bad_queues_are_refused(
    custom: client.CustomObjectsApi,
    spec: dict[str, Any],
    field: str,
    message: str,
    rules_skipped: bool,
) -> None:
    cause, *rest = causes(custom, queue("bad", **spec))
    assert cause[0] == field and message in cause[1], cause
    assert rest == ([SKIPPED] if rules_skipped else [])


def test_a_queue_cannot_be_its_own_parent(custom: client.CustomObjectsApi) -> None:
    # A rule on the object's root: kube-apiserver names no field there but `<nil>`, and leaves
    # an object's value out of the message.
    assert causes(custom, queue("loop", parent="loop")) == [
        ("<nil>", "Invalid value: a queue cannot be its own parent")
    ]
