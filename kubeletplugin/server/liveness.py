"""grpc.health.v1 endpoint on TCP for the DaemonSet's grpc liveness probe.

A probe must see what kubelet sees: the answer is SERVING only when both unix sockets accept a
real call, so a plugin whose servers died (or whose sockets were deleted under it) gets
restarted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import grpc
import structlog

from dra_driver.kubeletapi import DRA_V1, wire
from dra_driver.kubeletapi.client import DraClient, RegistrationClient
from dra_driver.kubeletapi.gen import grpc_health_v1_pb2

log = structlog.get_logger(__name__)

SERVING: Final = grpc_health_v1_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Final = grpc_health_v1_pb2.HealthCheckResponse.NOT_SERVING

#: Service names the probe may ask for; "" is the server as a whole.
KNOWN_SERVICES: Final = frozenset({"", "liveness"})


class LivenessServer:
    """Answers Health/Check by probing the registration and DRA sockets.

    The probe timeout stays under a second because Kubernetes gives a probe one second unless
    the chart says otherwise; a slower answer would count as a failure anyway.
    """

    def __init__(
        self,
        registration_socket: Path,
        dra_socket: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        probe_timeout: float = 0.8,
    ) -> None:
        self.registration_socket = registration_socket
        self.dra_socket = dra_socket
        self.host = host
        self.probe_timeout = probe_timeout
        self._requested_port = port
        self._port: int | None = None
        self._server: Any = None

    @property
    def port(self) -> int:
        """The bound TCP port (the OS's choice when 0 was asked for)."""
        if self._port is None:
            raise RuntimeError("liveness server not started")
        return self._port

    async def probe(self) -> bool:
        """Whether both sockets answer a call within the probe timeout."""
        try:
            async with RegistrationClient(self.registration_socket, self.probe_timeout) as reg:
                await reg.get_info()
            # An empty batch reaches the DRA servicer without touching the driver.
            async with DraClient(self.dra_socket, DRA_V1, self.probe_timeout) as dra:
                await dra.prepare([])
        except grpc.aio.AioRpcError as exc:
            log.warning("liveness probe failed", code=str(exc.code()), details=exc.details())
            return False
        return True

    async def _check(
        self, request: grpc_health_v1_pb2.HealthCheckRequest, context: Any
    ) -> grpc_health_v1_pb2.HealthCheckResponse:
        if request.service not in KNOWN_SERVICES:
            # The health protocol answers unknown services with NOT_FOUND on Check.
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        status = SERVING if await self.probe() else NOT_SERVING
        return grpc_health_v1_pb2.HealthCheckResponse(status=status)

    async def start(self) -> int:
        if self._server is not None:
            raise RuntimeError("liveness server already started")
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    wire.GRPC_HEALTH_SERVICE,
                    {
                        "Check": grpc.unary_unary_rpc_method_handler(
                            self._check,
                            request_deserializer=grpc_health_v1_pb2.HealthCheckRequest.FromString,
                            response_serializer=grpc_health_v1_pb2.HealthCheckResponse.SerializeToString,
                        )
                    },
                ),
            )
        )
        port = server.add_insecure_port(f"{self.host}:{self._requested_port}")
        if not port:
            raise RuntimeError(f"cannot listen on {self.host}:{self._requested_port}")
        await server.start()
        self._server = server
        self._port = int(port)
        log.info("liveness endpoint listening", host=self.host, port=self._port)
        return self._port

    async def stop(self, grace: float | None = None) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)


async def check(target: str, service: str = "", timeout: float = 5.0) -> int:
    """Call Health/Check on ``target`` (``host:port``); returns the ServingStatus number.

    Used by tests and handy for a manual probe; errors surface as ``grpc.aio.AioRpcError``.
    """
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(
            wire.GRPC_HEALTH_CHECK,
            request_serializer=grpc_health_v1_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=grpc_health_v1_pb2.HealthCheckResponse.FromString,
        )
        response: grpc_health_v1_pb2.HealthCheckResponse = await call(
            grpc_health_v1_pb2.HealthCheckRequest(service=service), timeout=timeout
        )
        return int(response.status)


__all__ = ["KNOWN_SERVICES", "NOT_SERVING", "SERVING", "LivenessServer", "check"]
