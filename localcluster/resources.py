"""What the local API server stores: one `ResourceType` per group/version/resource.

Storage is generic (every object is a JSON dict); a resource type only says where it lives in
the URL space, whether it is namespaced, whether it has a status subresource, and which
optional validator runs before writes. Adding a kind means adding one entry here (or passing
extra types to `ApiServer`), nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Returns (field path, message) for each problem; an empty list accepts the object.
Validator = Callable[[Mapping[str, Any]], Sequence[tuple[str, str]]]

_ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: `group` is "" for the core group (served under /api/v1)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False
    short_names: tuple[str, ...] = ()
    validator: Validator | None = field(default=None, compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The qualified name Kubernetes uses in messages: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def verbs(self) -> tuple[str, ...]:
        return _ALL_VERBS

    def discovery(self) -> list[dict[str, Any]]:
        """This resource's entries in an APIResourceList (the resource, then its status)."""
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        entries = [main]
        if self.has_status:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return entries


_RESOURCE = "resource.k8s.io"

DEFAULT_RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, has_status=True, short_names=("ns",)),
    ResourceType("", "v1", "nodes", "Node", False, has_status=True, short_names=("no",)),
    ResourceType("", "v1", "pods", "Pod", True, has_status=True, short_names=("po",)),
    ResourceType("", "v1", "events", "Event", True, short_names=("ev",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType(_RESOURCE, "v1", "resourceslices", "ResourceSlice", False),
    ResourceType(_RESOURCE, "v1", "deviceclasses", "DeviceClass", False),
    ResourceType(_RESOURCE, "v1", "resourceclaims", "ResourceClaim", True, has_status=True),
    ResourceType(_RESOURCE, "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
)
