"""Which ResourceClaims a pod uses: what the scheduler, the controller and kubelet all ask."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
"""The annotation the resource claim controller puts on a claim it makes from a template: the
pod's `spec.resourceClaims` entry it stands for."""


def _entries(pod: Mapping[str, Any]) -> list[str | None]:
    """Per `spec.resourceClaims` entry, its claim's name, or None while a templated claim has
    not been made yet (its name is recorded in `status.resourceClaimStatuses` once it is)."""
    made = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    found: list[str | None] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or made.get(entry["name"])
        found.append(str(name) if name else None)
    return found


def claim_names(pod: Mapping[str, Any]) -> list[str] | None:
    """The pod's claim names in spec order; None while a templated claim has no name yet (the
    claims-from-templates controller has not created it)."""
    names = _entries(pod)
    if any(n is None for n in names):
        return None
    return [n for n in names if n is not None]


def known_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claim names a pod already knows, also while some templated claims are not made yet
    (who uses a claim must be known before all of a pod's claims exist)."""
    return [n for n in _entries(pod) if n is not None]
