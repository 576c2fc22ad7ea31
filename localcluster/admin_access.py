"""Admin access to devices is allowed only in namespaces labelled for it.

kube-apiserver checks this in the claim and claim-template strategies, not in the type's
validation, because it needs the namespace object: `AuthorizedForAdmin` (on create of a claim or
template whose requests ask for `adminAccess: true`) and `AuthorizedForAdminStatus` (on a status
write that grants admin access when the old status did not), both in
`pkg/registry/resource/utils.go`. The embedded server refuses the same writes with the same
cause, so a test that forgets the label fails here as it would on a real cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localcluster.errors import StatusCause

LABEL = "resource.kubernetes.io/admin-access"
_MESSAGE = (
    f"Forbidden: admin access to devices requires the `{LABEL}: true` label on the containing "
    "namespace"
)


def _first_admin_request(requests: Any, prefix: str) -> str:
    for i, request in enumerate(requests if isinstance(requests, list) else []):
        exactly = request.get("exactly") if isinstance(request, Mapping) else None
        if isinstance(exactly, Mapping) and exactly.get("adminAccess") is True:
            return f"{prefix}[{i}].adminAccess"
    return ""


def _first_admin_result(obj: Mapping[str, Any] | None) -> str:
    status = (obj or {}).get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    for i, result in enumerate(results if isinstance(results, list) else []):
        if isinstance(result, Mapping) and result.get("adminAccess") is True:
            return f"status.allocation.devices.results[{i}].adminAccess"
    return ""


def _spec_field(kind: str, obj: Mapping[str, Any]) -> str:
    """The path kube-apiserver names, which is `spec.devices.requests[i].adminAccess` for a
    template too, and without `exactly`: it predates the request's `exactly` level."""
    spec = obj.get("spec") or {}
    if kind == "ResourceClaimTemplate" and isinstance(spec, Mapping):
        spec = spec.get("spec") or {}
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    return _first_admin_request(requests, "spec.devices.requests")


def refusal(
    kind: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    namespace_labels: Mapping[str, Any] | None,
    *,
    status: bool,
) -> list[StatusCause]:
    """The cause to refuse `obj` with, or none. `status` is a write of the status subresource;
    otherwise only a create is checked (the spec is immutable afterwards)."""
    if kind not in ("ResourceClaim", "ResourceClaimTemplate"):
        return []
    if status:
        if kind != "ResourceClaim" or _first_admin_result(old):
            return []
        path = _first_admin_result(obj)
    elif old is None:
        path = _spec_field(kind, obj)
    else:
        return []
    if not path or (namespace_labels or {}).get(LABEL) == "true":
        return []
    return [StatusCause(_MESSAGE, path, "FieldValueForbidden")]
