"""The pod both demo scenarios create: one container holding one GPU from a claim template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def one_gpu_pod(
    name: str,
    namespace: str,
    template: str,
    *,
    annotations: Mapping[str, str] | None = None,
    gate: str | None = None,
) -> dict[str, Any]:
    """A pod whose container uses the claim made from `template`; with `gate`, held back by
    that scheduling gate for the allocation controller."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
    }
    if gate:
        spec["schedulingGates"] = [{"name": gate}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
