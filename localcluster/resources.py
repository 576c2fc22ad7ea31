"""What the local API server stores: one `ResourceType` per group/version/resource.

Storage is generic (every object is a JSON dict); a resource type only says where it lives in
the URL space, whether it is namespaced, whether it has a status subresource, and which
optional validator runs before writes. Adding a kind means adding one entry here (or passing
extra types to `ApiServer`), nothing else. Custom resources get theirs from their
CustomResourceDefinition at run time (`crds.py`), with an `admit` hook that prunes, defaults and
validates against the CRD's schema.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.validation.defaults import with_defaults
from localcluster.errors import StatusCause
from localcluster.pod_defaults import with_pod_defaults

#: (new object, old object or None on create) -> (field path, message) or a cause for each
#: problem; an empty list accepts the object. It may raise `ApiError` (a value that does not
#: decode is 400, not 422).
Validator = Callable[
    [Mapping[str, Any], Mapping[str, Any] | None], Sequence[tuple[str, str] | StatusCause]
]

#: An object -> the object with kube-apiserver's defaults for its kind filled in; runs before
#: admission and validation on every create and update (not on status writes).
Defaulter = Callable[[Mapping[str, Any]], dict[str, Any]]

#: (new object, old object or None on create) -> (the object to store, problems). Runs before
#: the validator on every write, status writes included; it may prune and default the object.
Admit = Callable[
    [dict[str, Any], Mapping[str, Any] | None],
    tuple[dict[str, Any], Sequence[tuple[str, str] | StatusCause]],
]

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
    admit: Admit | None = field(default=None, compare=False)
    #: A write to the status subresource, as the kind's status strategy in kube-apiserver
    #: handles it: (new object, old object) -> (the object to store, problems). Built-in kinds
    #: without one take any status (`localcluster/validation.py` sets the defaults).
    status_strategy: Admit | None = field(default=None, compare=False)
    defaulter: Defaulter | None = field(default=None, compare=False)
    #: Overrides of the names derived from `kind` (CRDs declare their own).
    singular: str = ""
    list_kind_name: str = ""
    categories: tuple[str, ...] = ()
    #: Whether `metadata.generation` is kept (1 on create, one more for each change outside
    #: metadata and status). Upstream only the kinds whose strategy sets it have one; of those
    #: served by default: pods, PodDisruptionBudgets, ResourceSlices, DeviceClasses, CRDs and
    #: custom resources (`PrepareForCreate` in each `pkg/registry/.../strategy.go`).
    tracks_generation: bool = True
    #: The metadata fields a status write takes from the request; the rest stays as stored.
    #: Most status strategies reset all of metadata (`metav1.ResetObjectMetaForStatus`); those
    #: of pods, nodes, namespaces and PDBs only copy the old spec back, so labels, annotations
    #: and finalizers (and, but for pods, owner references) change with a status write.
    status_metadata: tuple[str, ...] = ()
    #: Extra discovery entries for subresources served elsewhere (`pods/eviction`).
    subresources: tuple[tuple[tuple[str, Any], ...], ...] = field(default=(), compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The qualified name Kubernetes uses in messages: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return self.list_kind_name or f"{self.kind}List"

    @property
    def verbs(self) -> tuple[str, ...]:
        return _ALL_VERBS

    def discovery(self) -> list[dict[str, Any]]:
        """This resource's entries in an APIResourceList (the resource, then its status)."""
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
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
        entries.extend({"namespaced": self.namespaced, **dict(sub)} for sub in self.subresources)
        return entries


_RESOURCE = "resource.k8s.io"

#: As kube-apiserver lists it: the Eviction kind lives in policy/v1, the URL under pods.
_POD_EVICTION = (
    ("name", "pods/eviction"),
    ("singularName", ""),
    ("group", "policy"),
    ("version", "v1"),
    ("kind", "Eviction"),
    ("verbs", ["create"]),
)

#: Served by default; `crds.py` gives it the admission that checks CRDs and serves their kinds.
CRD_RESOURCE = ResourceType(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    False,
    has_status=True,
    short_names=("crd", "crds"),
)

_STATUS_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")

DEFAULT_RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        has_status=True,
        short_names=("ns",),
        tracks_generation=False,
        status_metadata=_STATUS_METADATA,
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        has_status=True,
        short_names=("no",),
        tracks_generation=False,
        status_metadata=_STATUS_METADATA,
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        has_status=True,
        short_names=("po",),
        subresources=(_POD_EVICTION,),
        # A pod's status write keeps its owner references (old kubelets corrupted them).
        status_metadata=("labels", "annotations", "finalizers"),
        defaulter=with_pod_defaults,
    ),
    ResourceType("", "v1", "events", "Event", True, short_names=("ev",), tracks_generation=False),
    ResourceType(
        "", "v1", "configmaps", "ConfigMap", True, short_names=("cm",), tracks_generation=False
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, tracks_generation=False),
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        has_status=True,
        short_names=("pdb",),
        status_metadata=_STATUS_METADATA,
    ),
    ResourceType(
        _RESOURCE,
        "v1",
        "resourceslices",
        "ResourceSlice",
        False,
        defaulter=functools.partial(with_defaults, "ResourceSlice"),
    ),
    ResourceType(_RESOURCE, "v1", "deviceclasses", "DeviceClass", False),
    ResourceType(
        _RESOURCE,
        "v1",
        "resourceclaims",
        "ResourceClaim",
        True,
        has_status=True,
        defaulter=functools.partial(with_defaults, "ResourceClaim"),
        tracks_generation=False,
    ),
    ResourceType(
        _RESOURCE,
        "v1",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        True,
        defaulter=functools.partial(with_defaults, "ResourceClaimTemplate"),
        tracks_generation=False,
    ),
    CRD_RESOURCE,
)
