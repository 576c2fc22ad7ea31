"""Nodes and Namespaces: `ValidateNode` (name, taints, capacity and allocatable quantities) and
`ValidateNamespace` (a DNS-1123 label) of `pkg/apis/core/validation/validation.go`."""

from __future__ import annotations

from dra_driver.validation import decoding
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import FieldError, invalid, not_supported, required
from dra_driver.validation.meta import validate_meta
from dra_driver.validation.names import dns1123_label, dns1123_subdomain, qualified_name
from dra_driver.validation.quantities import decode_quantity, nonnegative, whole
from dra_driver.validation.resources import is_integer_resource

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def validate_node(node: Obj, old: Obj | None = None) -> list[FieldError]:
    del old  # nothing of a node that the project writes is immutable
    errors = validate_meta(node, False, dns1123_subdomain)
    spec = decoding.mapping(node, "spec", "spec")
    for index, raw in enumerate(decoding.items(spec, "taints", "spec.taints")):
        where = f"spec.taints[{index}]"
        # `ValidateNode` checks the taints under the metadata's path, so kube-apiserver names
        # them `metadata.taints[...]` (decoding errors keep the JSON path).
        named = f"metadata.taints[{index}]"
        taint = decoding.item_mapping(raw, where)
        key = decoding.string(taint, "key", f"{where}.key")
        if not key:
            errors.append(required(f"{named}.key"))
        errors += [invalid(f"{named}.key", key, p) for p in qualified_name(key) if key]
        decoding.string(taint, "value", f"{where}.value")
        effect = decoding.string(taint, "effect", f"{where}.effect")
        if not effect:
            errors.append(required(f"{named}.effect"))
        elif effect not in TAINT_EFFECTS:
            errors.append(not_supported(f"{named}.effect", effect, TAINT_EFFECTS))
    status = decoding.mapping(node, "status", "status")
    for key in ("capacity", "allocatable"):
        listed = decoding.mapping(status, key, f"status.{key}")
        for name, raw in listed.items():
            where = f"status.{key}.{name}"
            errors += [invalid(where, name, p) for p in qualified_name(str(name))]
            value = decode_quantity(raw, where)
            errors += nonnegative(raw, value, where)
            if is_integer_resource(str(name)):
                errors += whole(raw, value, where)
    return errors


def validate_namespace(namespace: Obj, old: Obj | None = None) -> list[FieldError]:
    del old
    return validate_meta(namespace, False, dns1123_label)
