"""The Helm chart rendered offline, as `helm template` would: the deploy tests check what it
renders, and the local cluster on the real control plane installs its RBAC, ServiceAccounts,
admission policy and DeviceClasses from it, so the daemons run with exactly the chart's rights.

helm-python-sdk embeds Helm itself (no helm binary, no cluster). Its public `Chart.render` does
not pass a Kubernetes version; the native call it wraps does, and the chart's `kubeVersion`
constraint makes the version matter, so the render goes through that call. The SDK is a test
dependency: only the tests and the real-control-plane local cluster import this module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "gpu-dra-driver"
RELEASE = "dra"
NAMESPACE = "dra-system"


def render_text(
    values: dict[str, Any],
    kube_version: str = "1.36.0",
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Template path -> rendered text; raises helm_python's errors as they come."""
    import helm_python as helm  # noqa: PLC0415 - a test dependency, see the module docstring
    from helm_python import _native  # noqa: PLC0415

    if not CHART.is_dir():
        raise FileNotFoundError(f"the Helm chart is not at {CHART} (a source checkout has it)")
    options = {
        "name": release,
        "namespace": namespace,
        "is_install": True,
        "kube_version": f"v{kube_version}",
    }
    with helm.Chart.load(CHART) as chart:
        rendered = _native.call_string(
            "helm_render", chart._raw(), json.dumps(values), json.dumps(options)
        )
    manifests: dict[str, str] = json.loads(rendered)
    return manifests


def render_objects(
    values: dict[str, Any], kube_version: str = "1.36.0", *, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """The chart's Kubernetes objects (NOTES.txt left out), in template-path order."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(render_text(values, kube_version, namespace=namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(d for d in yaml.safe_load_all(text) if d)
    return objects
