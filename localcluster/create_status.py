"""What becomes of `status` in a create, kind by kind, as kube-apiserver's create strategies do.

For a kind with a status subresource, status belongs to its controller, so a create drops what
the client sent (each registry's `PrepareForCreate`). A harness that kept it let tests create
an "already allocated" ResourceClaim in one call, which no real cluster allows; they must write
the status through `/status` afterwards, as the controller does.

Facts (kubernetes `pkg/registry/...`):
* `core/pod/strategy.go`: status reset to `{phase: Pending, qosClass: <computed>}`, with the
  condition `PodScheduled=False` (reason `SchedulingGated`) when the pod has scheduling gates
  (`applySchedulingGatedCondition`);
* `core/namespace/strategy.go`: status reset to `{phase: Active}`;
* `core/node/strategy.go`: "Nodes allow *all* fields, including status, to be set on create"
  (kubelet registers its node with status), so nodes keep it;
* `resource/resourceclaim/strategy.go`: status reset to an empty `ResourceClaimStatus`;
* `policy/poddisruptionbudget/strategy.go`: status reset to an empty status, whose four
  counters are not omitted when zero (the official client refuses a status without them);
* apiextensions' CRD strategy: status reset (the naming controller fills it in, `crds.py`);
* custom resources with a status subresource: status dropped.
Kinds without a status subresource store `status` like any other field.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from localcluster.resources import ResourceType

_KEEPS_STATUS = frozenset({"nodes"})


def _scheduling_gated() -> dict[str, Any]:
    """The condition kube-apiserver writes into a gated pod's status on create."""
    return {
        "type": "PodScheduled",
        "status": "False",
        "lastProbeTime": None,
        "lastTransitionTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
    }


def _resources(container: Mapping[str, Any], which: str) -> Mapping[str, Any]:
    found = (container.get("resources") or {}).get(which) or {}
    return found if isinstance(found, Mapping) else {}


def pod_qos_class(spec: Mapping[str, Any]) -> str:
    """`BestEffort`, `Guaranteed` or `Burstable` from cpu/memory requests and limits.

    Simplified from `pkg/apis/core/helper/qos`: quantities compare as written, not parsed.
    """
    containers = [
        c
        for field in ("initContainers", "containers")
        for c in spec.get(field) or []
        if isinstance(c, Mapping)
    ]
    compute = ("cpu", "memory")
    any_set = any(
        name in _resources(c, which)
        for c in containers
        for which in ("requests", "limits")
        for name in compute
    )
    if not any_set:
        return "BestEffort"
    for c in containers:
        limits, requests = _resources(c, "limits"), _resources(c, "requests")
        for name in compute:
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                return "Burstable"
    return "Guaranteed"


def status_on_create(rt: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The status to store for a new object (None: none at all), given the body sent."""
    sent = obj.get("status")
    if not rt.has_status or rt.key in _KEEPS_STATUS:
        return dict(sent) if isinstance(sent, Mapping) else None
    if rt.key == "pods":
        spec = obj.get("spec") or {}
        status: dict[str, Any] = {"phase": "Pending", "qosClass": pod_qos_class(spec)}
        if spec.get("schedulingGates"):
            status["conditions"] = [_scheduling_gated()]
        return status
    if rt.key == "namespaces":
        return {"phase": "Active"}
    if rt.key == "resourceclaims.resource.k8s.io":
        return {}  # an empty ResourceClaimStatus, which serialises as `{}`
    if rt.key == "poddisruptionbudgets.policy":
        return {
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        }
    return None
