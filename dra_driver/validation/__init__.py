"""kube-apiserver's validation of the kinds the project reads and serves, in one place.

The embedded API server runs it on every create and update (`localcluster/validation.py`), and
`simulate`/`explain` on every object of their input file (`dra_driver/cli/inputs.py`), so a
shape a real cluster refuses is refused by both, with the field named the same way. Each module
says which upstream function it mirrors; docs/architecture.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

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


def validate_object(kind: str, obj: Obj, old: Obj | None = None) -> list[FieldError]:
    """The problems kube-apiserver would report for `obj` (empty: it would accept it).

    Raises `UndecodableError` where it would not even decode the object (answered with 400).
    Kinds without a check are accepted.
    """
    check = CHECKS.get(kind)
    return [] if check is None else check(obj, old)


__all__ = [
    "CHECKS",
    "ErrorType",
    "FieldError",
    "UndecodableError",
    "validate_object",
]
