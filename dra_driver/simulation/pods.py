"""The claims a pod uses, made from its ResourceClaimTemplates as the resource claim controller
makes them, and the timeline annotations a replay reads.

A simulated cluster has no controller, so `simulate` plays its part: a claim made from a template
is named `<pod>-<claim>-<suffix>`, owned by the pod and annotated with the pod's claim entry, which
is what tools looking at a real cluster see.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Mapping
from typing import Any

from dra_driver.allocator import InputError
from dra_driver.pod_claims import POD_CLAIM_NAME

ARRIVAL = "sim.dra-driver.dev/arrival"
"""Seconds from the start of the replay at which the pod (or lone claim) arrives."""
DEPARTURE = "sim.dra-driver.dev/departure"
"""Seconds at which it leaves again, releasing its node resources and claims."""


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _suffix(pod: Mapping[str, Any], entry: str) -> str:
    """Five characters like the API server's generateName, but stable: reruns give equal names."""
    digest = hashlib.sha256(f"{key_of(pod)}/{entry}".encode()).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = int(digest[:16], 16)
    out = []
    for _ in range(5):
        value, rest = divmod(value, len(alphabet))
        out.append(alphabet[rest])
    return "".join(out)


def claim_from_template(
    pod: Mapping[str, Any], entry: str, template: Mapping[str, Any]
) -> dict[str, Any]:
    """The ResourceClaim the resource claim controller would make for `pod`'s entry `entry`."""
    meta = pod.get("metadata") or {}
    tmeta = (template.get("spec") or {}).get("metadata") or {}
    pod_name = str(meta.get("name"))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{pod_name}-{entry}-{_suffix(pod, entry)}",
            "namespace": meta.get("namespace") or "default",
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_NAME: entry},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": meta.get("uid") or "",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
    }


def pod_claims(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """The claims of `pod` in spec order: named ones looked up, templated ones made.

    Raises InputError naming the pod and entry when a claim or template is not in the input.
    """
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    found: list[Mapping[str, Any]] = []
    for i, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
        name = entry.get("name") or f"claim-{i}"
        if entry.get("resourceClaimName"):
            key = f"{namespace}/{entry['resourceClaimName']}"
            claim = claims.get(key)
            if claim is None:
                raise InputError(
                    f"Pod {key_of(pod)}: spec.resourceClaims[{i}] names ResourceClaim {key}, "
                    "which is not in the input"
                )
            found.append(claim)
        elif entry.get("resourceClaimTemplateName"):
            key = f"{namespace}/{entry['resourceClaimTemplateName']}"
            template = templates.get(key)
            if template is None:
                raise InputError(
                    f"Pod {key_of(pod)}: spec.resourceClaims[{i}] names "
                    f"ResourceClaimTemplate {key}, which is not in the input"
                )
            found.append(claim_from_template(pod, str(name), template))
        else:
            raise InputError(
                f"Pod {key_of(pod)}: spec.resourceClaims[{i}] names neither a "
                "resourceClaimName nor a resourceClaimTemplateName"
            )
    return found


def seconds(obj: Mapping[str, Any], annotation: str) -> float | None:
    """A timeline annotation in seconds, or None when absent; InputError when malformed."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InputError(
            f"{obj.get('kind')} {key_of(obj)}: annotation {annotation} must be a number of "
            f"seconds, got {raw!r}"
        ) from None
    if math.isnan(value) or value < 0:
        raise InputError(f"{obj.get('kind')} {key_of(obj)}: annotation {annotation} is negative")
    return value
