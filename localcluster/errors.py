"""Failures as Kubernetes `Status` objects, because that is what clients parse.

The official client turns any non-2xx answer into `ApiException` whose `body` is our JSON, and
callers branch on `status` (409, 404, 422, ...) and on `reason`, so both must be exactly what a
real API server sends.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: (field path, message): the common case, reported with reason `FieldValueInvalid`.
Cause = tuple[str, str]


@dataclass(frozen=True)
class StatusCause:
    """One entry of `details.causes` when the reason is not `FieldValueInvalid` (schema errors
    say `FieldValueRequired`, `FieldValueNotSupported`...; an eviction says `DisruptionBudget`
    and names no field)."""

    message: str
    field: str = ""
    reason: str = "FieldValueInvalid"


def _cause(cause: Cause | StatusCause) -> StatusCause:
    if isinstance(cause, StatusCause):
        return cause
    return StatusCause(cause[1], cause[0])


class ApiError(Exception):
    """An error answer: HTTP code, Kubernetes reason, message and optional details."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        name: str = "",
        kind: str = "",
        group: str = "",
        causes: Sequence[Cause | StatusCause] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.name = name
        self.kind = kind
        self.group = group
        self.causes = [_cause(c) for c in causes]

    def status(self) -> dict[str, Any]:
        """The `Status` object a real API server would send for this failure."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        if self.reason:  # empty for a few upstream answers (an eviction's 500)
            body["reason"] = self.reason
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [
                {
                    "reason": c.reason,
                    **({"field": c.field} if c.field else {}),
                    "message": c.message,
                }
                for c in self.causes
            ]
        if details:
            body["details"] = details
        return body


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_what(plural, group)} "{name}" not found',
        name=name,
        kind=plural,
        group=group,
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_what(plural, group)} "{name}" already exists',
        name=name,
        kind=plural,
        group=group,
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_what(plural, group)} "{name}": {why}',
        name=name,
        kind=plural,
        group=group,
    )


def invalid(kind: str, group: str, name: str, causes: Sequence[Cause | StatusCause]) -> ApiError:
    """422 as `NewInvalid` words it: `Pod "p" is invalid: <cause>`, or `[<cause>, <cause>]`
    when there are several; the details name the kind (not the resource)."""
    listed = [f"{c.field}: {c.message}" if c.field else c.message for c in map(_cause, causes)]
    shown = listed[0] if len(listed) == 1 else f"[{', '.join(listed)}]"
    return ApiError(
        422,
        "Invalid",
        f'{_what(kind, group)} "{name}" is invalid: {shown}',
        name=name,
        kind=kind,
        group=group,
        causes=causes,
    )


class DecodeError(ApiError):
    """400: a request body that does not decode into its kind's type (`problem` says why), as
    kube-apiserver's decoder answers it: no details, only the message."""

    def __init__(self, kind: str, version: str, problem: str) -> None:
        super().__init__(
            400,
            "BadRequest",
            f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}',
        )
        self.problem = problem


def undecodable_patch(patched: object, problem: str) -> ApiError:
    """422 for a patch whose result does not decode. kube-apiserver decodes the patched object
    after applying the patch (`applyPatchToObject` in the apiserver's `handlers/patch.go`) and
    reports a failure there as an invalid `patch`, showing the whole patched object."""
    shown = json.dumps(json.dumps(patched, separators=(",", ":")))
    return invalid("", "", "", [StatusCause(f"Invalid value: {shown}: {problem}", "patch")])


def too_many_requests(message: str, causes: Sequence[StatusCause] = ()) -> ApiError:
    return ApiError(429, "TooManyRequests", message, causes=causes)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def _what(plural: str, group: str) -> str:
    """How a real API server names a resource in messages: `pods`, `leases.coordination.k8s.io`."""
    return f"{plural}.{group}" if group else plural
