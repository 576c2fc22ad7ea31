"""Object metadata: `ValidateObjectMeta` of `k8s.io/apimachinery/pkg/api/validation` (name or
generateName, namespace, labels, annotation keys) and `ValidateObjectMetaUpdate`'s fixed name."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dra_driver.validation import decoding
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import FieldError, invalid, required
from dra_driver.validation.names import dns1123_label, label_value, qualified_name

NameCheck = Callable[[str], list[str]]


def validate_meta(obj: Obj, namespaced: bool, name_check: NameCheck) -> list[FieldError]:
    meta = decoding.mapping(obj, "metadata", "metadata")
    errors: list[FieldError] = []
    name = decoding.string(meta, "name", "metadata.name")
    generate = decoding.string(meta, "generateName", "metadata.generateName")
    if generate:
        # Upstream checks the prefix with the trailing '-' tolerated (`maskTrailingDash`).
        masked = generate[:-1] if len(generate) > 1 and generate.endswith("-") else generate
        errors.extend(invalid("metadata.generateName", generate, p) for p in name_check(masked))
    if not name:
        if not generate:
            errors.append(required("metadata.name", "name or generateName is required"))
    else:
        errors.extend(invalid("metadata.name", name, p) for p in name_check(name))
    namespace = decoding.string(meta, "namespace", "metadata.namespace")
    # A namespaced object without one gets the request's (or, offline, the default) namespace.
    if namespaced and namespace:
        errors.extend(invalid("metadata.namespace", namespace, p) for p in dns1123_label(namespace))
    labels = decoding.mapping(meta, "labels", "metadata.labels")
    for key, value in labels.items():
        errors.extend(invalid("metadata.labels", key, p) for p in qualified_name(str(key)))
        text = decoding.string_item(value, f"metadata.labels[{key}]")
        errors.extend(invalid("metadata.labels", text, p) for p in label_value(text))
    annotations = decoding.mapping(meta, "annotations", "metadata.annotations")
    for key, value in annotations.items():
        decoding.string_item(value, f"metadata.annotations[{key}]")
        lowered = str(key).lower()
        errors.extend(invalid("metadata.annotations", key, p) for p in qualified_name(lowered))
    return errors


def object_name(obj: Obj) -> str:
    """`namespace/name` or `name`, for messages; empty when the object has none."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    name = meta.get("name") or meta.get("generateName") or ""
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{name}" if namespace else str(name)
