"""How a strategic merge patch treats each list field of the kinds served by default.

A strategic merge patch is only as good as its knowledge of the type: kube-apiserver reads the
`patchStrategy` / `patchMergeKey` struct tags of k8s.io/api (`core/v1/types.go`,
`resource/v1/types.go`, `meta/v1/types.go`), published in the OpenAPI document as
`x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key`. This table holds those facts
(as of Kubernetes 1.35+) for the fields the local API server serves; paths are dotted, with
`[]` for "each element of this list".

Every list field not named here has no patch strategy, and a strategic merge patch replaces it
whole, as upstream does: `spec.tolerations` and node `spec.taints` (declared atomic), and almost
every list of resource.k8s.io (ResourceSlice devices, claim requests, allocation results...).
Kinds missing from `STRATEGIES` (custom resources) get 415 for a strategic merge patch, because
kube-apiserver has no Go type to read tags from for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ListStrategy:
    """`patchStrategy:"merge"`: `merge_key` None is a set of scalars (`metadata.finalizers`),
    otherwise elements merge by that key; `retain_keys` adds `retainKeys` (union members)."""

    merge_key: str | None
    retain_keys: bool = False


Strategies = Mapping[str, ListStrategy]


def _under(prefix: str, table: Strategies) -> dict[str, ListStrategy]:
    return {f"{prefix}.{path}": strategy for path, strategy in table.items()}


# meta/v1 ObjectMeta: finalizers `patchStrategy:"merge"`; ownerReferences merge on `uid`.
_OBJECT_META: Strategies = {
    "finalizers": ListStrategy(None),
    "ownerReferences": ListStrategy("uid"),
}

# core/v1 Container (and EphemeralContainer): env by name, ports by containerPort, volumeMounts
# by mountPath, volumeDevices by devicePath. envFrom, resizePolicy, command, args: atomic.
_CONTAINER: Strategies = {
    "env": ListStrategy("name"),
    "ports": ListStrategy("containerPort"),
    "volumeMounts": ListStrategy("mountPath"),
    "volumeDevices": ListStrategy("devicePath"),
}

# core/v1 ContainerStatus.
_CONTAINER_STATUS: Strategies = {
    "volumeMounts": ListStrategy("mountPath"),
    "allocatedResourcesStatus": ListStrategy("name"),
}

_POD: dict[str, ListStrategy] = {
    **_under("metadata", _OBJECT_META),
    # PodSpec
    "spec.volumes": ListStrategy("name", retain_keys=True),
    "spec.initContainers": ListStrategy("name"),
    "spec.containers": ListStrategy("name"),
    "spec.ephemeralContainers": ListStrategy("name"),
    **_under("spec.initContainers[]", _CONTAINER),
    **_under("spec.containers[]", _CONTAINER),
    **_under("spec.ephemeralContainers[]", _CONTAINER),
    "spec.imagePullSecrets": ListStrategy("name"),
    "spec.hostAliases": ListStrategy("ip"),
    "spec.topologySpreadConstraints": ListStrategy("topologyKey"),
    "spec.schedulingGates": ListStrategy("name"),
    "spec.resourceClaims": ListStrategy("name", retain_keys=True),
    # PodStatus
    "status.conditions": ListStrategy("type"),
    "status.podIPs": ListStrategy("ip"),
    "status.hostIPs": ListStrategy("ip"),
    "status.resourceClaimStatuses": ListStrategy("name", retain_keys=True),
    **_under("status.initContainerStatuses[]", _CONTAINER_STATUS),
    **_under("status.containerStatuses[]", _CONTAINER_STATUS),
    **_under("status.ephemeralContainerStatuses[]", _CONTAINER_STATUS),
}

_NODE: dict[str, ListStrategy] = {
    **_under("metadata", _OBJECT_META),
    "spec.podCIDRs": ListStrategy(None),
    "status.conditions": ListStrategy("type"),
    "status.addresses": ListStrategy("type"),
}

_NAMESPACE: dict[str, ListStrategy] = {
    **_under("metadata", _OBJECT_META),
    "status.conditions": ListStrategy("type"),
}

# resource/v1: only ResourceClaimStatus.reservedFor carries a patch strategy (merge on uid).
_RESOURCE_CLAIM: dict[str, ListStrategy] = {
    **_under("metadata", _OBJECT_META),
    "status.reservedFor": ListStrategy("uid"),
}

_RESOURCE_CLAIM_TEMPLATE: dict[str, ListStrategy] = {
    **_under("metadata", _OBJECT_META),
    **_under("spec.metadata", _OBJECT_META),
}

_METADATA_ONLY: dict[str, ListStrategy] = _under("metadata", _OBJECT_META)

STRATEGIES: Mapping[str, Strategies] = {
    "namespaces": _NAMESPACE,
    "nodes": _NODE,
    "pods": _POD,
    "events": _METADATA_ONLY,
    "configmaps": _METADATA_ONLY,
    "leases.coordination.k8s.io": _METADATA_ONLY,
    "resourceslices.resource.k8s.io": _METADATA_ONLY,
    "deviceclasses.resource.k8s.io": _METADATA_ONLY,
    "resourceclaims.resource.k8s.io": _RESOURCE_CLAIM,
    "resourceclaimtemplates.resource.k8s.io": _RESOURCE_CLAIM_TEMPLATE,
    # policy/v1 PodDisruptionBudgetStatus.conditions merge on `type`.
    "poddisruptionbudgets.policy": {
        **_under("metadata", _OBJECT_META),
        "status.conditions": ListStrategy("type"),
    },
    "customresourcedefinitions.apiextensions.k8s.io": _METADATA_ONLY,
}
"""Resource key (`ResourceType.key`) to its list strategies."""


def strategies_for(resource_key: str) -> Strategies | None:
    """The kind's strategies; None when it has no Go type (strategic merge is refused)."""
    return STRATEGIES.get(resource_key)
