"""Objects kube-apiserver refuses, one per row of the table in docs/architecture.md's validation
section, and valid objects of every kind the project reads, for the tests of
`dra_driver.validation` through the embedded API server and through `simulate`."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


def pod(name: str = "p", namespace: str = "default", **container: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox", **container}]},
    }


def claim(name: str = "c", namespace: str = "default", count: int | None = None) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu"}
    if count is not None:
        exactly["count"] = count
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
    }


@dataclass(frozen=True)
class Refused:
    """An object and how kube-apiserver refuses it: the HTTP code and the field it names."""

    label: str
    obj: Obj
    code: int
    field: str
    message: str
    """What the cause (422) or the body's message (400) says, in part."""

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


def _requests(**amounts: str) -> Obj:
    return {"resources": {"requests": amounts}}


def _two_named_c() -> Obj:
    obj = pod("two-c")
    obj["spec"]["containers"].append({"name": "c", "image": "busybox"})
    return obj


def _no_containers() -> Obj:
    obj = pod("empty")
    obj["spec"]["containers"] = []
    return obj


_CPU = "spec.containers[0].resources.requests[cpu]"
_NOT_A_QUANTITY = "quantities must match the regular expression"

#: The issue's table: each accepted before, each refused by kube-apiserver.
REFUSED: tuple[Refused, ...] = (
    Refused("cpu-lots", pod("cpu-lots", **_requests(cpu="lots")), 400, _CPU, _NOT_A_QUANTITY),
    Refused(
        "cpu-negative",
        pod("cpu-negative", **_requests(cpu="-1")),
        422,
        _CPU,
        'Invalid value: "-1": must be greater than or equal to 0',
    ),
    Refused(
        "memory-two-dots",
        pod("memory-two-dots", **_requests(memory="1.5.5Gi")),
        400,
        "spec.containers[0].resources.requests[memory]",
        _NOT_A_QUANTITY,
    ),
    Refused(
        "duplicate-container",
        _two_named_c(),
        422,
        "spec.containers[1].name",
        'Duplicate value: "c"',
    ),
    Refused("no-containers", _no_containers(), 422, "spec.containers", "Required value"),
    Refused(
        "upper-case-name",
        pod("Upper_Case"),
        422,
        "metadata.name",
        'Invalid value: "Upper_Case": a lowercase RFC 1123 subdomain must consist of',
    ),
    # The table has `count: 0` here, but resource.k8s.io/v1 defaults a zero count to one
    # before validating (`SetDefaults_ExactDeviceRequest`), so kube-apiserver stores it as 1;
    # only a negative count is refused (tests/integration/apiserver/test_object_validation.py
    # shows the zero defaulted).
    Refused(
        "count-negative",
        claim("count-negative", count=-1),
        422,
        "spec.devices.requests[0].exactly.count",
        "Invalid value: -1: must be greater than zero",
    ),
)


def fresh(obj: Obj) -> Obj:
    return copy.deepcopy(obj)
