"""Discovery documents: what `/api`, `/apis`, `/apis/<group>/<version>` and `/version` answer.

Typed clients never ask for these, but the dynamic client and kubectl do before their first
request, so they are built from the same `ResourceType` table the storage serves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from localcluster.resources import ResourceType

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-localcluster",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions() -> dict[str, Any]:
    """`/api`: the core group's versions."""
    return {
        "kind": "APIVersions",
        "apiVersion": "v1",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    }


def _groups(resources: Iterable[ResourceType]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for rt in resources:
        if rt.group:
            versions = groups.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
    return groups


def api_group(group: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": listed,
        "preferredVersion": listed[0],
    }


def api_group_list(resources: Iterable[ResourceType]) -> dict[str, Any]:
    """`/apis`: every named group with its versions."""
    groups = [api_group(g, vs) for g, vs in sorted(_groups(resources).items())]
    for entry in groups:
        del entry["kind"], entry["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def find_group(resources: Iterable[ResourceType], group: str) -> dict[str, Any] | None:
    """`/apis/<group>`, or None when no resource lives in that group."""
    versions = _groups(resources).get(group)
    return api_group(group, versions) if versions else None


def api_resource_list(
    resources: Iterable[ResourceType], group: str, version: str
) -> dict[str, Any] | None:
    """`/api/v1` or `/apis/<group>/<version>`, or None when nothing is served there."""
    entries: list[dict[str, Any]] = []
    for rt in resources:
        if rt.group == group and rt.version == version:
            entries.extend(rt.discovery())
    if not entries:
        return None
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }
