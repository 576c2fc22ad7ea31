from __future__ import annotations

import asyncio
from pathlib import Path

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1, PLUGIN_TYPE
from dra_driver.kubeletapi.client import RegistrationClient
from kubeletplugin.server import PluginServers
from tests.integration.grpcserver.fakes import DRIVER, FakeHealthSource, FakeNodeDriver


async def test_get_info_without_health(servers: PluginServers, sockdir: Path) -> None:
    assert servers.registration_socket == sockdir / "registry" / f"{DRIVER}-reg.sock"
    assert servers.dra_socket == sockdir / "plugins" / DRIVER / "dra.sock"
    async with RegistrationClient(servers.registration_socket) as client:
        info = await client.get_info()
    assert info.type == PLUGIN_TYPE
    assert info.name == DRIVER
    assert info.endpoint == str(servers.dra_socket)
    assert Path(info.endpoint).is_absolute()
    assert info.supported_versions == (DRA_V1, DRA_V1BETA1)


async def test_get_info_with_health(sockdir: Path, driver: FakeNodeDriver) -> None:
    s = PluginServers(
        DRIVER, sockdir / "p", sockdir / "r", driver, health_source=FakeHealthSource([])
    )
    async with s, RegistrationClient(s.registration_socket) as client:
        info = await client.get_info()
    assert info.supported_versions == (DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1)


async def test_registration_status_is_observed(servers: PluginServers) -> None:
    assert not servers.registered.is_set()
    async with RegistrationClient(servers.registration_socket) as client:
        await client.notify(True)
        await asyncio.wait_for(servers.registered.wait(), 5)
        assert servers.registration.last_status is not None
        assert servers.registration.last_status.registered
        await client.notify(False, "version mismatch")
    assert not servers.registered.is_set()
    assert servers.registration.last_status.error == "version mismatch"
