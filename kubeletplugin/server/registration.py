"""The plugin-watcher handshake: introduce the plugin, remember kubelet's verdict."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import grpc
import structlog

from dra_driver.kubeletapi import wire
from dra_driver.kubeletapi.gen import pluginregistration_pb2
from dra_driver.kubeletapi.types import PluginInfo
from kubeletplugin.metrics import PluginMetrics

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RegistrationStatus:
    """Kubelet's last word on the registration."""

    registered: bool
    error: str


class RegistrationService:
    """Serves GetInfo and records NotifyRegistrationStatus.

    ``registered`` is set while kubelet has accepted the plugin, so the daemon and tests can
    await registration instead of polling.
    """

    def __init__(self, info: PluginInfo, metrics: PluginMetrics) -> None:
        self.info = info
        self.registered = asyncio.Event()
        self.last_status: RegistrationStatus | None = None
        self._metrics = metrics

    async def get_info(self, request: Any, context: Any) -> pluginregistration_pb2.PluginInfo:
        start = time.perf_counter()
        log.debug("kubelet asked for plugin info")
        message = wire.plugin_info_message(self.info)
        self._metrics.observe_request("GetInfo", "registration", time.perf_counter() - start)
        return message

    async def notify(
        self, request: pluginregistration_pb2.RegistrationStatus, context: Any
    ) -> pluginregistration_pb2.RegistrationStatusResponse:
        start = time.perf_counter()
        self.last_status = RegistrationStatus(request.plugin_registered, request.error)
        if request.plugin_registered:
            log.info("kubelet registered the plugin", driver=self.info.name)
            self.registered.set()
        else:
            log.error("kubelet refused the plugin", driver=self.info.name, error=request.error)
            self.registered.clear()
        self._metrics.observe_request(
            "NotifyRegistrationStatus", "registration", time.perf_counter() - start
        )
        return pluginregistration_pb2.RegistrationStatusResponse()

    def handler(self) -> Any:
        return grpc.method_handlers_generic_handler(
            wire.REGISTRATION_SERVICE,
            {
                "GetInfo": grpc.unary_unary_rpc_method_handler(
                    self.get_info,
                    request_deserializer=pluginregistration_pb2.InfoRequest.FromString,
                    response_serializer=pluginregistration_pb2.PluginInfo.SerializeToString,
                ),
                "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                    self.notify,
                    request_deserializer=pluginregistration_pb2.RegistrationStatus.FromString,
                    response_serializer=pluginregistration_pb2.RegistrationStatusResponse.SerializeToString,
                ),
            },
        )


__all__ = ["RegistrationService", "RegistrationStatus"]
