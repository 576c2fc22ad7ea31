"""Which ResourceClaims a pod uses: what the scheduler, the controller and kubelet all ask."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def claim_names(pod: Mapping[str, Any]) -> list[str] | None:
    """The pod's claim names in spec order; None while a templated claim has no name yet (the
    claims-from-templates stand-in has not created it)."""
    made = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names: list[str] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or made.get(entry["name"])
        if not name:
            return None
        names.append(str(name))
    return names


def known_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claim names a pod already knows, also while some templated claims are not made yet
    (who uses a claim must be known before all of a pod's claims exist)."""
    made = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names: list[str] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or made.get(entry["name"])
        if name:
            names.append(str(name))
    return names
