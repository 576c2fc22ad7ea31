"""Workload profiles: the pod shapes the scored placement weighs by, written down.

One format serves three places, so what one writes the others read:

- a cluster admin's configured profile (a file, or a ConfigMap mounted as one), given to the
  controller with `--workload-profile` and to `simulate` with `--workload`;
- the profile the controller learns from the pods it places, kept in a ConfigMap (under the
  key `PROFILE_KEY`) so that a restart or a new leader goes on from it instead of from nothing;
- `simulate --workload learned`, given that ConfigMap in its input, to replay what the
  controller learns from it on (or `simulate --workload` given it as a file, to weigh by it as
  it stands).

A profile is a list of entries, each a pod's requests (CPU, memory, ... as in a container's
`resources.requests`) and the `spec` of each of its ResourceClaims, with a `count` of pods of
that shape (or a `weight`, any positive number: only the proportions matter):

    shapes:
    - count: 30
      requests: {cpu: "4", memory: 16Gi}
      claims:
      - devices:
          requests:
          - name: gpu
            exactly: {deviceClassName: gpu.nvidia.com, count: 1}

Claims are written as specs rather than as shapes because a shape (its device selectors) is
worked out against the DeviceClasses the cluster has when it is used
(`dra_driver.simulation.profile`): the same entry stays right when a class changes. This module
needs nothing of the allocator, so the command line reads profiles without loading the replay.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_driver.noderesources import CPU, Resources, parse_list, pod_requests

PROFILE_KEY = "profile.yaml"
"""The ConfigMap data key a profile is kept under."""


@dataclass(frozen=True, slots=True)
class ProfileEntry:
    requests: Resources
    claims: tuple[Mapping[str, Any], ...]
    """The `spec` of each of the pod's ResourceClaims."""
    weight: float

    @property
    def key(self) -> str:
        """The entry's identity: equal pods make equal keys, whatever their names."""
        return json.dumps(
            {"requests": dict(sorted(self.requests.items())), "claims": list(self.claims)},
            sort_keys=True,
            separators=(",", ":"),
        )


def entry_of(
    pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], weight: float = 1
) -> ProfileEntry:
    """The entry of one pod with these claims."""
    specs = tuple(dict(claim.get("spec") or {}) for claim in claims)
    return ProfileEntry(pod_requests(pod), specs, weight)


def parse_profile(data: object, source: str) -> list[ProfileEntry]:
    """Entries of a profile document (already loaded from YAML or JSON); ValueError naming
    `source` and the field when it is not one."""
    if not isinstance(data, Mapping) or not isinstance(data.get("shapes"), list):
        raise ValueError(f"workload profile {source}: expected a mapping with a `shapes` list")
    entries = []
    for i, raw in enumerate(data["shapes"]):
        where = f"workload profile {source}: shapes[{i}]"
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where} must be a mapping")
        unknown = set(raw) - {"count", "weight", "requests", "claims"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        if ("count" in raw) == ("weight" in raw):
            raise ValueError(f"{where}: give exactly one of `count` and `weight`")
        field = "count" if "count" in raw else "weight"
        weight = raw[field]
        if field == "count" and (isinstance(weight, bool) or not isinstance(weight, int)):
            raise ValueError(f"{where}.count must be a whole number, got {weight!r}")
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise ValueError(f"{where}.{field} must be above 0, got {weight!r}")
        requests = raw.get("requests") or {}
        if not isinstance(requests, Mapping):
            raise ValueError(f"{where}.requests must be a mapping of resource to quantity")
        parsed = parse_list(requests, keep=lambda _: True)
        bad = sorted(str(name) for name in requests if str(name) not in parsed)
        if bad:
            raise ValueError(f"{where}.requests.{bad[0]}: {requests[bad[0]]!r} is no quantity")
        claims = raw.get("claims") or []
        if not isinstance(claims, list) or not all(isinstance(c, Mapping) for c in claims):
            raise ValueError(f"{where}.claims must be a list of ResourceClaim specs")
        entries.append(ProfileEntry(parsed, tuple(dict(c) for c in claims), float(weight)))
    return entries


def profile_text(text: str, source: str) -> list[ProfileEntry]:
    """A profile from YAML or JSON: the profile itself, or a ConfigMap holding it under
    `PROFILE_KEY` (as `kubectl get configmap -o yaml` writes the controller's)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"workload profile {source}: not YAML or JSON: {err}") from None
    if isinstance(data, Mapping) and data.get("kind") == "ConfigMap":
        inner = (data.get("data") or {}).get(PROFILE_KEY)
        if not isinstance(inner, str):
            raise ValueError(f"workload profile {source}: the ConfigMap has no data.{PROFILE_KEY}")
        return profile_text(inner, f"{source} (data.{PROFILE_KEY})")
    return parse_profile(data, source)


def stored_profile(configmaps: Sequence[Mapping[str, Any]]) -> list[ProfileEntry] | None:
    """The profile the controller keeps in a ConfigMap, among these (the one with
    `data.PROFILE_KEY`); None when none holds one. ValueError when several do (which is the
    controller's cannot be told) or the profile is unreadable."""
    found = [c for c in configmaps if PROFILE_KEY in (c.get("data") or {})]
    names = [
        f"{m.get('namespace') or 'default'}/{m.get('name')}"
        for m in (c.get("metadata") or {} for c in found)
    ]
    if len(found) > 1:
        raise ValueError(
            f"{len(found)} ConfigMaps hold data.{PROFILE_KEY} ({', '.join(names)}): keep only "
            "the one the controller keeps its learned workload profile in"
        )
    if not found:
        return None
    text = found[0]["data"][PROFILE_KEY]
    if not isinstance(text, str):
        raise ValueError(f"ConfigMap {names[0]}: data.{PROFILE_KEY} must be a string")
    return profile_text(text, f"ConfigMap {names[0]} (data.{PROFILE_KEY})")


def profile_file(path: str | Path, flag: str) -> list[ProfileEntry]:
    """The profile in the file a flag names; ValueError naming the flag, file and field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"{flag} {path}: {err.strerror}") from None
    return profile_text(text, str(path))


def dump_profile(entries: Sequence[ProfileEntry]) -> str:
    """The profile as YAML, most common shape first; counts stay whole numbers. Quantities are
    written exactly (CPU in millicores, the rest in plain units) so a profile read back is the
    one written."""
    shapes = []
    for entry in sorted(entries, key=lambda e: (-e.weight, e.key)):
        weight: dict[str, Any] = (
            {"count": int(entry.weight)}
            if float(entry.weight).is_integer()
            else {"weight": entry.weight}
        )
        requests = {
            name: (f"{amount}m" if name == CPU else str(amount))
            for name, amount in sorted(entry.requests.items())
        }
        shapes.append({**weight, "requests": requests, "claims": [dict(c) for c in entry.claims]})
    return yaml.safe_dump({"shapes": shapes}, sort_keys=False)
