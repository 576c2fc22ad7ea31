from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from dra_driver.kubeletapi.client import HealthClient
from dra_driver.kubeletapi.types import DeviceHealthStatus, Health
from kubeletplugin.server import PluginServers
from tests.integration.grpcserver.fakes import DRIVER, FakeHealthSource, FakeNodeDriver, healthy


async def test_stream_sends_initial_list_then_updates(
    sockdir: Path, driver: FakeNodeDriver
) -> None:
    source = FakeHealthSource([healthy("gpu-0"), healthy("gpu-1")])
    s = PluginServers(DRIVER, sockdir / "p", sockdir / "r", driver, health_source=source)
    async with s, HealthClient(s.dra_socket) as client:
        stream = client.watch()
        first = await asyncio.wait_for(anext(stream), 5)
        assert [d.device_name for d in first] == ["gpu-0", "gpu-1"]
        assert all(d.health is Health.HEALTHY for d in first)

        bad = DeviceHealthStatus("node-a", "gpu-1", Health.UNHEALTHY, 1_700_000_100, 30, "x" * 2000)
        source.update([healthy("gpu-0"), bad])
        second = await asyncio.wait_for(anext(stream), 5)
        assert second[1].health is Health.UNHEALTHY
        assert second[1].last_updated == 1_700_000_100
        assert second[1].timeout_seconds == 30
        assert second[1].message == "x" * 1024
        assert second[0] == healthy("gpu-0")
        await stream.aclose()


async def test_health_not_served_without_source(servers: PluginServers) -> None:
    async with HealthClient(servers.dra_socket) as client:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(anext(client.watch()), 5)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
