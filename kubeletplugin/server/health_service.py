"""Kubelet's device health stream, fed by a :class:`HealthSource`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import structlog

from dra_driver.kubeletapi import wire
from dra_driver.kubeletapi.gen import dra_health_v1alpha1_pb2
from kubeletplugin.server.contract import HealthSource

log = structlog.get_logger(__name__)


class HealthService:
    """Each kubelet stream gets its own watch of the source, so streams do not interfere."""

    def __init__(self, source: HealthSource) -> None:
        self._source = source

    async def watch(
        self, request: Any, context: Any
    ) -> AsyncIterator[dra_health_v1alpha1_pb2.NodeWatchResourcesResponse]:
        log.info("kubelet opened a health stream")
        try:
            async for statuses in self._source.watch():
                yield wire.health_response(statuses)
        except Exception as exc:
            # Ending the stream with a status tells kubelet to reconnect, which restarts the
            # watch; a generator crash would look the same to it but hide the cause here.
            log.exception("health source failed")
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"device health source failed: {exc}")
        finally:
            log.info("health stream ended")

    def handler(self) -> Any:
        return grpc.method_handlers_generic_handler(
            wire.HEALTH_SERVICE,
            {
                "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                    self.watch,
                    request_deserializer=dra_health_v1alpha1_pb2.NodeWatchResourcesRequest.FromString,
                    response_serializer=dra_health_v1alpha1_pb2.NodeWatchResourcesResponse.SerializeToString,
                )
            },
        )


__all__ = ["HealthService"]
