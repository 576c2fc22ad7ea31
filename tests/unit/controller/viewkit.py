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
from tests.support import objects

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


def node(name: str) -> dict[str, Any]:
    return objects.node(name, labels={"kubernetes.io/hostname": name}, ready=True)


def claim(name: str, count: int = 1, kind: str = "gpu", **status: Any) -> dict[str, Any]:
    """A claim for `count` devices of the class named `kind`; `status` as the API would hold it."""
    request = objects.request("req", kind, count)
    return objects.claim(name, request, uid=f"uid-{name}", status=status or None)


def pod(name: str, claims: list[str], **labels: str) -> dict[str, Any]:
    """A pod the controller's gate holds."""
    gate = f"{DRIVER}/allocation"
    return objects.pod(name, claims, uid=f"uid-{name}", labels=labels, gates=[gate])


def cluster(nodes: dict[str, str], mode: AllocationMode = AllocationMode.SCORED) -> ClusterView:
    """A view of `nodes` (name → fake GPU spec) with the gpu and mig classes."""
    view = ClusterView(mode)
    for kind in ("gpu", "mig"):
        put(view, "deviceclasses", objects.device_class(kind, driver=DRIVER))
    for name, gpus in nodes.items():
        put(view, "nodes", node(name))
        backend = FakeBackend.from_spec(gpus, name)
        for body in build_resource_slices(backend.inventory(), SliceSettings()):
            put(view, "resourceslices", body)
    return view


def devices(allocation: dict[str, Any]) -> list[str]:
    return [r["device"] for r in allocation["devices"]["results"]]
