"""Fixtures: plugin servers on real unix sockets, backed by small in-memory fakes."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.server import PluginServers
from tests.integration.grpcserver.fakes import DRIVER, FakeNodeDriver


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory: pytest's tmp_path can exceed the 108-byte socket path limit."""
    with tempfile.TemporaryDirectory(prefix="dra-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def driver() -> FakeNodeDriver:
    return FakeNodeDriver()


@pytest.fixture
def metrics() -> PluginMetrics:
    return PluginMetrics()


@pytest.fixture
async def servers(
    sockdir: Path, driver: FakeNodeDriver, metrics: PluginMetrics
) -> AsyncIterator[PluginServers]:
    s = PluginServers(
        DRIVER, sockdir / "plugins" / DRIVER, sockdir / "registry", driver, metrics=metrics
    )
    await s.start()
    try:
        yield s
    finally:
        await s.stop(grace=0)
