"""Validators: ResourceSlices are checked against the API server's limits; custom hooks work."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from localcluster import ApiServer


def _slice(name: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 2},
            "devices": devices,
        },
    }


def test_valid_slice_of_a_larger_pool_is_accepted(resource: client.ResourceV1Api) -> None:
    created = resource.create_resource_slice(_slice("ok", [{"name": "gpu-0"}]))
    assert created.metadata.uid


def test_slice_over_the_device_limit_is_invalid(resource: client.ResourceV1Api) -> None:
    devices = [{"name": f"gpu-{i}"} for i in range(129)]
    with pytest.raises(ApiException) as caught:
        resource.create_resource_slice(_slice("too-many", devices))
    assert caught.value.status == 422
    body = json.loads(caught.value.body)
    assert body["reason"] == "Invalid"
    assert any(c["field"] == "spec.devices" for c in body["details"]["causes"])
    with pytest.raises(ApiException):
        resource.read_resource_slice("too-many")


def test_update_is_validated_too(resource: client.ResourceV1Api) -> None:
    resource.create_resource_slice(_slice("later-bad", []))
    with pytest.raises(ApiException) as caught:
        resource.patch_resource_slice(
            "later-bad",
            {"spec": {"driver": "Not A Domain"}},
            _content_type="application/merge-patch+json",
        )
    assert caught.value.status == 422
    assert resource.read_resource_slice("later-bad").spec.driver == "gpu.example.com"


def _no_x_labels(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> Sequence[tuple[str, str]]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return [("metadata.labels", "x is forbidden")] if "x" in labels else []


def test_custom_validator_hook() -> None:
    with ApiServer(validators={"configmaps": _no_x_labels}) as server:
        api = client.CoreV1Api(config.new_client_from_config_dict(server.kubeconfig()))
        api.create_namespaced_config_map("default", {"metadata": {"name": "fine"}})
        with pytest.raises(ApiException) as caught:
            api.create_namespaced_config_map(
                "default", {"metadata": {"name": "bad", "labels": {"x": "1"}}}
            )
        assert caught.value.status == 422
        causes = json.loads(caught.value.body)["details"]["causes"]
        assert causes == [
            {"reason": "FieldValueInvalid", "field": "metadata.labels", "message": "x is forbidden"}
        ]


def test_validator_for_unknown_resource_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown resources"):
        ApiServer(validators={"widgets.example.com": _no_x_labels})
