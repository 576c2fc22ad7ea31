"""Serving a Prometheus registry over HTTP, the same way for both daemons.

Each daemon keeps its metrics in a registry of its own (so several instances can share a process
in tests); this serves one such registry from a thread and can be shut down to free its port.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import CollectorRegistry, start_http_server

log = structlog.get_logger(__name__)


@dataclass
class MetricsEndpoint:
    """A running HTTP exposition server; call :meth:`shutdown` to free its port."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_registry(
    registry: CollectorRegistry, port: int, addr: str = "0.0.0.0"
) -> MetricsEndpoint:
    """Start the exposition server in a thread; port 0 lets the OS choose."""
    server, thread = start_http_server(port, addr=addr, registry=registry)
    endpoint = MetricsEndpoint(server=server, thread=thread)
    log.info("metrics endpoint listening", addr=addr, port=endpoint.port)
    return endpoint
