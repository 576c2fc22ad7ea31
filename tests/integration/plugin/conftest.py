"""One embedded API server and client per test module; each module creates its own nodes.
`plugin` runs the plugin on fake GPUs for the module's `NODE`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from kubernetes import client

from localcluster.control_planes import Server, api_server
from tests.integration.plugin.harness import RunningPlugin, running_plugin, short_dir


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with api_server() as running:
        yield running


@pytest.fixture(scope="module")
def api(server: Server) -> Iterator[client.ApiClient]:
    with server.api_client() as api_client:
        yield api_client


@pytest.fixture
async def plugin(
    request: pytest.FixtureRequest, server: Server, api: client.ApiClient
) -> AsyncIterator[RunningPlugin]:
    """The plugin on two fake H100s for the module's node, in a state directory of its own."""
    with short_dir() as root:
        async with running_plugin(server, root, request.module.NODE) as running:
            yield running
