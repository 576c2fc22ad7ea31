"""Admin access to devices only in namespaces labelled for it: a claim or template asking for it
elsewhere is refused at create, and so is a status write that grants it (kube-apiserver's
`AuthorizedForAdmin` and `AuthorizedForAdminStatus`). Both control planes must answer alike,
down to the field path, which leaves out the template's outer `spec` and the `exactly` level."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

LABEL = "resource.kubernetes.io/admin-access"
FORBIDDEN = (
    f"Forbidden: admin access to devices requires the `{LABEL}: true` label on the containing "
    "namespace"
)


@pytest.fixture(scope="module")
def namespaces(core: client.CoreV1Api) -> Iterator[tuple[str, str]]:
    """(plain, labelled): one namespace without the label and one with it."""
    plain, labelled = "admin-plain", "admin-labelled"
    core.create_namespace({"metadata": {"name": plain}})
    core.create_namespace({"metadata": {"name": labelled, "labels": {LABEL: "true"}}})
    yield plain, labelled
    for name in (plain, labelled):
        core.delete_namespace(name)


def _spec(admin: bool) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu"}
    if admin:
        exactly["adminAccess"] = True
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def _refused(write: Callable[[], object], kind: str) -> list[tuple[str, str, str]]:
    with pytest.raises(ApiException) as caught:
        write()
    assert caught.value.status == 422
    body = json.loads(caught.value.body)
    assert (body["reason"], body["details"]["kind"]) == ("Invalid", kind)
    return [(c["field"], c["reason"], c["message"]) for c in body["details"]["causes"]]


def test_a_claim_asking_for_admin_access_needs_the_namespace_label(
    resource: client.ResourceV1Api, namespaces: tuple[str, str]
) -> None:
    plain, labelled = namespaces
    claim = {"metadata": {"name": "watcher"}, "spec": _spec(admin=True)}
    causes = _refused(
        lambda: resource.create_namespaced_resource_claim(plain, claim), "ResourceClaim"
    )
    assert causes == [("spec.devices.requests[0].adminAccess", "FieldValueForbidden", FORBIDDEN)]
    created = resource.create_namespaced_resource_claim(labelled, claim)
    assert created.spec.devices.requests[0].exactly.admin_access is True


def test_a_template_asking_for_admin_access_needs_the_namespace_label(
    resource: client.ResourceV1Api, namespaces: tuple[str, str]
) -> None:
    plain, labelled = namespaces
    template = {"metadata": {"name": "watcher"}, "spec": {"spec": _spec(admin=True)}}
    causes = _refused(
        lambda: resource.create_namespaced_resource_claim_template(plain, template),
        "ResourceClaimTemplate",
    )
    assert causes == [("spec.devices.requests[0].adminAccess", "FieldValueForbidden", FORBIDDEN)]
    resource.create_namespaced_resource_claim_template(labelled, template)


def test_a_status_write_granting_admin_access_needs_the_namespace_label(
    resource: client.ResourceV1Api, namespaces: tuple[str, str]
) -> None:
    plain, labelled = namespaces
    result = {
        "request": "gpu",
        "driver": "gpu.example.com",
        "pool": "node-a",
        "device": "gpu-0",
        "adminAccess": True,
    }
    status = {"status": {"allocation": {"devices": {"results": [result]}}}}
    for namespace in (plain, labelled):
        resource.create_namespaced_resource_claim(
            namespace, {"metadata": {"name": "granted"}, "spec": _spec(admin=False)}
        )
    causes = _refused(
        lambda: resource.patch_namespaced_resource_claim_status("granted", plain, status),
        "ResourceClaim",
    )
    assert causes == [
        ("status.allocation.devices.results[0].adminAccess", "FieldValueForbidden", FORBIDDEN)
    ]
    stored = resource.patch_namespaced_resource_claim_status("granted", labelled, status)
    assert stored.status.allocation.devices.results[0].admin_access is True
