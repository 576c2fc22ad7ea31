"""One embedded API server and client per test module; each module creates its own nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from localcluster.apiserver import ApiServer


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer(port=0) as running:
        yield running


@pytest.fixture(scope="module")
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client
