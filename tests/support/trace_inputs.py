"""Small trace-shaped simulate inputs: two nodes with two GPUs each, published as the trace
benchmark publishes them (a whole device and a shared `gpumilli` device per GPU, excluding each
other through a counter), claim templates for whole GPUs and shares, and timed pods."""

from __future__ import annotations

from typing import Any

from dra_driver.simulation.pods import ARRIVAL, DEPARTURE
from tests.bench.traces import cluster
from tests.support import objects

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
    return objects.template(name, {"name": "gpu", "exactly": exactly}, namespace="ns")


def pod(
    name: str, template: str, arrival: float | None = None, departure: float | None = None
) -> dict[str, Any]:
    """A small pod whose one claim `gpu` comes from `template`."""
    claims = [{"name": "gpu", "resourceClaimTemplateName": template}]
    return sim_pod(name, "100m", "128Mi", claims, arrival, departure)


def sim_pod(
    name: str,
    cpu: str,
    memory: str = "1Gi",
    claims: list[dict[str, str]] | None = None,
    arrival: float | None = None,
    departure: float | None = None,
) -> dict[str, Any]:
    """A pod in namespace `ns` with its requests, claims and timeline annotations."""
    annotations = {}
    if arrival is not None:
        annotations[ARRIVAL] = str(arrival)
    if departure is not None:
        annotations[DEPARTURE] = str(departure)
    container = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": name, "annotations": annotations},
        "spec": {"containers": [container], "resourceClaims": claims or []},
    }
