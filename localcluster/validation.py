"""Default validators: reject what kube-apiserver would reject, for the kinds the project uses.

The rules are the shared core's (`dra_driver.validation`), so `simulate` refuses the same
objects with the same field paths. A value that does not decode (a quantity that does not
parse, a string where a list belongs) is answered as kube-apiserver answers it, 400 BadRequest
without details (422 with the cause `patch` when it is the result of a patch, see
`Store.patch`); every other problem is 422 Invalid with one cause per field. Custom resources
(GpuQueue) are checked against their CRD's schema and rules instead (`crds.py`), as in a real
cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.validation import (
    STATUS_UPDATES,
    FieldError,
    UndecodableError,
    validate_object,
    validate_status_update,
)
from localcluster.errors import ApiError, DecodeError, StatusCause
from localcluster.resources import Admit, Validator


def _bad_request(kind: str, version: str, err: UndecodableError) -> ApiError:
    # Upstream's decoder names no field (no `details`); the field stays in `simulate`'s words.
    return DecodeError(kind, version, err.problem)


def _causes(problems: Sequence[FieldError]) -> list[StatusCause]:
    return [StatusCause(p.message, p.field, p.type.reason) for p in problems]


def _validator(kind: str, version: str) -> Validator:
    def validate(
        obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> Sequence[tuple[str, str] | StatusCause]:
        try:
            problems = validate_object(kind, obj, old)
        except UndecodableError as err:
            raise _bad_request(kind, version, err) from None
        return _causes(problems)

    return validate


def _status_strategy(kind: str, version: str) -> Admit:
    """A status write: the shared core's status strategy (`validate_status_update`)."""

    def prepare_and_validate(
        obj: dict[str, Any], old: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], Sequence[tuple[str, str] | StatusCause]]:
        try:
            stored, problems = validate_status_update(kind, obj, old or {})
        except UndecodableError as err:
            raise _bad_request(kind, version, err) from None
        return stored, _causes(problems)

    return prepare_and_validate


_KINDS: tuple[tuple[str, str, str], ...] = (
    ("pods", "Pod", "v1"),
    ("nodes", "Node", "v1"),
    ("namespaces", "Namespace", "v1"),
    ("resourceclaims.resource.k8s.io", "ResourceClaim", "v1"),
    ("resourceclaimtemplates.resource.k8s.io", "ResourceClaimTemplate", "v1"),
    ("deviceclasses.resource.k8s.io", "DeviceClass", "v1"),
    ("resourceslices.resource.k8s.io", "ResourceSlice", "v1"),
)

DEFAULT_VALIDATORS: Mapping[str, Validator] = {
    key: _validator(kind, version) for key, kind, version in _KINDS
}

#: The built-in kinds whose status writes kube-apiserver checks beyond decoding.
DEFAULT_STATUS_STRATEGIES: Mapping[str, Admit] = {
    key: _status_strategy(kind, version) for key, kind, version in _KINDS if kind in STATUS_UPDATES
}
