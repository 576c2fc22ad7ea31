from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dra_driver.kubeletapi.client import DraClient, RegistrationClient
from kubeletplugin.server import PluginServers, SocketPathError
from kubeletplugin.server.sockets import prepare_socket_path
from tests.integration.grpcserver.fakes import DRIVER, FakeNodeDriver


def _leave_stale_socket(path: Path) -> None:
    """A bound but closed socket file, as a crashed plugin leaves behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()
    assert path.is_socket()


async def test_stale_sockets_are_replaced(sockdir: Path, driver: FakeNodeDriver) -> None:
    s = PluginServers(DRIVER, sockdir / "p", sockdir / "r", driver)
    _leave_stale_socket(s.dra_socket)
    _leave_stale_socket(s.registration_socket)
    async with s, RegistrationClient(s.registration_socket) as client:
        assert (await client.get_info()).name == DRIVER


async def test_non_socket_file_is_not_deleted(sockdir: Path, driver: FakeNodeDriver) -> None:
    s = PluginServers(DRIVER, sockdir / "p", sockdir / "r", driver)
    s.registration_socket.parent.mkdir(parents=True)
    s.registration_socket.write_text("precious")
    with pytest.raises(SocketPathError, match="not a unix socket") as info:
        await s.start()
    assert str(s.registration_socket) in str(info.value)
    assert s.registration_socket.read_text() == "precious"
    # The DRA server started first must not be left listening.
    assert not s.dra_socket.exists()


def test_too_long_path_is_refused(tmp_path: Path, driver: FakeNodeDriver) -> None:
    deep = tmp_path / ("d" * 120)
    with pytest.raises(SocketPathError, match="limit") as info:
        PluginServers(DRIVER, deep, tmp_path / "r", driver)
    assert str(deep / "dra.sock") in str(info.value)


async def test_pod_uid_socket_names(sockdir: Path, driver: FakeNodeDriver) -> None:
    uid = "0b5f3c2e-1111-2222-3333-444455556666"
    s = PluginServers(DRIVER, sockdir / "p", sockdir / "r", driver, pod_uid=uid)
    assert s.dra_socket == sockdir / "p" / f"dra-{uid}.sock"
    assert s.registration_socket == sockdir / "r" / f"{DRIVER}-{uid}-reg.sock"
    async with s, RegistrationClient(s.registration_socket) as client:
        assert (await client.get_info()).endpoint == str(s.dra_socket)


async def test_start_creates_dirs_and_stop_removes_sockets(
    sockdir: Path, driver: FakeNodeDriver
) -> None:
    s = PluginServers(DRIVER, sockdir / "a" / "b", sockdir / "c" / "d", driver)
    await s.start()
    assert s.dra_socket.is_socket()
    assert s.registration_socket.is_socket()
    async with DraClient(s.dra_socket) as client:
        assert await client.prepare([]) == {}
    await s.stop(grace=0)
    assert not s.dra_socket.exists()
    assert not s.registration_socket.exists()


def test_prepare_socket_path_unlinks_only_sockets(sockdir: Path) -> None:
    stale = sockdir / "x" / "stale.sock"
    _leave_stale_socket(stale)
    prepare_socket_path(stale)
    assert not stale.exists()
    prepare_socket_path(sockdir / "y" / "new.sock")  # missing file and parent are fine
    assert (sockdir / "y").is_dir()
