"""Kubernetes objects as plain dictionaries, the way the API server stores and serves them.

Tests build claims, pods, templates, nodes and device classes here, so that a field every test
needs (a container, a namespace) is written once and a test names only what it is about. Every
object carries `apiVersion` and `kind`, so the same dictionary can be applied to the embedded
API server, handed to `simulate` in a file or fed to the controller's view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.checkpoint import ClaimRecord, ClaimState, DeviceRecord

Obj = dict[str, Any]

RESOURCE_API = "resource.k8s.io/v1"
NAMESPACE = "default"


def _metadata(
    name: str,
    namespace: str | None,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return meta


def device_class(kind: str, name: str | None = None, driver: str = DEFAULT_DRIVER_NAME) -> Obj:
    """The class of `driver`'s devices whose `type` attribute is `kind` (named `kind` unless
    `name` says otherwise)."""
    expression = f'device.driver == "{driver}" && device.attributes["{driver}"].type == "{kind}"'
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": name or kind},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def request(name: str, device_class_name: str, count: int | None = None, **exactly: Any) -> Obj:
    """A request for `count` devices of one class (the API's default of one when None)."""
    asks: Obj = {"deviceClassName": device_class_name, **exactly}
    if count is not None:
        asks["count"] = count
    return {"name": name, "exactly": asks}


def claim(
    name: str,
    *requests: Obj,
    namespace: str = NAMESPACE,
    uid: str | None = None,
    status: Obj | None = None,
    **devices: Any,
) -> Obj:
    """A ResourceClaim; `devices` adds `constraints` or `config` beside the requests."""
    body: Obj = {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": _metadata(name, namespace, uid),
        "spec": {"devices": {"requests": list(requests), **devices}},
    }
    if status is not None:
        body["status"] = status
    return body


def template(name: str, *requests: Obj, namespace: str = NAMESPACE) -> Obj:
    """A ResourceClaimTemplate whose claims ask for `requests`."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": _metadata(name, namespace),
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def _references(names: Iterable[str] | Mapping[str, str], prefix: str) -> dict[str, str]:
    if isinstance(names, Mapping):
        return dict(names)
    return {f"{prefix}{i}": name for i, name in enumerate(names)}


def pod(
    name: str,
    claims: Iterable[str] | Mapping[str, str] = (),
    *,
    templates: Iterable[str] | Mapping[str, str] = (),
    namespace: str | None = NAMESPACE,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gates: Iterable[str] = (),
    containers: list[Obj] | None = None,
    status: Obj | None = None,
    **spec: Any,
) -> Obj:
    """A pod of one container that holds the claims named in `claims` and claims from the
    templates named in `templates`; the pod's entries for them are `c0`, `c1`, ... and `t0`,
    `t1`, ..., or the keys where a mapping names them (entry name -> object name)."""
    references = [
        {"name": entry, "resourceClaimName": claim}
        for entry, claim in _references(claims, "c").items()
    ]
    references += [
        {"name": entry, "resourceClaimTemplateName": template}
        for entry, template in _references(templates, "t").items()
    ]
    body: Obj = {"containers": containers or [{"name": "main", "image": "busybox"}]}
    if references:
        body["resourceClaims"] = references
    if gates:
        body["schedulingGates"] = [{"name": gate} for gate in gates]
    made: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(name, namespace, uid, labels, annotations),
        "spec": body | spec,
    }
    if status is not None:
        made["status"] = status
    return made


def node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    ready: bool | None = None,
    **spec: Any,
) -> Obj:
    """A Node; `ready` writes its Ready condition, `allocatable` what pods may request of it."""
    status: Obj = {}
    if allocatable is not None:
        status["allocatable"] = dict(allocatable)
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _metadata(name, None, None, labels),
    }
    if spec:
        body["spec"] = spec
    if status:
        body["status"] = status
    return body


def claim_record(
    uid: str,
    devices: Sequence[tuple[str, DeviceType, int]],
    *,
    pool: str = "node",
    state: ClaimState = ClaimState.PREPARE_STARTED,
) -> ClaimRecord:
    """A checkpoint record of claim `uid` in namespace `ns`, one request `r`, holding each
    (device name, kind, GPU minor) of `devices` in `pool`."""
    return ClaimRecord(
        uid=uid,
        namespace="ns",
        name=f"claim-{uid}",
        state=state,
        devices=tuple(
            DeviceRecord(("r",), pool, name, (f"k/gpu={uid}-{i}",), device_type=kind, minor=minor)
            for i, (name, kind, minor) in enumerate(devices)
        ),
    )
