"""Where slices are read and written: the API server, through the official client.

The publisher writes raw JSON objects through the custom-objects API: the typed models would
drop any field the client library does not know yet (new DRA fields arrive often), and then the
publisher could not tell our own omissions from the API server's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from kubernetes import client

GROUP = "resource.k8s.io"
VERSION = "v1"
PLURAL = "resourceslices"


class SliceStore(Protocol):
    def list(self, node: str, driver: str) -> list[dict[str, Any]]: ...

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def delete(self, name: str, resource_version: str) -> None: ...


class KubernetesSliceStore:
    """`SliceStore` over `kubernetes.client`; API errors surface as `client.ApiException`."""

    def __init__(self, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)

    def list(self, node: str, driver: str) -> list[dict[str, Any]]:
        found: Any = self._objects.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, field_selector=f"spec.nodeName={node},spec.driver={driver}"
        )
        return list(found.get("items") or [])

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        created: Any = self._objects.create_cluster_custom_object(GROUP, VERSION, PLURAL, dict(obj))
        return dict(created)

    def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        name = str(obj["metadata"]["name"])
        replaced: Any = self._objects.replace_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, dict(obj)
        )
        return dict(replaced)

    def delete(self, name: str, resource_version: str) -> None:
        preconditions = (
            client.V1Preconditions(resource_version=resource_version) if resource_version else None
        )
        options = client.V1DeleteOptions(preconditions=preconditions)
        try:
            self._objects.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name, body=options)
        except client.ApiException as err:
            if err.status != 404:  # already gone is what we wanted
                raise
