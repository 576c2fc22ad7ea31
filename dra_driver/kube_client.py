"""Making a `kubernetes` API client the way both daemons need it."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes import config as kube_config


def api_client(kubeconfig: str | None, connections: int | None = None) -> client.ApiClient:
    """A client from the kubeconfig, or from the pod's service account when none is given.

    `connections` sizes the client's pool of kept-alive connections. The client's default
    (five per CPU) is too small for a daemon whose watches each hold a connection for good and
    whose worker threads send many calls at once: a call that finds the pool empty opens a new
    connection (a TLS handshake against a real API server) and closes it afterwards.
    """
    loader = cast(Any, kube_config)
    # A fresh configuration rather than a copy of the process-wide default, which loading
    # the in-cluster config would otherwise change for every other client in the process.
    configuration = cast(client.Configuration, type.__call__(client.Configuration))
    if kubeconfig:
        try:
            loader.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except (OSError, kube_config.ConfigException) as err:
            raise ValueError(f"cannot use kubeconfig {kubeconfig}: {err}") from err
    else:
        try:
            loader.load_incluster_config(client_configuration=configuration)
        except kube_config.ConfigException as err:
            raise ValueError(
                f"no kubeconfig given and not running in a pod (in-cluster config: {err})"
            ) from err
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration=configuration)
