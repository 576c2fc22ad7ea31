"""Making a `kubernetes` API client the way both daemons need it."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes import config as kube_config


def api_client(kubeconfig: str | None) -> client.ApiClient:
    """A client from the kubeconfig, or from the pod's service account when none is given."""
    loader = cast(Any, kube_config)
    if kubeconfig:
        try:
            return cast(client.ApiClient, loader.new_client_from_config(config_file=kubeconfig))
        except (OSError, kube_config.ConfigException) as err:
            raise ValueError(f"cannot use kubeconfig {kubeconfig}: {err}") from err
    try:
        loader.load_incluster_config()
    except kube_config.ConfigException as err:
        raise ValueError(
            f"no kubeconfig given and not running in a pod (in-cluster config: {err})"
        ) from err
    return client.ApiClient()
