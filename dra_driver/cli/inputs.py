"""Reading a multi-document YAML file of cluster objects for the offline tools.

Only the kinds allocation looks at are accepted; anything else is reported with its position in
the file, because a typo in `kind` would otherwise silently drop devices or claims.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KINDS = (
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "Node",
    "Pod",
    "GpuQueue",
)


class InputFileError(ValueError):
    """The input file cannot be used; the message names the document and field."""


@dataclass
class ClusterObjects:
    slices: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    """In file order: `simulate` places them after the claims no pod uses."""
    queues: list[dict[str, Any]] = field(default_factory=list)
    """GpuQueue objects: when any is given, `simulate` replays the pods through queues."""


def _add(objects: ClusterObjects, doc: object, where: str) -> None:
    if not isinstance(doc, Mapping):
        raise InputFileError(f"{where}: expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List")):
        for i, item in enumerate(doc.get("items") or []):
            _add(objects, item, f"{where} items[{i}]")
        return
    if kind not in KINDS:
        raise InputFileError(
            f"{where}: kind {kind!r} is not one of {', '.join(KINDS)} (or a List of them)"
        )
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise InputFileError(f"{where}: {kind} has no metadata.name")
    target = {
        "ResourceSlice": objects.slices,
        "DeviceClass": objects.classes,
        "ResourceClaim": objects.claims,
        "ResourceClaimTemplate": objects.templates,
        "Node": objects.nodes,
        "Pod": objects.pods,
        "GpuQueue": objects.queues,
    }[kind]
    target.append(dict(doc))


def load_objects(path: Path) -> ClusterObjects:
    try:
        text = path.read_text()
    except OSError as err:
        raise InputFileError(f"{path}: {err.strerror}") from None
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise InputFileError(f"{path}: not valid YAML: {err}") from None
    objects = ClusterObjects()
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        _add(objects, doc, f"{path} document {index + 1}")
    return objects
