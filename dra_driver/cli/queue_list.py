"""Reading every GpuQueue from the API server for `dra-driver queues`, with each way it can fail
turned into one line a person can act on.

The likeliest failure is a cluster without the CRD (the chart installed without its CRDs, or an
older chart): the API server then answers 404 for the whole resource, which the generic client
reports as a bare "Not Found". That case is named for what it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client

from dra_driver.kube_client import api_client
from dra_driver.queues.spec import GROUP, PLURAL, VERSION

REQUEST_TIMEOUT_S = 30.0
RESOURCE = f"{PLURAL}.{GROUP}/{VERSION}"


class QueueListError(Exception):
    """The queues could not be listed; the message is one line."""


def default_kubeconfig(given: str | None) -> str | None:
    """The flag's value, else ~/.kube/config when it exists (as kubectl does), else None for
    the in-cluster configuration."""
    if given:
        return given
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else None


def list_queues(kubeconfig: str | None) -> list[dict[str, Any]]:
    """Every GpuQueue object, as the API server returns it."""
    try:
        api = api_client(default_kubeconfig(kubeconfig))
    except ValueError as err:
        raise QueueListError(str(err)) from None
    server = str(api.configuration.host)
    try:
        with api:
            found = client.CustomObjectsApi(api).list_cluster_custom_object(
                GROUP, VERSION, PLURAL, _request_timeout=REQUEST_TIMEOUT_S
            )
    except client.ApiException as err:
        if err.status == 404:
            raise QueueListError(
                f"the GpuQueue CRD is not installed: {server} does not serve {RESOURCE}; "
                "install the chart's CRDs (deploy/helm/gpu-dra-driver/crds/)"
            ) from None
        raise QueueListError(
            f"cannot list {RESOURCE} at {server}: {err.status} {err.reason}{_detail(err)}"
        ) from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        raise QueueListError(f"cannot reach the API server at {server}: {_reason(err)}") from None
    items = found.get("items") if isinstance(found, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]


def list_claims(kubeconfig: str | None) -> list[dict[str, Any]] | None:
    """Every ResourceClaim, as the API server returns it; None when they cannot be read (no
    permission, no server): the queues are still worth listing without them."""
    try:
        api = api_client(default_kubeconfig(kubeconfig))
    except ValueError:
        return None
    try:
        with api:
            found = client.CustomObjectsApi(api).list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceclaims", _request_timeout=REQUEST_TIMEOUT_S
            )
    except (client.ApiException, urllib3.exceptions.HTTPError, OSError):
        return None
    items = found.get("items") if isinstance(found, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]


def _detail(err: client.ApiException) -> str:
    """The Status message the API server sent, when the body is one."""
    try:
        body = json.loads(err.body or "")
    except (TypeError, ValueError):
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return f": {message}" if message else ""


def _reason(err: Exception) -> str:
    """The innermost cause of a connection failure, not urllib3's retry wrapper."""
    reason = getattr(err, "reason", None)
    return str(reason if isinstance(reason, Exception) else err).replace("\n", " ")
