"""Reading a multi-document YAML file of cluster objects for the offline tools.

Only the kinds allocation looks at are accepted; anything else is reported with its position in
the file, because a typo in `kind` would otherwise silently drop devices or claims. Each object
is checked with kube-apiserver's rules (`dra_driver.validation`): a file that a cluster could
never hold gives an error naming the object and the field, not a plausible answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dra_driver.validation import UndecodableError, validate_object
from dra_driver.validation.defaults import with_defaults
from dra_driver.validation.meta import object_name

KINDS = (
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "Node",
    "Pod",
    "GpuQueue",
    "ConfigMap",
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
    configmaps: list[dict[str, Any]] = field(default_factory=list)
    """Read only by `--workload learned`: the controller's learned profile, kept in one."""


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
    doc = with_defaults(kind, doc)
    _check(doc, kind, where)
    target = {
        "ResourceSlice": objects.slices,
        "DeviceClass": objects.classes,
        "ResourceClaim": objects.claims,
        "ResourceClaimTemplate": objects.templates,
        "Node": objects.nodes,
        "Pod": objects.pods,
        "GpuQueue": objects.queues,
        "ConfigMap": objects.configmaps,
    }[kind]
    target.append(dict(doc))


def _check(doc: Mapping[str, Any], kind: str, where: str) -> None:
    """Refuse what kube-apiserver would refuse, naming the object and every field at fault.

    ResourceSlices are left to the allocator's snapshot, which reports an unusable pool by name:
    recorded clusters keep devices and shared counters in one slice, a layout the API server's
    per-slice limits refuse but allocation reads the same way."""
    if kind == "ResourceSlice":
        return
    name = object_name(doc)
    try:
        problems = [str(p) for p in validate_object(kind, doc)]
    except UndecodableError as err:
        problems = [f"{err.field}: {err.problem}"]
    if problems:
        raise InputFileError(f"{where}: {kind} {name} is invalid: {'; '.join(problems)}")


def load_objects(path: Path) -> ClusterObjects:
    try:
        text = path.read_text()
    except OSError as err:
        raise InputFileError(f"{path}: {err.strerror}") from None
    documents = _documents(path, text)
    objects = ClusterObjects()
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        _add(objects, doc, f"{path} document {index + 1}")
    return objects


_NOT_JSON = object()
_YAML_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?")
"""A JSON number YAML 1.1 also reads as a float: a dot, and a sign on any exponent."""
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _documents(path: Path, text: str) -> list[object]:
    """The file's documents. A large input is read fast when it is JSON (which is YAML) and
    with libyaml otherwise; what is read is what the YAML reader makes of the same text, and
    errors are worded by the pure-Python YAML reader, as they always were."""
    parsed = _json(text)
    if parsed is not _NOT_JSON:
        return [parsed]
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return list(yaml.load_all(text, Loader=fast))
        except yaml.YAMLError:
            pass  # read again below, for the error's usual wording
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise InputFileError(f"{path}: not valid YAML: {err}") from None


def _json(text: str) -> object:
    """`text` read as JSON with YAML 1.1's scalars (`1e3` and `NaN` stay strings, as YAML reads
    them), or `_NOT_JSON`. Surrogate escapes are left to YAML, which reads them apart."""
    start = text.lstrip()[:1]
    if start not in ("{", "[") or _SURROGATE.search(text):
        return _NOT_JSON
    try:
        return json.loads(
            text,
            parse_float=lambda s: float(s) if _YAML_FLOAT.fullmatch(s) else s,
            parse_constant=lambda s: s,
        )
    except ValueError:
        return _NOT_JSON
