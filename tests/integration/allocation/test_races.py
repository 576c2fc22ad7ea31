"""Another allocator writes between our decision and our write: no device is held twice.

The other allocator is played by the test, writing a claim allocation through the API the way
the kube-scheduler would, at the worst moments: after our decision but before our re-check, and
after our re-check but before our write.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from controller.daemon import ControllerDaemon
from controller.kube_calls import ControllerApi
from tests.integration.allocation.harness import (
    GROUP,
    VERSION,
    Cluster,
    claim,
    eventually,
    held_until_theirs_lets_go,
    manual_controller,
    pod,
)


def steal(cluster: Cluster, name: str, allocation: dict[str, Any]) -> None:
    """Another allocator allocates claim `name` with `allocation` (already created)."""
    cluster.objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "resourceclaims", name, {"status": {"allocation": allocation}}
    )


def whole_gpu_allocation(node: str, device: str) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {"request": "req", "driver": "gpu.dra-driver.dev", "pool": node, "device": device}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


async def _pod_known(daemon: ControllerDaemon, name: str) -> None:
    await eventually(lambda: ("default", name) in daemon.view.pods, what=f"pod {name} in view")


async def test_allocation_seen_only_by_the_fresh_read_before_writing(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1, gpus="H100-SXM5-80GB:1")
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("gated", ["ours"]))
    daemon = await manual_controller(api)
    try:
        await _pod_known(daemon, "gated")
        # Written now, the watch cannot have delivered it when the pass decides (no await
        # between the start of the pass and its decision).
        steal(cluster, "theirs", whole_gpu_allocation("node-1", "gpu-0"))
        await daemon.reconciler.run_pass()
        assert daemon.metrics.conflicts.labels("before-write")._value.get() == 1
        assert not cluster.get_claim("ours").get("status")
        await daemon.reconciler.run_pass()  # decided again: nothing fits now
        assert not cluster.get_claim("ours").get("status")
        assert cluster.gated("gated")
    finally:
        daemon.stop_watches()


class _RacingApi(ControllerApi):
    """Lets the other allocator write after our re-check, just before our allocation write."""

    def __init__(self, inner: ControllerApi, race: Any) -> None:
        self.__dict__.update(inner.__dict__)
        self._race = race
        self.reads = 0
        self.raced = False

    def list_claims(self) -> tuple[list[dict[str, Any]], int]:
        self.reads += 1
        return super().list_claims()

    def patch_claim_status(self, claim: Any, status: Any) -> dict[str, Any]:
        if not self.raced:
            self.raced = True
            self._race()
        return super().patch_claim_status(claim, status)


async def test_allocation_landing_between_recheck_and_write_is_held_then_withdrawn(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1, gpus="H100-SXM5-80GB:1")
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("gated", ["ours"]))
    daemon = await manual_controller(api)
    racing = _RacingApi(
        daemon.calls, lambda: steal(cluster, "theirs", whole_gpu_allocation("node-1", "gpu-0"))
    )
    daemon.reconciler.api = racing
    daemon.reconciler.writer.api = racing
    try:
        await _pod_known(daemon, "gated")
        await daemon.reconciler.run_pass()
        assert racing.raced
        # Both re-checks waited for the watch to bring our own writes back, so it had brought
        # the other allocator's earlier write too: no full list of the claims was needed.
        assert racing.reads == 0
        assert daemon.metrics.conflicts.labels("after-write")._value.get() == 1
        assert cluster.gated("gated"), "the gate stays on: the pod never saw the device"
        daemon.reconciler.api = daemon.reconciler.writer.api = daemon.calls
        await held_until_theirs_lets_go(cluster, daemon, ours="ours", theirs="theirs", pod="gated")
    finally:
        daemon.stop_watches()


async def test_allocation_landing_during_the_settle_time_keeps_the_gate_on(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1, gpus="H100-SXM5-80GB:1")
    cluster.create_claim(claim("theirs"))
    cluster.create_claim(claim("ours"))
    cluster.create_pod(pod("gated", ["ours"]))
    daemon = await manual_controller(api, settle_s=0.5)
    reconciler = daemon.reconciler
    try:
        await _pod_known(daemon, "gated")
        await reconciler.run_pass()
        # Written and re-checked; the gate waits for the settle time.
        assert cluster.get_claim("ours")["status"]["allocation"]
        assert cluster.gated("gated")
        # The other allocator, deciding on older state, lands its write now.
        steal(cluster, "theirs", whole_gpu_allocation("node-1", "gpu-0"))
        await eventually(
            lambda: bool(
                (daemon.view.claims[("default", "theirs")].get("status") or {}).get("allocation")
            ),
            what="the other allocation in the view",
        )
        due = reconciler.next_deadline()
        assert due is not None
        await eventually(lambda: time.monotonic() >= due, what="the settle time to pass")
        await reconciler.run_pass()
        await reconciler.drain()  # the lift may have started on its own meanwhile
        assert cluster.gated("gated"), "the gate stays on: the device went to the other claim"
        assert daemon.metrics.conflicts.labels("settled")._value.get() == 1
        await held_until_theirs_lets_go(cluster, daemon, ours="ours", theirs="theirs", pod="gated")
    finally:
        daemon.stop_watches()
