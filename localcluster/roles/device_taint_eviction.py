"""Stand-in for kube-controller-manager's device-taint eviction (embedded control plane only).

Upstream (`pkg/controller/devicetainteviction`, `Controller.claimEvictionTime` and
`Controller.addConditionAndDeletePod`): a pod
that uses an allocated claim one of whose devices carries a NoExecute taint the allocation does
not tolerate gets the condition `DisruptionTarget=True` (reason `DeletionByDeviceTaintManager`)
and is deleted, with its UID as a precondition; a toleration with `tolerationSeconds` puts the
deletion off until that long after the taint's `timeAdded`. Taints come here from the
ResourceSlices only (no DeviceTaintRules), which is where this driver puts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]
REASON = "DeletionByDeviceTaintManager"
MESSAGE = "Device Taint manager: deleting due to NoExecute taint"


def _tolerates(tolerations: list[Obj], taint: Mapping[str, Any]) -> float | None:
    """Seconds the allocation tolerates the taint (inf: for ever), None when it does not.

    As `Controller.claimEvictionTime`: only a toleration whose effect is NoExecute counts (an
    empty effect does not), matched as `resourceclaim.ToleratesTaint` matches; one without
    seconds tolerates for ever, else the smallest seconds of those that match apply."""
    best: float | None = None
    for t in tolerations:
        if t.get("effect") != "NoExecute":
            continue
        if t.get("key") and t.get("key") != taint.get("key"):
            continue
        operator = t.get("operator") or "Equal"
        if operator == "Equal" and t.get("value", "") != taint.get("value", ""):
            continue
        if operator not in ("Equal", "Exists"):
            continue
        seconds = t.get("tolerationSeconds")
        if seconds is None:
            return float("inf")
        granted = max(0.0, float(seconds))
        best = granted if best is None else min(best, granted)
    return best


def _evict_at(claim: Obj, taints: Mapping[tuple[str, str, str], list[Obj]]) -> datetime | None:
    """When the claim's pods must go (the earliest untolerated NoExecute taint), or None."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    due: datetime | None = None
    for result in (allocation.get("devices") or {}).get("results") or []:
        key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
        for taint in taints.get(key, []):
            grace = _tolerates(result.get("tolerations") or [], taint)
            if grace == float("inf"):
                continue
            added = taint.get("timeAdded")
            start = (
                datetime.fromisoformat(added.replace("Z", "+00:00"))
                if isinstance(added, str)
                else datetime.now(UTC)
            )
            at = start + timedelta(seconds=grace or 0.0)
            due = at if due is None or at < due else due
    return due


def reconcile_once(client: dynamic.DynamicClient) -> int:
    """One pass; the number of pods deleted."""
    slices = client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    claims = client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
    pods = client.resources.get(api_version="v1", kind="Pod")
    taints: dict[tuple[str, str, str], list[Obj]] = {}
    for item in slices.get().to_dict().get("items") or []:
        spec = item.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name")
        for device in spec.get("devices") or []:
            found = [t for t in device.get("taints") or [] if t.get("effect") == "NoExecute"]
            if found:
                taints[(str(spec.get("driver")), str(pool), str(device.get("name")))] = found
    if not taints:
        return 0
    now = datetime.now(UTC)
    deleted = 0
    for claim in claims.get().to_dict().get("items") or []:
        due = _evict_at(claim, taints)
        if due is None or due > now:
            continue
        namespace = claim["metadata"]["namespace"]
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("resource") != "pods":
                continue
            deleted += _delete(pods, namespace, ref["name"], ref.get("uid"))
    return deleted


def _delete(pods: Any, namespace: str, name: str, uid: str | None) -> int:
    try:
        pod = pods.get(name=name, namespace=namespace).to_dict()
    except ApiException as err:
        if err.status == 404:
            return 0
        raise
    meta = pod["metadata"]
    if meta.get("uid") != uid or meta.get("deletionTimestamp"):
        return 0
    conditions = [c for c in (pod.get("status") or {}).get("conditions") or []]
    if not any(c.get("type") == "DisruptionTarget" for c in conditions):
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": REASON,
                "message": MESSAGE,
                "lastTransitionTime": stamp,
            }
        )
        try:
            pods.status.patch(
                body={"status": {"conditions": conditions}},
                name=name,
                namespace=namespace,
                content_type="application/merge-patch+json",
            )
        except ApiException as err:
            if err.status == 404:
                return 0
            raise
    try:
        pods.delete(name=name, namespace=namespace, body={"preconditions": {"uid": uid}})
    except ApiException as err:
        if err.status in (404, 409):
            return 0
        raise
    return 1
