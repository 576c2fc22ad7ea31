"""Small builders for ResourceSlices, DeviceClasses and ResourceClaims in allocator tests."""

from __future__ import annotations

from typing import Any

from tests.support import objects

Obj = dict[str, Any]

DRV = "gpu.example.com"


def dev(name: str, kind: str = "gpu", numa: int = 0, **fields: Any) -> Obj:
    attributes = {"type": {"string": kind}, "numa": {"int": numa}}
    attributes.update(fields.pop("attributes", {}))
    return {"name": name, "attributes": attributes, **fields}


def slice_(
    name: str,
    devices: list[Obj],
    *,
    node: str | None = "node-a",
    pool: str | None = None,
    driver: str = DRV,
    generation: int = 1,
    count: int = 1,
    counters: list[Obj] | None = None,
    **spec: Any,
) -> Obj:
    body: Obj = {
        "driver": driver,
        "pool": {
            "name": pool or node or "pool",
            "generation": generation,
            "resourceSliceCount": count,
        },
        **spec,
    }
    if node is not None:
        body["nodeName"] = node
    if devices:
        body["devices"] = devices
    if counters:
        body["sharedCounters"] = counters
    return {"metadata": {"name": name}, "spec": body}


def device_class(name: str, *expressions: str, config: list[Obj] | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = config
    return {"metadata": {"name": name}, "spec": spec}


def exactly(cls: str = "gpu", count: int | None = None, *selectors: str, **fields: Any) -> Obj:
    body: Obj = {"deviceClassName": cls, **fields}
    if count is not None:
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return body


def claim(name: str, *requests: Obj, constraints: list[Obj] | None = None, **devices: Any) -> Obj:
    if constraints:
        devices["constraints"] = constraints
    return objects.claim(name, *requests, namespace="ns", uid=f"uid-{name}", **devices)


def request(name: str, body: Obj) -> Obj:
    return {"name": name, "exactly": body}


def first_available(name: str, *subs: tuple[str, Obj]) -> Obj:
    return {"name": name, "firstAvailable": [{"name": n, **b} for n, b in subs]}


def picked(allocation: Obj | None) -> list[str]:
    assert allocation is not None
    return [r["device"] for r in allocation["devices"]["results"]]


GPU_CLASS = device_class("gpu", f'device.driver == "{DRV}"')
