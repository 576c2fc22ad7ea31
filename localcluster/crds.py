"""CustomResourceDefinitions: writing one makes the local API server serve its resource.

kube-apiserver's apiextensions part does this in a few controllers; here one observer on the
store follows CRD writes, under the store's lock, so a custom resource is usable by the time
the CRD's create answers (upstream it follows within moments; clients that wait for the
`Established` condition see it set at once):

* create or update: each served version becomes a `ResourceType` (names, scope, status
  subresource from the CRD), whose `admit` prunes, defaults and validates objects against that
  version's `openAPIV3Schema` and its CEL rules; the CRD's status gets `acceptedNames`,
  `storedVersions` and the `NamesAccepted` and `Established` conditions;
* delete: its objects are deleted (watchers see DELETED events), then it is no longer served.

Simplifications: no conversion between versions (all versions share one storage and an object
keeps the apiVersion it was written with, as with `strategy: None`); no cleanup finalizer, so a
CRD's deletion is immediate; the structural-schema check covers the common mistakes (missing
`type`, `properties` beside `additionalProperties`, a root that is not an object), not all.
"""

from __future__ import annotations

import datetime
import functools
import importlib.resources
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import yaml

from localcluster import cel_rules, openapi_schema
from localcluster.errors import StatusCause
from localcluster.resources import CRD_RESOURCE, ResourceType
from localcluster.storage import Event, Store

CRD_KEY = CRD_RESOURCE.key

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SCOPES = ("Namespaced", "Cluster")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec(crd: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = crd.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _schema(version: Mapping[str, Any]) -> Mapping[str, Any] | None:
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    return schema if isinstance(schema, Mapping) else None


# ---- custom objects -------------------------------------------------------------------------


#: Schema errors after which kube-apiserver does not evaluate CEL rules (`hasBlockingErr`):
#: the rules may assume the types, sizes and required fields the schema promises.
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
_RULES_NOT_CHECKED = StatusCause(
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
    "<nil>",
)


def admit_custom_object(
    schema: Mapping[str, Any], obj: dict[str, Any], old: Mapping[str, Any] | None
) -> tuple[dict[str, Any], Sequence[StatusCause]]:
    """Prune, default and validate one custom object, then evaluate the schema's CEL rules,
    unless a blocking schema error came first (then one cause says the rules were skipped)."""
    admitted, problems = openapi_schema.admit_value(schema, obj)
    if cel_rules.has_rules(schema):
        if any(p.reason in _BLOCKING for p in problems):
            problems.append(_RULES_NOT_CHECKED)
        else:
            problems.extend(cel_rules.check_rules(schema, admitted, old))
    return admitted, problems


def resource_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The served versions of a (valid) CRD, storage version first."""
    spec = _spec(crd)
    names = spec.get("names") or {}
    kind = str(names["kind"])
    versions = sorted(
        (v for v in spec.get("versions") or () if v.get("served")),
        key=lambda v: not v.get("storage"),
    )
    return [
        ResourceType(
            str(spec["group"]),
            str(version["name"]),
            str(names["plural"]),
            kind,
            spec.get("scope") == "Namespaced",
            has_status="status" in (version.get("subresources") or {}),
            short_names=tuple(names.get("shortNames") or ()),
            singular=str(names.get("singular") or kind.lower()),
            list_kind_name=str(names.get("listKind") or f"{kind}List"),
            categories=tuple(names.get("categories") or ()),
            admit=functools.partial(admit_custom_object, _schema(version) or {}),
        )
        for version in versions
    ]


# ---- the CRD objects themselves -------------------------------------------------------------


def _structural_problems(schema: Mapping[str, Any], path: str, root: bool) -> list[StatusCause]:
    problems: list[StatusCause] = []
    untyped = not schema.get("type") and not (
        schema.get(openapi_schema.INT_OR_STRING) or schema.get(openapi_schema.PRESERVE)
    )
    if untyped:
        problems.append(
            StatusCause(
                "Required value: must not be empty for specified object fields",
                f"{path}.type",
                "FieldValueRequired",
            )
        )
    if root and schema.get("type") not in (None, "object"):
        problems.append(
            StatusCause(
                f'Invalid value: "{schema.get("type")}": must be object at the root', f"{path}.type"
            )
        )
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(
            StatusCause(
                "Forbidden: additionalProperties and properties are mutual exclusive",
                f"{path}.additionalProperties",
                "FieldValueForbidden",
            )
        )
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            problems.extend(_structural_problems(sub, f"{path}.properties[{name}]", False))
    for key in ("items", "additionalProperties"):
        sub = schema.get(key)
        if isinstance(sub, Mapping):
            problems.extend(_structural_problems(sub, f"{path}.{key}", False))
    return problems


def validate_crd(crd: Mapping[str, Any], builtin_keys: frozenset[str]) -> list[StatusCause]:
    """What kube-apiserver would refuse in a CRD, for the rules clients are likely to break."""
    spec = _spec(crd)
    names = spec.get("names") or {}
    group = str(spec.get("group") or "")
    plural = str(names.get("plural") or "")
    problems: list[StatusCause] = []
    if "." not in group:
        problems.append(
            StatusCause(
                f'Invalid value: "{group}": should be a domain with at least one dot', "spec.group"
            )
        )
    for field in ("plural", "kind"):
        if not names.get(field):
            problems.append(
                StatusCause("Required value", f"spec.names.{field}", "FieldValueRequired")
            )
    if plural and not _DNS_LABEL.match(plural):
        problems.append(
            StatusCause(
                f'Invalid value: "{plural}": a lowercase RFC 1123 label', "spec.names.plural"
            )
        )
    name = str((crd.get("metadata") or {}).get("name") or "")
    if plural and group and name != f"{plural}.{group}":
        problems.append(
            StatusCause(
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                "metadata.name",
            )
        )
    if f"{plural}.{group}" in builtin_keys:
        problems.append(
            StatusCause(
                f"Forbidden: {plural}.{group} is served by the API server",
                "spec.names.plural",
                "FieldValueForbidden",
            )
        )
    if spec.get("scope") not in _SCOPES:
        supported = ", ".join(f'"{s}"' for s in _SCOPES)
        problems.append(
            StatusCause(
                f"Unsupported value: {openapi_schema.shown(spec.get('scope'))}: "
                f"supported values: {supported}",
                "spec.scope",
                "FieldValueNotSupported",
            )
        )
    problems.extend(_version_problems(spec.get("versions") or []))
    return problems


def _version_problems(versions: list[Any]) -> list[StatusCause]:
    problems: list[StatusCause] = []
    if not versions:
        return [
            StatusCause(
                "Required value: must have exactly one version marked as storage version",
                "spec.versions",
                "FieldValueRequired",
            )
        ]
    if sum(1 for v in versions if isinstance(v, Mapping) and v.get("storage")) != 1:
        problems.append(
            StatusCause(
                "Invalid value: must have exactly one version marked as storage version",
                "spec.versions",
            )
        )
    if not any(isinstance(v, Mapping) and v.get("served") for v in versions):
        problems.append(
            StatusCause("Invalid value: must serve at least one version", "spec.versions")
        )
    schemas = [_schema(v) if isinstance(v, Mapping) else None for v in versions]
    # kube-apiserver validates its internal form, where a schema every version shares is held
    # once, as `spec.validation` (v1 conversion); its errors name that path.
    shared = (
        schemas[0] if schemas[0] is not None and all(s == schemas[0] for s in schemas) else None
    )
    for position, version in enumerate(versions):
        where = f"spec.versions[{position}]"
        if not isinstance(version, Mapping) or not version.get("name"):
            problems.append(StatusCause("Required value", f"{where}.name", "FieldValueRequired"))
            continue
        schema = schemas[position]
        if schema is None:
            problems.append(
                StatusCause(
                    "Required value",
                    f"{where}.schema.openAPIV3Schema",
                    "FieldValueRequired",
                )
            )
            continue
        if shared is None:
            problems.extend(_schema_problems(schema, f"{where}.schema.openAPIV3Schema"))
    if shared is not None:
        problems.extend(_schema_problems(shared, "spec.validation.openAPIV3Schema"))
    return problems


def _schema_problems(schema: Mapping[str, Any], path: str) -> list[StatusCause]:
    problems = _structural_problems(schema, path, True)
    problems.extend(StatusCause(m, f) for f, m in cel_rules.rule_problems(schema, path))
    return problems


def _condition(kind: str, reason: str, message: str, old: Mapping[str, Any]) -> dict[str, Any]:
    previous = next((c for c in (old.get("conditions") or ()) if c.get("type") == kind), None)
    since = previous.get("lastTransitionTime") if previous else None
    return {
        "type": kind,
        "status": "True",
        "lastTransitionTime": since or _now(),
        "reason": reason,
        "message": message,
    }


def crd_status(crd: Mapping[str, Any]) -> dict[str, Any]:
    """What upstream's naming and establishing controllers write once a CRD is served."""
    spec = _spec(crd)
    old = crd.get("status") or {}
    names = dict(spec.get("names") or {})
    storage = [str(v["name"]) for v in spec.get("versions") or () if v.get("storage")]
    stored = list(old.get("storedVersions") or [])
    stored += [v for v in storage if v not in stored]
    return {
        "conditions": [
            _condition("NamesAccepted", "NoConflicts", "no conflicts found", old),
            _condition(
                "Established", "InitialNamesAccepted", "the initial names have been accepted", old
            ),
        ],
        "acceptedNames": names,
        "storedVersions": stored,
    }


def _with_defaults(crd: dict[str, Any]) -> dict[str, Any]:
    """Upstream's defaults for names: singular is the lowercase kind, listKind kind + List."""
    names = _spec(crd).get("names")
    if isinstance(names, dict) and names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    return crd


class CustomResourceDefinitions:
    """Keeps a store's served resources in step with its CRD objects."""

    def __init__(self, builtin_keys: frozenset[str]) -> None:
        self._builtin = builtin_keys
        self._store: Store | None = None

    def resource_type(self, base: ResourceType = CRD_RESOURCE) -> ResourceType:
        return replace(base, admit=self._admit)

    def attach(self, store: Store) -> None:
        self._store = store
        store.observe(self._on_event)

    def _admit(
        self, crd: dict[str, Any], old: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], Sequence[StatusCause]]:
        crd = _with_defaults(crd)
        return crd, validate_crd(crd, self._builtin)

    def _on_event(self, event: Event) -> None:
        if event.resource != CRD_KEY or self._store is None:
            return
        store = self._store
        key = f"{_spec(event.obj).get('names', {}).get('plural')}.{_spec(event.obj).get('group')}"
        if event.type == "DELETED":
            store.unregister(key)
            return
        store.register(resource_types(event.obj))
        status = crd_status(event.obj)
        if status != event.obj.get("status"):
            name = str(event.obj["metadata"]["name"])
            store.update(store.types[CRD_KEY], "", name, {"status": status}, status=True)


def bundled_definitions() -> list[dict[str, Any]]:
    """The CRDs the chart installs, read from `localcluster/manifests/`.

    Those files are symlinks to `deploy/helm/gpu-dra-driver/crds/`, so a source checkout reads
    the chart's own files and a wheel (setuptools copies a link's target) carries their
    content: one copy of each definition, wherever the local cluster runs.
    """
    folder = importlib.resources.files("localcluster") / "manifests"
    found: list[dict[str, Any]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            found.extend(d for d in yaml.safe_load_all(entry.read_text()) if d)
    return found
