"""The lender's phases from real attributions of fake samples: when a GPU opens, when it closes,
when it is taken back, and that a borrower's own load never counts as its owner's."""

from __future__ import annotations

from typing import Any, cast

import pytest

from api.device_type import DeviceType
from dra_driver.backends.usage import GpuUsage, ProcessUsage, UsageSample
from dra_driver.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord
from kubeletplugin.lending.lender import Lender, LendingSettings, Phase
from kubeletplugin.lending.node import NodeLending, refusing
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.prepare.sharing import BORROWER_PRIORITY, MpsLimits, ShareError, borrower_limits
from kubeletplugin.telemetry.attribution import ClaimPods, attribute

GIB = 1 << 30
UUID = "GPU-0"
HEADROOM = 4 * GIB


def _claim(uid: str, device: str, kind: DeviceType, *, lends: bool = True) -> ClaimRecord:
    record = DeviceRecord(
        ("req",), "node-1", device, (f"x={uid}",), device_type=kind, minor=0, lends=lends
    )
    return ClaimRecord(uid, "default", uid, ClaimState.PREPARE_COMPLETED, (record,))


OWNER = _claim("owner", "gpu-0", DeviceType.GPU)
BORROWER = _claim("borrower", "gpu-0-lent", DeviceType.OPPORTUNISTIC)
PODS = {
    "owner": ClaimPods(("o",), frozenset({"pod-o"})),
    "borrower": ClaimPods(("b",), frozenset({"pod-b"})),
}
POD_OF = {1: "pod-o", 2: "pod-b"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _sample(owner: float | None, borrower: float | None, used: int = 10 * GIB) -> UsageSample:
    processes = []
    if owner is not None:
        processes.append(ProcessUsage(1, UUID, owner, 6 * GIB))
    if borrower is not None:
        processes.append(ProcessUsage(2, UUID, borrower, 4 * GIB))
    busy = sum(p.sm_percent or 0 for p in processes)
    return UsageSample(gpus=(GpuUsage(0, UUID, busy, used, 80 * GIB),), processes=tuple(processes))


def _observe(lender: Lender, sample: UsageSample, *claims: ClaimRecord) -> list[object]:
    records = {c.uid: c for c in claims}
    attributed = attribute(sample, records.values(), PODS, POD_OF.__getitem__)
    return list(lender.observe(sample, records, attributed, PODS, POD_OF.__getitem__, [0]))


def _lender(clock: Clock) -> Lender:
    return Lender(LendingSettings(10.0, 5.0, HEADROOM), "gpu.dra-driver.dev", clock)


def test_a_gpu_opens_only_after_its_owner_idled_for_lend_after() -> None:
    clock = Clock()
    lender = _lender(clock)
    _observe(lender, _sample(1.0, None), OWNER)
    assert lender.phase(0) is Phase.CLOSED
    assert lender.lendable(0) is None
    assert lender.taints()["gpu-0-lent"][0]["effect"] == "NoSchedule"
    clock.now = 9.9
    _observe(lender, _sample(1.0, None), OWNER)
    assert lender.phase(0) is Phase.CLOSED
    clock.now = 10.0
    _observe(lender, _sample(1.0, None), OWNER)
    assert lender.phase(0) is Phase.OPEN
    assert lender.taints() == {}
    # 80 GiB less the 10 GiB in use (no borrower holds any) less the headroom.
    assert lender.lendable(0) == 66 * GIB


def test_a_gpu_nobody_holds_is_open_at_once() -> None:
    lender = _lender(Clock())
    _observe(lender, _sample(None, None, used=0))
    assert lender.phase(0) is Phase.OPEN
    assert lender.lendable(0) == 76 * GIB


def test_a_busy_borrower_does_not_make_its_owner_busy() -> None:
    clock = Clock()
    lender = _lender(clock)
    _observe(lender, _sample(0.0, None), OWNER)
    clock.now = 11.0
    assert _observe(lender, _sample(0.0, 95.0), OWNER, BORROWER) == []
    assert lender.phase(0) is Phase.OPEN
    assert lender.borrowed(0) == 1


def test_an_owner_turning_busy_takes_the_gpu_back_from_its_borrowers() -> None:
    clock = Clock()
    lender = _lender(clock)
    _observe(lender, _sample(0.0, None), OWNER)
    clock.now = 11.0
    _observe(lender, _sample(0.0, 50.0), OWNER, BORROWER)
    clock.now = 12.0
    [take] = _observe(lender, _sample(80.0, 50.0), OWNER, BORROWER)
    assert take.minor == 0 and take.pids == (2,) and take.busy_at == 12.0  # type: ignore[attr-defined]
    assert "busy" in take.reason  # type: ignore[attr-defined]
    assert lender.phase(0) is Phase.BUSY
    assert lender.taints()["gpu-0-lent"] == [
        {"key": "gpu.dra-driver.dev/owner-busy", "value": "true", "effect": "NoExecute"}
    ]
    # Idle again: lent again only after another full lend_after.
    clock.now = 13.0
    _observe(lender, _sample(0.0, None), OWNER)
    assert lender.phase(0) is Phase.CLOSED
    clock.now = 23.0
    _observe(lender, _sample(0.0, None), OWNER)
    assert lender.phase(0) is Phase.OPEN


def test_the_owner_running_short_of_memory_takes_the_gpu_back() -> None:
    clock = Clock()
    lender = _lender(clock)
    _observe(lender, _sample(0.0, None), OWNER)
    clock.now = 11.0
    [take] = _observe(lender, _sample(0.0, 10.0, used=79 * GIB), OWNER, BORROWER)
    assert "memory" in take.reason  # type: ignore[attr-defined]


def test_an_owner_whose_use_cannot_be_read_never_lends() -> None:
    lender = _lender(Clock())
    # A process NVML keeps no figures for, on a GPU without its own: nothing says it is idle.
    sample = UsageSample(
        gpus=(GpuUsage(0, UUID, None, 6 * GIB, 80 * GIB),),
        processes=(ProcessUsage(1, UUID, None, 6 * GIB),),
    )
    _observe(lender, sample, OWNER)
    assert lender.phase(0) is Phase.BUSY


REFUSING = _claim("refusing", "gpu-0", DeviceType.GPU, lends=False)
CLOSED = [{"key": "gpu.dra-driver.dev/lending", "value": "closed", "effect": "NoSchedule"}]


def _node(lender: Lender, changed: list[int]) -> NodeLending:
    """The node's lending without a backend or API server: no sample here takes a GPU back,
    and nothing else uses them."""
    node = NodeLending(
        lender,
        cast(Any, None),
        cast(Any, None),
        PluginMetrics(),
        "node-1",
        1.0,
        lambda: changed.append(1),
        "test",
    )
    node.lent_minors = (0,)
    return node


async def _node_observe(node: NodeLending, sample: UsageSample, *claims: ClaimRecord) -> None:
    records = {c.uid: c for c in claims}
    pods = {"refusing": PODS["owner"], **PODS}
    attributed = attribute(sample, records.values(), pods, POD_OF.__getitem__)
    await node(sample, records, attributed, pods, POD_OF.__getitem__)


async def test_an_owner_refusing_to_lend_keeps_its_gpu_closed_however_long_it_idles() -> None:
    clock = Clock()
    lender = _lender(clock)
    changed: list[int] = []
    node = _node(lender, changed)
    for now in (0.0, 10.0, 11.0, 3600.0, 86400.0):
        clock.now = now
        await _node_observe(node, _sample(0.0, None), REFUSING)
        assert lender.phase(0) is Phase.CLOSED
        # No memory to give: a borrower's prepare on this GPU is refused.
        assert lender.lendable(0) is None
        assert node.taints() == {"gpu-0-lent": CLOSED}
    # Once the claim is unprepared, an idle GPU nobody holds is lent at once.
    await _node_observe(node, _sample(None, None, used=0))
    assert lender.phase(0) is Phase.OPEN
    assert node.taints() == {}
    assert len(changed) == 2  # closed at the first sample, opened at the last
    await node.stop()


def test_only_claims_with_a_device_that_does_not_lend_refuse() -> None:
    both = ClaimRecord(
        "both",
        "default",
        "both",
        ClaimState.PREPARE_COMPLETED,
        (*OWNER.devices, *REFUSING.devices),
    )
    claims = {c.uid: c for c in (OWNER, BORROWER, REFUSING, both)}
    assert refusing(claims) == {"refusing", "both"}


def test_an_owner_that_lends_beside_one_that_refuses_does_not_open_the_gpu() -> None:
    clock = Clock()
    lender = _lender(clock)
    sample = _sample(0.0, None)
    records = {c.uid: c for c in (OWNER, REFUSING)}
    attributed = attribute(sample, records.values(), PODS, POD_OF.__getitem__)
    for now in (0.0, 100.0):
        clock.now = now
        lender.observe(
            sample, records, attributed, PODS, POD_OF.__getitem__, [0], refusing(records)
        )
        assert lender.phase(0) is Phase.CLOSED


def test_a_borrower_gets_what_it_was_granted_below_the_owner_and_never_more_than_is_free() -> None:
    granted = MpsLimits(thread_percentage=30, pinned_memory_bytes=8 * GIB)
    limits = borrower_limits(granted, 20 * GIB, "claim default/b")
    assert limits == MpsLimits(30, 8 * GIB, BORROWER_PRIORITY)
    assert "CUDA_MPS_CLIENT_PRIORITY=1" in limits.environment()
    with pytest.raises(ShareError, match=r"claim default/b: 8192 MiB were granted but .* 4096 MiB"):
        borrower_limits(granted, 4 * GIB, "claim default/b")
    with pytest.raises(ShareError, match="not lent now"):
        borrower_limits(granted, None, "claim default/b")
