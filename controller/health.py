"""HTTP probes of the controller: `/healthz` for liveness, `/readyz` for readiness.

The server runs in its own thread, so it keeps answering while the event loop is stuck, which is
exactly the case liveness exists for: the loop proves itself alive by stamping a heartbeat, and
`/healthz` fails once the stamp is older than `stale_after_s`. Readiness means the controller's
watches have synced; a standby replica that has synced is ready too (it could take over at
once), so readiness says nothing about leadership.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog

log = structlog.get_logger(__name__)

DEFAULT_STALE_AFTER_S = 10.0
DEFAULT_BEAT_INTERVAL_S = 1.0


class HealthState:
    """What the probes report; written by the daemon, read by the server's threads."""

    def __init__(
        self,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stale_after_s = stale_after_s
        self._clock = clock
        self._last_beat = clock()
        self._synced = False
        self._lock = threading.Lock()

    def beat(self) -> None:
        """Record that the event loop ran just now."""
        with self._lock:
            self._last_beat = self._clock()

    def set_synced(self, synced: bool = True) -> None:
        """Called by the daemon once its watches have listed everything (and if they lose it)."""
        with self._lock:
            self._synced = synced

    def live(self) -> tuple[bool, str]:
        with self._lock:
            age = self._clock() - self._last_beat
        if age > self._stale_after_s:
            return False, f"event loop has not run for {age:.1f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        alive, why = self.live()
        if not alive:
            return False, why
        with self._lock:
            synced = self._synced
        return (True, "ok") if synced else (False, "watches have not synced yet")

    async def heartbeat(
        self, stop: asyncio.Event, interval_s: float = DEFAULT_BEAT_INTERVAL_S
    ) -> None:
        """Stamp the heartbeat every `interval_s` until `stop` is set; run it as a task."""
        while not stop.is_set():
            self.beat()
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                continue


def _handler(state: HealthState) -> type[BaseHTTPRequestHandler]:
    probes = {"/healthz": state.live, "/readyz": state.ready}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            probe = probes.get(self.path.split("?", 1)[0])
            if probe is None:
                self._answer(404, "not found")
                return
            ok, why = probe()
            self._answer(200 if ok else 500, why)

        def _answer(self, code: int, text: str) -> None:
            body = (text + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            # Probes arrive every few seconds; access logs would drown the real ones.
            return

    return Handler


@dataclass
class HealthEndpoint:
    """A running probe server; call :meth:`shutdown` to free its port."""

    server: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_health(state: HealthState, port: int, addr: str = "0.0.0.0") -> HealthEndpoint:
    """Start answering probes from a thread; port 0 lets the OS choose."""
    server = ThreadingHTTPServer((addr, port), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.2},
        name="controller-health",
        daemon=True,
    )
    thread.start()
    endpoint = HealthEndpoint(server=server, thread=thread)
    log.info("health endpoint listening", addr=addr, port=endpoint.port)
    return endpoint


__all__ = ["HealthEndpoint", "HealthState", "serve_health"]
