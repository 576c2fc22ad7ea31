"""Rendering the Helm chart offline for the deploy tests: the value sets they check, rendered
once per run through :mod:`localcluster.chart`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from localcluster.chart import (
    CHART,  # noqa: F401 - the deploy tests read it from here
    NAMESPACE,
    RELEASE,
)
from localcluster.chart import render_text as chart_render_text

ROOT = Path(__file__).resolve().parents[2]
KUBE_VERSIONS = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")

#: The value sets every test renders: the defaults and the ways the chart is meant to be used.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    # What hack/kind-up.sh installs.
    "kind": {
        "fakeGpus": {"enabled": True, "profile": "H100-SXM5-80GB", "count": 8},
        "image": {"tag": "dev", "pullPolicy": "Never"},
        "logging": {"format": "console", "level": "debug"},
        "kubeletPlugin": {"claimCache": True},
    },
    # Another driver name, a subset of shapes, extended resources and explicit names; the
    # Grafana dashboard; a configured workload profile.
    "custom-driver": {
        "driverName": "gpu.example.com",
        "kubeletPlugin": {
            "shapes": ["gpu", "mig"],
            "timesliceShares": 0,
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
        },
        "controller": {
            "mode": "first-fit",
            "gateName": "example.com/gpu-placement",
            "leaderElection": {"leaseName": "gpu-placement"},
            "queues": {"defaultQueue": "unassigned", "reclaimHold": "120s"},
            "workloadProfile": {
                "shapes": [{"weight": 0.5, "requests": {"cpu": "2", "memory": "8Gi"}, "claims": []}]
            },
        },
        "deviceClasses": {"extendedResourceNames": {"gpu": "nvidia.com/gpu"}},
        "nvidiaDriverRoot": "/run/nvidia/driver",
        "grafanaDashboard": {"enabled": True},
    },
    # The plugin alone: no controller, no admission policy, no metrics.
    "plugin-only": {
        "driverName": "acme.example.org",
        "controller": {"enabled": False},
        "admissionPolicy": {"enabled": False},
        "kubeletPlugin": {
            "metricsPort": 0,
            "tolerations": [],
            "priorityClassName": "",
            "updateStrategy": {"maxSurge": 0, "maxUnavailable": 1},
        },
        "fakeGpus": {"enabled": True, "profile": "A100-SXM4-40GB", "count": 2},
    },
}


def render_text(values: dict[str, Any], kube_version: str = "1.36.0") -> dict[str, str]:
    """Template path -> rendered text; raises helm_python's errors as they come."""
    return chart_render_text(values, kube_version, release=RELEASE, namespace=NAMESPACE)


@functools.cache
def render(value_set: str, kube_version: str = "1.36.0") -> tuple[dict[str, Any], ...]:
    """The Kubernetes objects of one value set (NOTES.txt left out), rendered once per run."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(render_text(VALUE_SETS[value_set], kube_version).items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(d for d in yaml.safe_load_all(text) if d)
    return tuple(objects)


def find(objects: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    found = find(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]
