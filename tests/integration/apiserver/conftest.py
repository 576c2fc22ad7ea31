"""One API server per test module, and official-client API objects logged in to it.

The server is `localcluster.control_planes.api_server()`: the embedded one by default, the real
kube-apiserver (with etcd, controller manager and scheduler) under `DRA_CONTROL_PLANE=upstream`,
so every request these tests send is also checked against the answers upstream gives. Tests of
the embedded server's own internals or features are marked `embedded_only`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from localcluster.control_planes import Server, api_server
from tests.integration.apiserver.support import Raw


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # The embedded server's bookmark pace and history size keep the watch tests short; the
    # real control plane has its own and ignores these.
    with api_server(bookmark_interval_s=0.2, history=50) as running:
        yield running


@pytest.fixture(scope="module")
def api_client(server: Server) -> client.ApiClient:
    return server.api_client()


@pytest.fixture(scope="module")
def raw(server: Server) -> Raw:
    return Raw(server.configuration())


@pytest.fixture(scope="module")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def resource(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)


@pytest.fixture(scope="module")
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)
