"""One grpc.aio server bound to one unix socket, owning that socket file's life."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import structlog

from dra_driver.kubeletapi.client import unix_target
from kubeletplugin.server.sockets import prepare_socket_path, remove_socket

log = structlog.get_logger(__name__)


class UnixGrpcServer:
    """Listens on ``path`` once started; stopping removes the socket so kubelet sees it go."""

    def __init__(self, path: Path, handlers: Sequence[Any], name: str) -> None:
        self.path = path
        self.name = name
        self._handlers = tuple(handlers)
        self._server: Any = None

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"{self.name} server on {self.path} already started")
        prepare_socket_path(self.path)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(self._handlers)
        try:
            server.add_insecure_port(unix_target(self.path))
        except RuntimeError as exc:
            raise RuntimeError(f"cannot listen on unix socket {self.path}: {exc}") from exc
        await server.start()
        self._server = server
        log.info("grpc server listening", server=self.name, socket=str(self.path))

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving (letting calls in flight finish within ``grace`` s), remove the socket."""
        server, self._server = self._server, None
        try:
            if server is not None:
                await server.stop(grace)
                log.info("grpc server stopped", server=self.name, socket=str(self.path))
        finally:
            remove_socket(self.path)
