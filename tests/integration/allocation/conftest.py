"""A fresh embedded API server per test: allocation tests fill nodes and must not share them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from localcluster.control_planes import Server, api_server
from tests.integration.allocation.harness import Cluster


@pytest.fixture
def server() -> Iterator[Server]:
    with api_server() as running:
        yield running


@pytest.fixture
def api(server: Server) -> Iterator[client.ApiClient]:
    configuration = server.configuration()
    configuration.connection_pool_maxsize = 32
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def cluster(server: Server, api: client.ApiClient) -> Cluster:
    made = Cluster(server, api)
    made.add_classes()
    return made
