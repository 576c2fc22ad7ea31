"""One local API server per test module, and official-client API objects pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from localcluster import ApiServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(port=0, bookmark_interval_s=0.2, history=50) as running:
        yield running


@pytest.fixture(scope="module")
def api_client(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> client.ApiClient:
    path: Path = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    return config.new_client_from_config(config_file=str(path))


@pytest.fixture(scope="module")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def resource(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)


@pytest.fixture(scope="module")
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)
