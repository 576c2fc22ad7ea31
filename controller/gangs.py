"""Gangs: pods that are allocated all together or not at all.

A gang is named by a pod label and its size by another; members are the pods of one namespace
with the same name. Distributed training is the reason: half a gang holding GPUs while the other
half waits is worse than none of it starting, because the holders block other work and the job
cannot run anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class GangId:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class GangError(ValueError):
    """A pod's gang labels are unusable; the message names the pod and the label."""


def gang_of(pod: Mapping[str, Any], name_label: str, size_label: str) -> tuple[GangId, int] | None:
    meta = pod.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    name = labels.get(name_label)
    if not name:
        return None
    where = f"pod {meta.get('namespace')}/{meta.get('name')}"
    raw = labels.get(size_label)
    if raw is None:
        raise GangError(f"{where}: label {name_label} is set but {size_label} is missing")
    try:
        size = int(raw)
    except ValueError:
        raise GangError(f"{where}: label {size_label}={raw!r} is not a number") from None
    if size < 1:
        raise GangError(f"{where}: label {size_label}={raw!r} must be at least 1")
    return GangId(str(meta.get("namespace") or ""), name), size


def members(gang: GangId, pods: Iterable[Obj], name_label: str) -> list[Obj]:
    """The gang's live pods in name order (pods being deleted no longer count)."""
    found = [
        p
        for p in pods
        if (p.get("metadata") or {}).get("namespace") == gang.namespace
        and ((p.get("metadata") or {}).get("labels") or {}).get(name_label) == gang.name
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    return sorted(found, key=lambda p: str(p["metadata"]["name"]))
