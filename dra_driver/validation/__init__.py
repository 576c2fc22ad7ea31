"""kube-apiserver's validation of the kinds the project reads and serves, in one place.

The embedded API server runs it on every create and update (`localcluster/validation.py`), and
`simulate`/`explain` on every object of their input file (`dra_driver/cli/inputs.py`), so a
shape a real cluster refuses is refused by both, with the field named the same way. Each module
says which upstream function it mirrors; docs/architecture.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dra_driver.validation.claim_status import (
    drop_deallocated_devices,
    validate_claim_status_update,
)
from dra_driver.validation.claims import validate_claim, validate_device_class, validate_template
from dra_driver.validation.cluster_objects import validate_queue, validate_slice
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import ErrorType, FieldError, UndecodableError
from dra_driver.validation.nodes import validate_namespace, validate_node
from dra_driver.validation.pods import validate_pod

Check = Callable[[Obj, Obj | None], list[FieldError]]

#: kind → its check (new object, old object on update or None).
CHECKS: Mapping[str, Check] = {
    "Pod": validate_pod,
    "Node": validate_node,
    "Namespace": validate_namespace,
    "ResourceClaim": validate_claim,
    "ResourceClaimTemplate": validate_template,
    "DeviceClass": validate_device_class,
    "ResourceSlice": validate_slice,
    "GpuQueue": validate_queue,
}


StatusUpdate = Callable[[Obj, Obj], tuple[dict[str, Any], list[FieldError]]]


def _claim_status_update(claim: Obj, old: Obj) -> tuple[dict[str, Any], list[FieldError]]:
    prepared = drop_deallocated_devices(claim, old)
    return prepared, validate_claim_status_update(prepared, old)


#: kind → what its status strategy does on a status write: (new object, old object) → (the
#: object to store, problems). Kinds without an entry take any status.
STATUS_UPDATES: Mapping[str, StatusUpdate] = {"ResourceClaim": _claim_status_update}


def validate_status_update(
    kind: str, obj: Obj, old: Obj
) -> tuple[dict[str, Any], list[FieldError]]:
    """A write to the `status` subresource as kube-apiserver's status strategy handles it: the
    object to store after its `PrepareForUpdate` (a claim loses the device entries of devices it
    no longer has allocated) and the problems its `ValidateUpdate` reports (empty: accepted).

    Raises `UndecodableError` where the status would not decode (answered with 400).
    """
    update = STATUS_UPDATES.get(kind)
    return (dict(obj), []) if update is None else update(obj, old)


def validate_object(kind: str, obj: Obj, old: Obj | None = None) -> list[FieldError]:
    """The problems kube-apiserver would report for `obj` (empty: it would accept it).

    Raises `UndecodableError` where it would not even decode the object (answered with 400).
    Kinds without a check are accepted.
    """
    check = CHECKS.get(kind)
    return [] if check is None else check(obj, old)


__all__ = [
    "CHECKS",
    "STATUS_UPDATES",
    "ErrorType",
    "FieldError",
    "UndecodableError",
    "validate_object",
    "validate_status_update",
]
