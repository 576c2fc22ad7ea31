"""The defaults kube-apiserver fills in before it validates, for the kinds whose defaults change
what validation and allocation see.

resource.k8s.io/v1 defaults a device request's allocation mode to `ExactCount` and, in that
mode, a count of zero (or none) to one: `SetDefaults_ExactDeviceRequest` and
`SetDefaults_DeviceSubRequest` in `pkg/apis/resource/v1/defaults.go`. The count is a plain
integer there, so an explicit `count: 0` cannot be told from a missing one and is stored as 1;
only a negative count reaches `validateDeviceAllocationMode` and is refused. The embedded API
server applies these on every create and update, and `simulate` to every object it reads, so a
file means what it would mean once applied to a cluster.

A device taint without `timeAdded` gets the time of the write, to the second
(`SetDefaults_DeviceTaint`): a NoExecute taint's toleration seconds count from it, so a writer
that re-sends a taint without the stored time restarts that clock.

Values of the wrong type are left as they are: validation reports them with their field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any


def _request(request: object) -> None:
    if not isinstance(request, dict):
        return
    if request.get("allocationMode") in (None, ""):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and request.get("count") in (None, 0):
        request["count"] = 1


def _claim_spec(spec: object) -> None:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    if not isinstance(requests, list):
        return
    for request in requests:
        if not isinstance(request, dict):
            continue
        _request(request.get("exactly"))
        subrequests = request.get("firstAvailable")
        if isinstance(subrequests, list):
            for sub in subrequests:
                _request(sub)


def _claim(obj: dict[str, Any]) -> None:
    _claim_spec(obj.get("spec"))


def _template(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        _claim_spec(spec.get("spec"))


def _slice(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for device in devices if isinstance(devices, list) else []:
        taints = device.get("taints") if isinstance(device, dict) else None
        for taint in taints if isinstance(taints, list) else []:
            if isinstance(taint, dict) and taint.get("timeAdded") is None:
                taint["timeAdded"] = now


#: kind → the defaulting it gets (in place, on a copy made by `with_defaults`).
DEFAULTERS: Mapping[str, Callable[[dict[str, Any]], None]] = {
    "ResourceClaim": _claim,
    "ResourceClaimTemplate": _template,
    "ResourceSlice": _slice,
}


def with_defaults(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `obj` with kube-apiserver's defaults for its kind filled in."""
    result: dict[str, Any] = copy.deepcopy(dict(obj))
    defaulter = DEFAULTERS.get(kind)
    if defaulter is not None:
        defaulter(result)
    return result
