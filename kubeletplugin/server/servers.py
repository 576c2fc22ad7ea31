"""The plugin's two unix-socket servers, started and stopped in the order kubelet needs.

Kubelet connects to the DRA socket as soon as it learns about it from the registration socket,
so the DRA server must listen first and the registration socket must disappear first on the
way down.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import structlog

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1, PLUGIN_TYPE
from dra_driver.kubeletapi.types import PluginInfo
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.server.contract import HealthSource, NodeDriver
from kubeletplugin.server.dra_service import DraService
from kubeletplugin.server.health_service import HealthService
from kubeletplugin.server.registration import RegistrationService
from kubeletplugin.server.sockets import (
    check_length,
    dra_socket_path,
    registration_socket_path,
)
from kubeletplugin.server.unix_server import UnixGrpcServer

log = structlog.get_logger(__name__)


class PluginServers:
    """Registration server plus DRA server (v1, v1beta1 and optionally health) for one driver.

    With ``pod_uid`` the socket names carry the pod's UID, so two instances can overlap during a
    DaemonSet rolling update and kubelet picks the newest.
    """

    def __init__(
        self,
        driver_name: str,
        plugin_dir: Path,
        registry_dir: Path,
        node_driver: NodeDriver,
        health_source: HealthSource | None = None,
        pod_uid: str | None = None,
        metrics: PluginMetrics | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.metrics = metrics if metrics is not None else PluginMetrics()
        dra_path = dra_socket_path(plugin_dir, pod_uid)
        reg_path = registration_socket_path(registry_dir, driver_name, pod_uid)
        # Fail at construction, before anything is started, with the offending path named.
        check_length(dra_path)
        check_length(reg_path)

        versions = [DRA_V1, DRA_V1BETA1]
        self.dra_service = DraService(node_driver, self.metrics)
        dra_handlers: list[Any] = self.dra_service.handlers()
        if health_source is not None:
            dra_handlers.append(HealthService(health_source).handler())
            versions.append(HEALTH_V1ALPHA1)

        self.registration = RegistrationService(
            PluginInfo(
                type=PLUGIN_TYPE,
                name=driver_name,
                endpoint=str(dra_path),
                supported_versions=tuple(versions),
            ),
            self.metrics,
        )
        self.dra_server = UnixGrpcServer(dra_path, dra_handlers, "dra")
        self.registration_server = UnixGrpcServer(
            reg_path, [self.registration.handler()], "registration"
        )

    @property
    def dra_socket(self) -> Path:
        return self.dra_server.path

    @property
    def registration_socket(self) -> Path:
        return self.registration_server.path

    @property
    def info(self) -> PluginInfo:
        return self.registration.info

    @property
    def registered(self) -> asyncio.Event:
        """Set while kubelet has accepted the registration."""
        return self.registration.registered

    async def start(self) -> None:
        await self.dra_server.start()
        try:
            await self.registration_server.start()
        except BaseException:
            await self.dra_server.stop(0)
            raise
        log.info(
            "plugin servers started",
            driver=self.driver_name,
            dra_socket=str(self.dra_socket),
            registration_socket=str(self.registration_socket),
            versions=list(self.info.supported_versions),
        )

    async def stop(self, grace: float | None = 5.0) -> None:
        """Deregister first (registration socket gone), then stop serving DRA calls."""
        try:
            await self.registration_server.stop(grace)
        finally:
            await self.dra_server.stop(grace)
        self.registered.clear()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop(grace=1.0)


__all__ = ["PluginServers"]
