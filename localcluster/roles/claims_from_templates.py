"""Stand-in for the upstream resourceclaim controller: a pod's claims from its templates.

For each pod entry `spec.resourceClaims[] {name, resourceClaimTemplateName}` without a claim yet,
it creates a ResourceClaim from the template's `spec` (generateName `<pod>-<entry>-`, owned by the
pod so it goes with it, annotated with the entry name as upstream does) and records the claim's
name in the pod's `status.resourceClaimStatuses`.
"""

from __future__ import annotations

from typing import Any

from kubernetes import dynamic

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
