"""Pods: `ValidatePodCreate`, `ValidatePodSpec` (containers, init containers, resource claims,
scheduling gates) and the scheduling-gate and toleration rules of `ValidatePodUpdate`, from
`pkg/apis/core/validation/validation.go`.

Only what the project's kinds touch is checked; a field this module does not know is accepted,
so it never refuses a pod kube-apiserver would take.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.validation import decoding
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    required,
)
from dra_driver.validation.meta import validate_meta
from dra_driver.validation.names import dns1123_label, dns1123_subdomain, qualified_name
from dra_driver.validation.resources import requirements, resource_list


def validate_pod(pod: Obj, old: Obj | None = None) -> list[FieldError]:
    errors = validate_meta(pod, True, dns1123_subdomain)
    meta = decoding.mapping(pod, "metadata", "metadata")
    spec = decoding.mapping(pod, "spec", "spec")
    errors += pod_spec(spec, decoding.string(meta, "name", "metadata.name"), "spec")
    gates = _gate_names(spec, "spec.schedulingGates")
    if old is None:
        if decoding.string(spec, "nodeName", "spec.nodeName") and gates:
            errors.append(
                forbidden(
                    "spec.nodeName", "cannot be set until all schedulingGates have been cleared"
                )
            )
    else:
        old_spec = decoding.mapping(old, "spec", "spec")
        errors += _only_added_tolerations(spec, old_spec, "spec.tolerations")
        old_gates = set(_gate_names(old_spec, "spec.schedulingGates"))
        for index, gate in enumerate(gates):
            if gate not in old_gates:
                errors.append(
                    forbidden(
                        f"spec.schedulingGates[{index}].name",
                        f"only deletion is allowed, but found new scheduling gate '{gate}'",
                    )
                )
    return errors


def pod_spec(spec: Obj, pod_name: str, field: str) -> list[FieldError]:
    errors, claim_names = _pod_claims(spec, pod_name, f"{field}.resourceClaims")
    containers = decoding.items(spec, "containers", f"{field}.containers")
    if not containers:
        errors.append(required(f"{field}.containers"))
    names: set[str] = set()
    errors += _containers(containers, names, claim_names, f"{field}.containers")
    init = decoding.items(spec, "initContainers", f"{field}.initContainers")
    errors += _containers(init, names, claim_names, f"{field}.initContainers")
    seen: set[str] = set()
    for index, gate in enumerate(_gate_names(spec, f"{field}.schedulingGates")):
        where = f"{field}.schedulingGates[{index}]"
        errors += [invalid(where, gate, p) for p in qualified_name(gate)]
        if gate in seen:
            errors.append(duplicate(where, gate))
        seen.add(gate)
    overhead = f"{field}.overhead"
    for _, _, problems in resource_list(
        decoding.mapping(spec, "overhead", overhead), overhead
    ).values():
        errors += problems
    pod_resources = decoding.mapping(spec, "resources", f"{field}.resources")
    for key in ("requests", "limits"):
        where = f"{field}.resources.{key}"
        for _, _, problems in resource_list(
            decoding.mapping(pod_resources, key, where), where
        ).values():
            errors += problems
    return errors


def _containers(
    containers: Sequence[Any], names: set[str], claim_names: set[str], field: str
) -> list[FieldError]:
    """`validateContainers` and `validateInitContainers`: names unique across both lists."""
    errors: list[FieldError] = []
    for index, raw in enumerate(containers):
        where = f"{field}[{index}]"
        container = decoding.item_mapping(raw, where)
        name = decoding.string(container, "name", f"{where}.name")
        if not name:
            errors.append(required(f"{where}.name"))
        elif name in names:
            errors.append(duplicate(f"{where}.name", name))
        else:
            errors += [invalid(f"{where}.name", name, p) for p in dns1123_label(name)]
        names.add(name)
        image = decoding.string(container, "image", f"{where}.image")
        if image != image.strip():
            errors.append(
                invalid(f"{where}.image", image, "must not have leading or trailing whitespace")
            )
        resources = decoding.mapping(container, "resources", f"{where}.resources")
        errors += requirements(resources, claim_names, f"{where}.resources")
    return errors


def _pod_claims(spec: Obj, pod_name: str, field: str) -> tuple[list[FieldError], set[str]]:
    """`validatePodResourceClaim` for each entry; also the names containers may use."""
    errors: list[FieldError] = []
    names: set[str] = set()
    for index, raw in enumerate(decoding.items(spec, "resourceClaims", field)):
        where = f"{field}[{index}]"
        claim = decoding.item_mapping(raw, where)
        name = decoding.string(claim, "name", f"{where}.name")
        claim_name = claim.get("resourceClaimName")
        template = claim.get("resourceClaimTemplateName")
        if claim_name is not None:
            decoding.string(claim, "resourceClaimName", f"{where}.resourceClaimName")
        if template is not None:
            decoding.string(
                claim, "resourceClaimTemplateName", f"{where}.resourceClaimTemplateName"
            )
        if not name:
            errors.append(required(f"{where}.name"))
        elif name in names:
            errors.append(duplicate(f"{where}.name", name))
        else:
            problems = dns1123_label(name)
            errors += [invalid(f"{where}.name", name, p) for p in problems]
            if not problems and template is not None and pod_name:
                generated = f"{pod_name}-{name}"
                errors += [
                    invalid(f"{where}.name", generated, f"final ResourceClaim name: {p}")
                    for p in dns1123_subdomain(generated)
                ]
            names.add(name)
        if claim_name is not None and template is not None:
            errors.append(
                invalid(
                    where,
                    dict(claim),
                    "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be "
                    "specified",
                )
            )
        if claim_name is None and template is None:
            errors.append(
                invalid(
                    where,
                    dict(claim),
                    "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
        for key, value in (
            ("resourceClaimName", claim_name),
            ("resourceClaimTemplateName", template),
        ):
            if isinstance(value, str):
                errors += [invalid(f"{where}.{key}", value, p) for p in dns1123_subdomain(value)]
    return errors, names


def _toleration(raw: object, field: str) -> tuple[object, ...]:
    """A toleration as `validateOnlyAddedTolerations` compares it: every field but
    `tolerationSeconds`, a missing one the same as an empty one."""
    toleration = decoding.item_mapping(raw, field)
    return tuple(toleration.get(key) or "" for key in ("key", "operator", "value", "effect"))


def _only_added_tolerations(spec: Obj, old_spec: Obj, field: str) -> list[FieldError]:
    """`validateOnlyAddedTolerations`: an update may add tolerations and change their
    `tolerationSeconds`, not remove or change one (one error for the whole list)."""
    new = {
        _toleration(raw, f"{field}[{index}]")
        for index, raw in enumerate(decoding.items(spec, "tolerations", field))
    }
    for index, raw in enumerate(decoding.items(old_spec, "tolerations", field)):
        if _toleration(raw, f"{field}[{index}]") not in new:
            return [
                forbidden(
                    field, "existing toleration can not be modified except its tolerationSeconds"
                )
            ]
    return []


def _gate_names(spec: Obj, field: str) -> list[str]:
    gates = []
    for index, raw in enumerate(decoding.items(spec, "schedulingGates", field)):
        where = f"{field}[{index}]"
        gate = decoding.item_mapping(raw, where)
        gates.append(decoding.string(gate, "name", f"{where}.name"))
    return gates
