"""The embedded API server, a client of it, and a one-node cluster with a fake H100, for the
controller tests that drive passes or the loop against the real client."""

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
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


@pytest.fixture
def cluster(server: ApiServer, api: client.ApiClient) -> Cluster:
    made = Cluster(server, api)
    made.add_classes()
    made.add_nodes(1, gpus="H100-SXM5-80GB:1")
    return made
