"""A fresh embedded API server per test: allocation tests fill nodes and must not share them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from localcluster.apiserver import ApiServer
from tests.integration.allocation.harness import Cluster


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer(port=0) as running:
        yield running


@pytest.fixture
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    configuration = client.Configuration(host=server.url)
    configuration.connection_pool_maxsize = 32
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def cluster(server: ApiServer, api: client.ApiClient) -> Cluster:
    made = Cluster(server, api)
    made.add_classes()
    return made
