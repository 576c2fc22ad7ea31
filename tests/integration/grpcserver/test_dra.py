from __future__ import annotations

import pytest

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from kubeletplugin.server import PluginServers
from tests.integration.grpcserver.fakes import DRIVER, FakeNodeDriver

A = ClaimRef("default", "uid-a", "a")
B = ClaimRef("team", "uid-b", "b")


async def test_prepare_v1_carries_share_id(servers: PluginServers) -> None:
    async with DraClient(servers.dra_socket, DRA_V1) as client:
        out = await client.prepare([A, B])
    assert set(out) == {"uid-a", "uid-b"}
    dev = out["uid-a"].devices[0]
    assert out["uid-a"].error == ""
    assert dev.device_name == "gpu-a"
    assert dev.pool_name == "node-a"
    assert dev.request_names == ("gpu",)
    assert dev.cdi_device_ids == (f"k8s.{DRIVER}/gpu=uid-a",)
    assert dev.share_id == "share-uid-a"


async def test_prepare_v1beta1_drops_share_id(servers: PluginServers) -> None:
    async with DraClient(servers.dra_socket, DRA_V1BETA1) as client:
        out = await client.prepare([A])
    dev = out["uid-a"].devices[0]
    assert dev.share_id is None
    assert dev.device_name == "gpu-a"


@pytest.mark.parametrize("version", [DRA_V1, DRA_V1BETA1])
async def test_unprepare_has_entry_for_every_claim(
    servers: PluginServers, driver: FakeNodeDriver, version: str
) -> None:
    async with DraClient(servers.dra_socket, version) as client:
        await client.prepare([A])
        errors = await client.unprepare([A, B])
    assert errors["uid-a"] == ""
    # The fake left B out of its answer: the server must still report it, as an error.
    assert set(errors) == {"uid-a", "uid-b"}
    assert "team/b" in errors["uid-b"]
    assert driver.prepared == {}


async def test_omitted_prepare_claim_gets_error(
    servers: PluginServers, driver: FakeNodeDriver
) -> None:
    driver.omit.add("uid-b")
    async with DraClient(servers.dra_socket, DRA_V1) as client:
        out = await client.prepare([A, B])
    assert out["uid-a"].error == ""
    assert out["uid-b"].devices == ()
    assert "team/b" in out["uid-b"].error


@pytest.mark.parametrize("version", [DRA_V1, DRA_V1BETA1])
async def test_driver_exception_is_a_per_claim_error(
    servers: PluginServers, driver: FakeNodeDriver, version: str
) -> None:
    driver.fail = RuntimeError("nvml exploded")
    async with DraClient(servers.dra_socket, version) as client:
        out = await client.prepare([A, B])
        errors = await client.unprepare([A, B])
    for uid, claim in (("uid-a", "default/a"), ("uid-b", "team/b")):
        assert claim in out[uid].error
        assert "nvml exploded" in out[uid].error
        assert claim in errors[uid]
        assert "nvml exploded" in errors[uid]


async def test_claim_without_uid_is_refused_per_claim(
    servers: PluginServers, driver: FakeNodeDriver
) -> None:
    async with DraClient(servers.dra_socket, DRA_V1) as client:
        out = await client.prepare([ClaimRef("ns", "", "broken"), A])
        errors = await client.unprepare([ClaimRef("ns", "", "broken")])
    assert out["uid-a"].error == ""
    assert "ns/broken" in out[""].error
    assert "ns/broken" in errors[""]
    # The malformed claim never reached the driver.
    assert driver.calls == [("prepare", ["uid-a"])]


async def test_empty_request_does_not_reach_driver(
    servers: PluginServers, driver: FakeNodeDriver
) -> None:
    async with DraClient(servers.dra_socket, DRA_V1) as client:
        assert await client.prepare([]) == {}
        assert await client.unprepare([]) == {}
    assert driver.calls == []
