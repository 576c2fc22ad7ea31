"""Small trace-shaped simulate inputs: two nodes with two GPUs each, published as the trace
benchmark publishes them (a whole device and a shared `gpumilli` device per GPU, excluding each
other through a counter), claim templates for whole GPUs and shares, and timed pods."""

from __future__ import annotations

from typing import Any

from tests.bench.traces import cluster

NODES = [
    {"sn": f"n{i}", "cpu_milli": "8000", "memory_mib": "32768", "gpu": "2", "model": "V100"}
    for i in range(2)
]


def base() -> list[dict[str, Any]]:
    nodes, slices, classes = cluster(NODES)
    templates = [
        _template("whole-1", {"deviceClassName": "whole", "count": 1}),
        _template("whole-2", {"deviceClassName": "whole", "count": 2}),
    ]
    for milli in (250, 500):
        request = {"deviceClassName": "shared", "capacity": {"requests": {"gpumilli": str(milli)}}}
        templates.append(_template(f"milli-{milli}", request))
    return [*nodes, *slices, *classes, *templates]


def _template(name: str, exactly: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod(
    name: str, template: str, arrival: float | None = None, departure: float | None = None
) -> dict[str, Any]:
    annotations = {}
    if arrival is not None:
        annotations["sim.dra-driver.dev/arrival"] = str(arrival)
    if departure is not None:
        annotations["sim.dra-driver.dev/departure"] = str(departure)
    container = {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    return {
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": name, "annotations": annotations},
        "spec": {
            "containers": [container],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }
