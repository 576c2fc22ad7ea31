"""Typed asyncio clients for the plugin's sockets, speaking as kubelet does.

The local cluster's kubelet stand-in and the integration tests use these so that they exercise
the real wire protocol over real unix sockets. Each client owns one channel; use it as an async
context manager, or call :meth:`close`. RPC failures surface as ``grpc.aio.AioRpcError``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc

from dra_driver.kubeletapi import DRA_V1, KUBELET_CALL_TIMEOUT_S, wire
from dra_driver.kubeletapi.gen import dra_health_v1alpha1_pb2, pluginregistration_pb2
from dra_driver.kubeletapi.types import ClaimRef, DeviceHealthStatus, PluginInfo, PrepareOutcome


def unix_target(socket_path: str | Path) -> str:
    """gRPC target for a unix socket; gRPC wants ``unix://`` followed by an absolute path."""
    return "unix://" + os.path.abspath(socket_path)


class _Client:
    def __init__(self, socket_path: str | Path, timeout: float = KUBELET_CALL_TIMEOUT_S) -> None:
        self.socket_path = Path(os.path.abspath(socket_path))
        self.timeout = timeout
        self._channel: Any = grpc.aio.insecure_channel(unix_target(socket_path))

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _timeout(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout


class RegistrationClient(_Client):
    """Kubelet's side of the plugin-watcher handshake on a registration socket."""

    async def get_info(self, *, timeout: float | None = None) -> PluginInfo:
        call = self._channel.unary_unary(
            wire.GET_INFO,
            request_serializer=pluginregistration_pb2.InfoRequest.SerializeToString,
            response_deserializer=pluginregistration_pb2.PluginInfo.FromString,
        )
        message: pluginregistration_pb2.PluginInfo = await call(
            pluginregistration_pb2.InfoRequest(), timeout=self._timeout(timeout)
        )
        return wire.plugin_info(message)

    async def notify(
        self, registered: bool, error: str = "", *, timeout: float | None = None
    ) -> None:
        call = self._channel.unary_unary(
            wire.NOTIFY_REGISTRATION_STATUS,
            request_serializer=pluginregistration_pb2.RegistrationStatus.SerializeToString,
            response_deserializer=pluginregistration_pb2.RegistrationStatusResponse.FromString,
        )
        await call(
            pluginregistration_pb2.RegistrationStatus(plugin_registered=registered, error=error),
            timeout=self._timeout(timeout),
        )


class DraClient(_Client):
    """NodePrepareResources / NodeUnprepareResources in one chosen service version."""

    def __init__(
        self,
        socket_path: str | Path,
        version: str = DRA_V1,
        timeout: float = KUBELET_CALL_TIMEOUT_S,
    ) -> None:
        module = wire.dra_module(version)  # fails here, not on the first call, when unknown
        super().__init__(socket_path, timeout)
        self.version = version
        # Made once: a caller such as kubelet sends many calls over one channel.
        self._prepare: Any = self._channel.unary_unary(
            wire.prepare_path(version),
            request_serializer=module.NodePrepareResourcesRequest.SerializeToString,
            response_deserializer=module.NodePrepareResourcesResponse.FromString,
        )
        self._unprepare: Any = self._channel.unary_unary(
            wire.unprepare_path(version),
            request_serializer=module.NodeUnprepareResourcesRequest.SerializeToString,
            response_deserializer=module.NodeUnprepareResourcesResponse.FromString,
        )

    async def prepare(
        self, claims: Sequence[ClaimRef], *, timeout: float | None = None
    ) -> dict[str, PrepareOutcome]:
        """Outcomes keyed by claim UID; a claim the plugin left out is simply absent."""
        response: wire.DraPrepareResponse = await self._prepare(
            wire.prepare_request(self.version, claims), timeout=self._timeout(timeout)
        )
        return wire.prepare_outcomes(response)

    async def unprepare(
        self, claims: Sequence[ClaimRef], *, timeout: float | None = None
    ) -> dict[str, str]:
        """Errors keyed by claim UID; an empty string means the claim was released."""
        response: wire.DraUnprepareResponse = await self._unprepare(
            wire.unprepare_request(self.version, claims), timeout=self._timeout(timeout)
        )
        return wire.unprepare_errors(response)


class HealthClient(_Client):
    """Kubelet's long-lived device health stream."""

    async def watch(
        self, *, timeout: float | None = None
    ) -> AsyncIterator[list[DeviceHealthStatus]]:
        """Yields the full device list each time the plugin sends one.

        Unlike the unary calls, the stream has no deadline unless one is given, because
        kubelet keeps it open for the plugin's lifetime.
        """
        call = self._channel.unary_stream(
            wire.NODE_WATCH_RESOURCES,
            request_serializer=dra_health_v1alpha1_pb2.NodeWatchResourcesRequest.SerializeToString,
            response_deserializer=dra_health_v1alpha1_pb2.NodeWatchResourcesResponse.FromString,
        )
        stream = call(dra_health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=timeout)
        try:
            async for message in stream:
                yield wire.health_statuses(message)
        finally:
            stream.cancel()


__all__ = ["DraClient", "HealthClient", "RegistrationClient", "unix_target"]
