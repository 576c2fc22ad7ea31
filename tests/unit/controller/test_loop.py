"""The reconciler's loop against the embedded API server, through the real client: it runs a
pass when events bring work and when a settle time ends, looks at every gated pod again each
resync period, stops when asked or when the lead is lost, survives a failed pass, and a new
leader picks up what the last one left half done."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client

from controller.daemon import ControllerDaemon
from controller.kube_calls import ControllerApi
from controller.writer import NotLeaderError
from tests.integration.allocation.harness import (
    FINALIZER,
    GROUP,
    VERSION,
    Cluster,
    claim,
    eventually,
    manual_controller,
    pod,
)

#: Far longer than any test waits: a pass that happens came from an event or a deadline.
NO_RESYNC_S = 600.0
#: How long a pass may take to follow what caused it.
PROMPT_S = 30.0


class Looping:
    """The reconciler's loop running as the daemon runs it while leading."""

    def __init__(self, daemon: ControllerDaemon) -> None:
        self.daemon = daemon
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(daemon.reconciler.run(self.stop))

    async def ended(self, within: float = PROMPT_S) -> None:
        await asyncio.wait_for(asyncio.shield(self.task), within)


@contextlib.asynccontextmanager
async def looping(daemon: ControllerDaemon) -> AsyncIterator[Looping]:
    running = Looping(daemon)
    try:
        yield running
    finally:
        running.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running.task, 10)
        daemon.stop_watches()


def allocation(cluster: Cluster, name: str) -> Any:
    return (cluster.get_claim(name).get("status") or {}).get("allocation")


def failures(daemon: ControllerDaemon) -> float:
    value: float = daemon.metrics.failures._value.get()
    return value


def pending(daemon: ControllerDaemon) -> float:
    value: float = daemon.metrics.pending._value.get()
    return value


async def woken_pass(daemon: ControllerDaemon) -> None:
    """Wake the loop with nothing new to do, and wait for the pass that follows."""
    before = daemon.reconciler.passes
    daemon.reconciler.wake()
    await eventually(lambda: daemon.reconciler.passes > before, timeout=PROMPT_S, what="a pass")


class _Failing(ControllerApi):
    """An unexpected error (not an API error) from one call, once."""

    def __init__(self, inner: ControllerApi, method: str) -> None:
        self.__dict__.update(inner.__dict__)
        self._method = method
        self.failed = 0

    def _maybe_fail(self, method: str) -> None:
        if method == self._method and not self.failed:
            self.failed += 1
            raise RuntimeError(f"{method} broke")

    def patch_claim(self, claim: Any, metadata: Any) -> dict[str, Any]:
        self._maybe_fail("patch_claim")
        return super().patch_claim(claim, metadata)

    def patch_pod(self, pod: Any, spec: Any) -> dict[str, Any]:
        self._maybe_fail("patch_pod")
        return super().patch_pod(pod, spec)


def use(daemon: ControllerDaemon, calls: ControllerApi) -> None:
    daemon.reconciler.api = calls
    daemon.reconciler.writer.api = calls


async def test_the_loop_allocates_on_events_and_stops_when_asked(
    cluster: Cluster, api: client.ApiClient
) -> None:
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    async with looping(daemon) as loop:
        cluster.create_claim(claim("c"))
        cluster.create_pod(pod("p", ["c"]))
        await eventually(lambda: not cluster.gated("p"), timeout=PROMPT_S, what="the gate lifted")
        assert allocation(cluster, "c")
        loop.stop.set()
        await loop.ended()


async def test_the_gate_comes_off_when_the_settle_time_ends_without_any_event(
    cluster: Cluster, api: client.ApiClient
) -> None:
    daemon = await manual_controller(api, settle_s=0.3, resync_s=NO_RESYNC_S)
    async with looping(daemon):
        cluster.create_claim(claim("c"))
        cluster.create_pod(pod("p", ["c"]))
        await eventually(lambda: bool(allocation(cluster, "c")), timeout=PROMPT_S, what="written")
        assert cluster.gated("p")  # settling
        await eventually(lambda: not cluster.gated("p"), timeout=PROMPT_S, what="the gate lifted")


async def test_the_loop_ends_when_the_lead_is_lost(cluster: Cluster, api: client.ApiClient) -> None:
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    async with looping(daemon) as loop:
        await asyncio.sleep(0)  # the loop is waiting for work
        daemon.term = None
        daemon.reconciler.wake()
        await loop.ended()
        assert not loop.stop.is_set()
        assert daemon.reconciler.passes == 0  # woken, but no pass without the lead


async def test_a_stopped_loop_ends_without_another_pass(
    cluster: Cluster, api: client.ApiClient
) -> None:
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    async with looping(daemon) as loop:
        await asyncio.sleep(0)  # the loop is waiting for work
        loop.stop.set()
        await loop.ended()
        assert daemon.reconciler.passes == 0


async def test_every_gated_pod_is_looked_at_again_each_resync_period(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))  # one GPU in the cluster: never fits
    cluster.create_pod(pod("p", ["big"]))
    daemon = await manual_controller(api, settle_s=0.0, resync_s=0.1)
    async with looping(daemon):
        # Nothing changes after the first report, yet the pod is decided again and again. The
        # report goes when the work pauses, here (a pass every 0.1 s) after the hold-back.
        await eventually(lambda: cluster.events_for("p"), timeout=PROMPT_S, what="the report")
        seen = failures(daemon)
        await eventually(lambda: failures(daemon) >= seen + 4, timeout=PROMPT_S, what="retries")
        assert len(cluster.events_for("p")) == 1  # the same reason is reported once
        cluster.core.delete_namespaced_pod("p", "default")
        await eventually(lambda: pending(daemon) == 0, timeout=PROMPT_S, what="none pending")


async def test_a_waiting_pod_is_not_decided_again_by_a_pass_that_changes_nothing(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))
    cluster.create_pod(pod("p", ["big"]))
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    async with looping(daemon):
        # Decided, reported, and decided once more after its own condition came back.
        await eventually(lambda: failures(daemon) == 2, timeout=PROMPT_S, what="two decisions")
        for _ in range(3):
            await woken_pass(daemon)
        assert failures(daemon) == 2


async def test_a_waiting_pod_is_decided_as_soon_as_a_node_with_room_appears(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))
    cluster.create_pod(pod("p", ["big"]))
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    async with looping(daemon):
        await eventually(lambda: failures(daemon) == 2, timeout=PROMPT_S, what="two decisions")
        # Nothing about the pod or its claim changes: the new node alone wakes the loop.
        cluster.add_nodes(1, gpus="H100-SXM5-80GB:2", prefix="roomy")
        await eventually(lambda: not cluster.gated("p"), timeout=PROMPT_S, what="the gate lifted")
        assert allocation(cluster, "big")


async def test_a_pass_that_fails_while_writing_is_decided_again(
    cluster: Cluster, api: client.ApiClient
) -> None:
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    failing = _Failing(daemon.calls, "patch_claim")
    use(daemon, failing)
    async with looping(daemon):
        cluster.create_claim(claim("c"))
        cluster.create_pod(pod("p", ["c"]))
        await eventually(lambda: not cluster.gated("p"), timeout=PROMPT_S, what="the gate lifted")
        assert failing.failed == 1
        # The failed decision's devices were released and decided again: the claim holds them.
        assert allocation(cluster, "c")
        assert daemon.view.assumed == {}


async def test_a_pass_that_fails_while_lifting_is_done_again(
    cluster: Cluster, api: client.ApiClient
) -> None:
    daemon = await manual_controller(api, settle_s=0.2, resync_s=NO_RESYNC_S)
    failing = _Failing(daemon.calls, "patch_pod")
    use(daemon, failing)
    async with looping(daemon):
        cluster.create_claim(claim("c"))
        cluster.create_pod(pod("p", ["c"]))
        await eventually(lambda: not cluster.gated("p"), timeout=PROMPT_S, what="the gate lifted")
        assert failing.failed == 1


async def test_a_new_leader_decides_what_the_last_term_left_unwritten(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    try:
        await eventually(lambda: ("default", "p") in daemon.view.pods, what="the pod in view")
        daemon.term = None  # the lease is lost while the pass decides
        with pytest.raises(NotLeaderError):
            await daemon.reconciler.run_pass()
        daemon.reconciler.step_down()
        assert daemon.view.assumed == {}
        assert allocation(cluster, "c") is None
        daemon.term = 0
        daemon.reconciler.take_over()
        await daemon.reconciler.run_pass()
        assert allocation(cluster, "c")
        assert not cluster.gated("p")
    finally:
        daemon.stop_watches()


async def test_a_new_leader_deallocates_what_the_last_term_did_not(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    try:
        await eventually(lambda: ("default", "p") in daemon.view.pods, what="the pod in view")
        await daemon.reconciler.run_pass()
        assert allocation(cluster, "c") and not cluster.gated("p")
        # The pod is gone and kubelet has let the claim go: it is ours to deallocate.
        cluster.core.delete_namespaced_pod("p", "default")
        cluster.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "resourceclaims", "c", {"status": {"reservedFor": None}}
        )
        await eventually(
            lambda: (
                ("default", "p") not in daemon.view.pods
                and not daemon.view.claims[("default", "c")]["status"].get("reservedFor")
            ),
            what="the release in the view",
        )
        daemon.term = None  # the lease is lost as the pass deallocates
        with pytest.raises(NotLeaderError):
            await daemon.reconciler.run_pass()
        daemon.reconciler.step_down()
        assert allocation(cluster, "c")
        daemon.term = 0
        daemon.reconciler.take_over()
        await daemon.reconciler.run_pass()
        assert allocation(cluster, "c") is None
        assert FINALIZER not in (cluster.get_claim("c")["metadata"].get("finalizers") or [])
    finally:
        daemon.stop_watches()


async def test_a_new_leader_reports_again_why_a_pod_waits(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("big", count=2))
    cluster.create_pod(pod("p", ["big"]))
    daemon = await manual_controller(api, settle_s=0.0, resync_s=NO_RESYNC_S)
    try:
        await eventually(lambda: ("default", "p") in daemon.view.pods, what="the pod in view")
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()
        assert len(cluster.events_for("p")) == 1
        daemon.reconciler.step_down()
        daemon.reconciler.take_over()
        await daemon.reconciler.run_pass()
        await daemon.reconciler.drain()
        assert len(cluster.events_for("p")) == 2
    finally:
        daemon.stop_watches()


async def test_stepping_down_leaves_settling_decisions_to_the_next_leader(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.create_claim(claim("c"))
    cluster.create_pod(pod("p", ["c"]))
    daemon = await manual_controller(api, settle_s=30.0, resync_s=NO_RESYNC_S)
    try:
        await eventually(lambda: ("default", "p") in daemon.view.pods, what="the pod in view")
        await daemon.reconciler.run_pass()
        assert daemon.reconciler.next_deadline() is not None
        daemon.reconciler.step_down()
        assert daemon.reconciler.next_deadline() is None
        assert cluster.gated("p") and allocation(cluster, "c")
    finally:
        daemon.stop_watches()
