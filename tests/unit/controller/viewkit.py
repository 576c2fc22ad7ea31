"""A `ClusterView` filled through watch events, as the informers fill it, from fake-GPU nodes."""

from __future__ import annotations

import itertools
from typing import Any

from controller.informer import Event, key_of
from controller.view import ClusterView
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import AllocationMode
from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import SliceSettings, build_resource_slices

DRIVER = DEFAULT_DRIVER_NAME
_rv = itertools.count(1)


def stamped(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = str(next(_rv))
    return obj


def put(view: ClusterView, resource: str, obj: dict[str, Any], kind: str = "ADDED") -> None:
    obj = stamped(obj)
    view.apply(Event(kind, resource, key_of(obj), obj, None))


def delete(view: ClusterView, resource: str, obj: dict[str, Any]) -> None:
    view.apply(Event("DELETED", resource, key_of(obj), stamped(dict(obj)), None))


def device_class(kind: str) -> dict[str, Any]:
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{kind}"'
    return {
        "metadata": {"name": kind},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def claim(name: str, count: int = 1, kind: str = "gpu", **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [{"name": "req", "exactly": {"deviceClassName": kind, "count": count}}]
            }
        },
    }
    if status:
        body["status"] = status
    return body


def pod(name: str, claims: list[str], **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": dict(labels),
        },
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ],
            "schedulingGates": [{"name": f"{DRIVER}/allocation"}],
        },
    }


def cluster(nodes: dict[str, str], mode: AllocationMode = AllocationMode.SCORED) -> ClusterView:
    """A view of `nodes` (name → fake GPU spec) with the gpu and mig classes."""
    view = ClusterView(mode)
    for kind in ("gpu", "mig"):
        put(view, "deviceclasses", device_class(kind))
    for name, gpus in nodes.items():
        put(view, "nodes", node(name))
        backend = FakeBackend.from_spec(gpus, name)
        for body in build_resource_slices(backend.inventory(), SliceSettings()):
            put(view, "resourceslices", body)
    return view


def devices(allocation: dict[str, Any]) -> list[str]:
    return [r["device"] for r in allocation["devices"]["results"]]
