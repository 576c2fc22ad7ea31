"""Stand-in for the upstream resourceclaim controller: a pod's claims from its templates, and
reservations dropped for pods that are gone or will never run.

For each pod entry `spec.resourceClaims[] {name, resourceClaimTemplateName}` without a claim yet,
it creates a ResourceClaim from the template's `spec` (generateName `<pod>-<entry>-`, owned by the
pod so it goes with it, annotated with the entry name as upstream does) and records the claim's
name in the pod's `status.resourceClaimStatuses`.
"""

from __future__ import annotations

from typing import Any

from kubernetes import dynamic
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from dra_driver.pod_claims import POD_CLAIM_NAME


def _resources(client: dynamic.DynamicClient) -> tuple[Any, Any, Any]:
    pods = client.resources.get(api_version="v1", kind="Pod")
    templates = client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate")
    claims = client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
    return pods, templates, claims


def reconcile_once(client: dynamic.DynamicClient) -> int:
    pods, templates, claims = _resources(client)
    created = 0
    for pod in pods.get().to_dict().get("items") or []:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        done = {s["name"] for s in statuses}
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or entry["name"] in done:
                continue
            template = templates.get(name=template_name, namespace=meta["namespace"]).to_dict()
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "generateName": f"{meta['name']}-{entry['name']}-",
                    "namespace": meta["namespace"],
                    "annotations": {POD_CLAIM_NAME: entry["name"]},
                    "labels": dict(
                        (template.get("spec", {}).get("metadata") or {}).get("labels") or {}
                    ),
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": (template.get("spec") or {}).get("spec") or {},
            }
            made = claims.create(body=claim, namespace=meta["namespace"]).to_dict()
            statuses.append({"name": entry["name"], "resourceClaimName": made["metadata"]["name"]})
            pods.status.patch(
                body={"status": {"resourceClaimStatuses": statuses}},
                name=meta["name"],
                namespace=meta["namespace"],
                content_type="application/merge-patch+json",
            )
            created += 1
    return created


def _done(pod: dict[str, Any]) -> bool:
    """Upstream's rule: finished, or deleted before it was ever bound to a node."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or bool(
        meta.get("deletionTimestamp") and not spec.get("nodeName")
    )


def drop_stale_reservations(client: dynamic.DynamicClient) -> int:
    """The other half of the upstream claim controller (`syncClaim`): a claim stays reserved
    only for pods that exist and may still run. A pod deleted before it was bound (a gated pod,
    say, deleted just as its claims were allocated) has no kubelet to let go of its claims, so
    without this they would stay reserved, and allocated, for ever. Pods the node agent runs are
    released by it, after their devices are unprepared."""
    pods, _, claims = _resources(client)
    by_uid = {p["metadata"]["uid"]: p for p in pods.get().to_dict().get("items") or []}
    changed = 0
    for claim in claims.get().to_dict().get("items") or []:
        meta = claim["metadata"]
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        kept = [r for r in reserved if not _gone_or_done(pods, meta["namespace"], r, by_uid)]
        if len(kept) == len(reserved):
            continue
        try:
            claims.status.patch(
                body={
                    "metadata": {"resourceVersion": meta["resourceVersion"]},
                    "status": {"reservedFor": kept or None},
                },
                name=meta["name"],
                namespace=meta["namespace"],
                content_type="application/merge-patch+json",
            )
        except ConflictError:
            continue  # changed meanwhile: the next pass looks again
        changed += 1
    return changed


def _gone_or_done(
    pods: Any, namespace: str, ref: dict[str, Any], by_uid: dict[str, dict[str, Any]]
) -> bool:
    if ref.get("resource") != "pods":
        return False
    pod = by_uid.get(ref.get("uid", ""))
    if pod is None:  # not in the list: created since, or really gone? Ask, as upstream does.
        try:
            pod = pods.get(name=ref.get("name"), namespace=namespace).to_dict()
        except NotFoundError:
            return True
        if pod["metadata"]["uid"] != ref.get("uid"):
            return True
    return _done(pod)
