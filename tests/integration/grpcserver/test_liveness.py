from __future__ import annotations

import grpc
import pytest

from kubeletplugin.server import LivenessServer, PluginServers
from kubeletplugin.server.liveness import NOT_SERVING, SERVING, check
from tests.integration.grpcserver.fakes import FakeNodeDriver


async def test_serving_until_dra_server_stops(
    servers: PluginServers, driver: FakeNodeDriver
) -> None:
    live = LivenessServer(servers.registration_socket, servers.dra_socket, probe_timeout=2)
    port = await live.start()
    try:
        assert port == live.port > 0
        target = f"127.0.0.1:{port}"
        assert await check(target) == SERVING
        assert await check(target, "liveness") == SERVING
        assert driver.calls == []  # the probe must not disturb the driver
        await servers.dra_server.stop(0)
        assert await check(target) == NOT_SERVING
    finally:
        await live.stop(0)


async def test_not_serving_without_registration_socket(servers: PluginServers) -> None:
    live = LivenessServer(servers.registration_socket, servers.dra_socket)
    await live.start()
    try:
        await servers.registration_server.stop(0)
        assert await check(f"127.0.0.1:{live.port}") == NOT_SERVING
    finally:
        await live.stop(0)


async def test_unknown_service_is_not_found(servers: PluginServers) -> None:
    live = LivenessServer(servers.registration_socket, servers.dra_socket)
    await live.start()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await check(f"127.0.0.1:{live.port}", "no.such.Service")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await live.stop(0)
