"""The controller's probe server, over real HTTP on the loopback interface."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from controller.health import HealthEndpoint, HealthState, serve_health
from tests.support.polling import eventually


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state(clock: ManualClock) -> HealthState:
    return HealthState(stale_after_s=5.0, clock=clock)


@pytest.fixture
def endpoint(state: HealthState) -> Iterator[HealthEndpoint]:
    running = serve_health(state, 0, "127.0.0.1")
    try:
        yield running
    finally:
        running.shutdown()


def test_ready_only_once_synced(state: HealthState, endpoint: HealthEndpoint) -> None:
    assert _get(endpoint.port, "/healthz")[0] == 200
    code, text = _get(endpoint.port, "/readyz")
    assert code == 500 and "not synced" in text
    state.set_synced()
    assert _get(endpoint.port, "/readyz") == (200, "ok\n")
    state.set_synced(False)
    assert _get(endpoint.port, "/readyz")[0] == 500


def test_stale_heartbeat_fails_both_probes(
    state: HealthState, endpoint: HealthEndpoint, clock: ManualClock
) -> None:
    state.set_synced()
    clock.now += 4.9
    assert _get(endpoint.port, "/healthz")[0] == 200
    clock.now += 0.2
    code, text = _get(endpoint.port, "/healthz")
    assert code == 500 and "has not run for 5.1s" in text
    assert _get(endpoint.port, "/readyz")[0] == 500
    state.beat()
    assert _get(endpoint.port, "/healthz")[0] == 200
    assert _get(endpoint.port, "/readyz")[0] == 200


def test_unknown_path_is_not_found(endpoint: HealthEndpoint) -> None:
    assert _get(endpoint.port, "/metrics")[0] == 404
    assert _get(endpoint.port, "/healthz?verbose=1")[0] == 200


async def test_blocked_event_loop_fails_liveness() -> None:
    """The heartbeat task stops when the loop is stuck, and the thread-served probe says so."""
    state = HealthState(stale_after_s=0.3)
    endpoint = serve_health(state, 0, "127.0.0.1")
    stop = asyncio.Event()
    beating = asyncio.create_task(state.heartbeat(stop, interval_s=0.02))
    try:
        await _until_status(endpoint.port, 200)
        seen_failure = threading.Event()

        def probe_until_failure() -> None:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not seen_failure.is_set():
                if _get(endpoint.port, "/healthz")[0] == 500:
                    seen_failure.set()

        prober = threading.Thread(target=probe_until_failure, daemon=True)
        prober.start()
        # Block the event loop itself (no await) until the prober has seen the failure.
        assert seen_failure.wait(timeout=15), "/healthz kept answering 200 with the loop blocked"
        prober.join(timeout=5)
        await _until_status(endpoint.port, 200)  # the loop runs again: healthy again
    finally:
        stop.set()
        await asyncio.wait_for(beating, 5)
        await asyncio.to_thread(endpoint.shutdown)


async def _until_status(port: int, status: int) -> None:
    await eventually(
        lambda: _get(port, "/healthz")[0] == status, f"/healthz to answer {status}", in_thread=True
    )
