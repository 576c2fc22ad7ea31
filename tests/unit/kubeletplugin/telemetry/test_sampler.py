"""The telemetry loop's bookkeeping: writes on transitions only, a failed write re-sent, a gone
claim dropped, pods re-read within bounds, series removed with their claim.

The claims live in a small in-memory store standing in for the API server's answers (the real
writer is tested against the embedded API server in tests/integration/plugin/test_telemetry.py);
the clock is injected, so no test sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from api.device_type import DeviceType
from dra_driver.backends.usage import GpuUsage, ProcessUsage, UsageFailure, UsageSample
from dra_driver.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord
from dra_driver.device_status import DeviceKey, idle_condition, idleness, with_condition
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.telemetry.cgroups import NoPod
from kubeletplugin.telemetry.sampler import POD_REFRESH_S, TelemetrySampler, TelemetrySettings
from kubeletplugin.telemetry.status_writer import WriteOutcome
from tests.support import polling

DRIVER = "gpu.dra-driver.dev"
NODE = "node-a"
GPU0 = "GPU-0000"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LABELS = ("node", "gpu_uuid", "device", "claim_namespace", "claim_name", "pods")


class Clock:
    def __init__(self) -> None:
        self.now = T0
        self.mono = 1000.0

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.mono += seconds


class Claims:
    """What the API server holds, with the calls the sampler made."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads: list[str] = []
        self.writes: list[tuple[str, dict[str, Any]]] = []
        self.fail_writes = 0
        self.fail_reads = 0

    def add(self, name: str, uid: str, pods: Mapping[str, str], devices: list[str]) -> None:
        self.objects[("team", name)] = {
            "metadata": {"namespace": "team", "name": name, "uid": uid},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": d}
                            for d in devices
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in pods.items()],
            },
        }

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(name)
        if self.fail_reads:
            self.fail_reads -= 1
            raise ConnectionError("API server unreachable")
        return self.objects.get((namespace, name))

    def set_condition(
        self, namespace: str, name: str, uid: str, key: DeviceKey, condition: dict[str, Any]
    ) -> tuple[WriteOutcome, dict[str, Any] | None]:
        if self.fail_writes:
            self.fail_writes -= 1
            raise ConnectionError("API server unreachable")
        claim = self.objects.get((namespace, name))
        if claim is None:
            return WriteOutcome.GONE, None
        status = claim["status"]
        status["devices"] = with_condition(status.get("devices") or [], key, condition)
        self.writes.append((name, condition))
        return WriteOutcome.WRITTEN, claim


def _record(
    uid: str, name: str, device: str = "gpu-0", kind: DeviceType = DeviceType.GPU
) -> ClaimRecord:
    return ClaimRecord(
        uid,
        "team",
        name,
        ClaimState.PREPARE_COMPLETED,
        (DeviceRecord(("gpu",), NODE, device, (), device_type=kind, minor=0),),
    )


class Rig:
    def __init__(self, tmp_path: Path, interval_s: float = 10) -> None:
        self.clock = Clock()
        self.usage_errors = 0
        self.claims = Claims()
        self.metrics = PluginMetrics()
        self.sm: float | None = 0.0
        self.processes: tuple[ProcessUsage, ...] = ()
        self.failures: tuple[UsageFailure, ...] = ()
        self.checkpoint = Checkpoint("boot")
        self.sampler = TelemetrySampler(
            TelemetrySettings(
                node_name=NODE,
                driver_name=DRIVER,
                interval_s=interval_s,
                idle_threshold_percent=5,
                idle_after_s=60,
                proc_root=tmp_path,
            ),
            self.usage,
            lambda: self.checkpoint,
            self.claims,
            self.metrics,
            clock=self.clock,
            monotonic=self.clock.monotonic,
        )

    def usage(self) -> UsageSample:
        if self.usage_errors:
            self.usage_errors -= 1
            raise RuntimeError("NVML is not loaded")
        gpus = () if self.failures else (GpuUsage(0, GPU0, self.sm, 1 << 30, 80 << 30),)
        return UsageSample(gpus=gpus, processes=self.processes, failures=self.failures)

    async def cycle(self, advance: float = 0) -> None:
        self.clock.advance(advance)
        await self.sampler.sample_once()
        await self.sampler.flush_writes()

    def value(self, metric: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(metric, labels)

    def labels(self, claim: str = "claim-1", pods: str = "web-0") -> dict[str, str]:
        return dict(zip(LABELS, (NODE, GPU0, "gpu-0", "team", claim, pods), strict=True))


def _idle(claims: Claims, name: str) -> bool | None:
    state = idleness(claims.objects[("team", name)]).get((DRIVER, NODE, "gpu-0"))
    return None if state is None else state.idle


async def test_a_device_goes_idle_after_the_window_and_back_with_one_write_each(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    await rig.cycle()
    for _ in range(5):
        await rig.cycle(10)
    assert rig.claims.writes == []
    assert rig.value("dra_device_idle_seconds", **rig.labels()) == 50
    await rig.cycle(10)
    assert [c["status"] for _, c in rig.claims.writes] == ["True"]
    assert rig.claims.writes[0][1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    for _ in range(3):
        await rig.cycle(10)  # still idle: nothing written
    assert len(rig.claims.writes) == 1
    rig.sm = 60.0
    await rig.cycle(10)
    assert [c["status"] for _, c in rig.claims.writes] == ["True", "False"]
    assert _idle(rig.claims, "claim-1") is False
    assert rig.value("dra_device_utilization_percent", **rig.labels()) == 60.0
    assert rig.value("dra_device_idle_seconds", **rig.labels()) == 0
    # Read once when it appeared, and after each write (from the write's answer, no GET).
    assert rig.claims.reads == ["claim-1"]


async def test_a_failed_write_is_sent_again_at_the_next_check(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    await rig.cycle()
    rig.claims.fail_writes = 1
    await rig.cycle(60)  # the transition; its write fails
    assert rig.claims.writes == []
    await rig.cycle(10)  # no new transition, but written differs from observed
    assert [c["status"] for _, c in rig.claims.writes] == ["True"]
    await rig.cycle(10)
    assert len(rig.claims.writes) == 1


async def test_a_gone_claim_is_dropped_quietly_and_its_series_removed(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    await rig.cycle()
    del rig.claims.objects[("team", "claim-1")]
    await rig.cycle(60)
    await rig.cycle(10)
    assert rig.claims.writes == []
    assert rig.value("dra_device_idle_seconds", **rig.labels()) == 70
    rig.checkpoint = rig.checkpoint.without_claim("u1")  # unprepared
    await rig.cycle(10)
    assert rig.value("dra_device_idle_seconds", **rig.labels()) is None
    assert rig.value("dra_device_memory_used_bytes", **rig.labels()) is None
    assert rig.sampler.tracker.tracked() == set()


async def test_an_unknown_figure_has_no_utilisation_series_and_never_goes_idle(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    rig.sm = None
    # A process runs there (no SM figure for it either): the GPU's use cannot be told.
    rig.processes = (ProcessUsage(99, GPU0, None, 1 << 30),)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    for _ in range(10):
        await rig.cycle(60)
    assert rig.value("dra_device_utilization_percent", **rig.labels()) is None
    assert rig.value("dra_device_memory_used_bytes", **rig.labels()) == 1 << 30
    assert rig.claims.writes == []


async def test_after_a_restart_an_idle_device_keeps_its_condition(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    since = T0 - timedelta(hours=1)
    status = rig.claims.objects[("team", "claim-1")]["status"]
    status["devices"] = with_condition(
        [], (DRIVER, NODE, "gpu-0"), idle_condition(True, since, "idle")
    )
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    await rig.cycle()
    await rig.cycle(60)
    assert rig.claims.writes == []
    assert rig.value("dra_device_idle_seconds", **rig.labels()) == 3660
    rig.sm = 50.0
    await rig.cycle(10)
    assert [c["status"] for _, c in rig.claims.writes] == ["False"]


async def test_a_process_of_an_unlisted_pod_rereads_the_claim_at_most_once_a_minute(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    rig.sm = 90.0  # the GPU as a whole: above what the share is credited with
    rig.claims.add("claim-1", "u1", {"web-0": "11111111-1111-1111-1111-111111111111"}, ["gpu-0"])
    rig.checkpoint = rig.checkpoint.with_claim(
        _record("u1", "claim-1", "gpu-0-ts-0", DeviceType.TIMESLICE)
    )
    new_pod = "22222222-2222-2222-2222-222222222222"
    (tmp_path / "321").mkdir()
    (tmp_path / "321" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{new_pod}/c1\n")
    rig.processes = (ProcessUsage(321, GPU0, 40.0, 1 << 30),)
    await rig.cycle()
    assert rig.claims.reads == ["claim-1"]  # first sight: the pod list is fresh already
    rig.claims.add("claim-1", "u1", {"web-0": "x", "web-1": new_pod}, ["gpu-0-ts-0"])
    await rig.cycle(10)
    await rig.cycle(10)
    assert rig.claims.reads == ["claim-1"]  # within the minute: not read again
    labels = rig.labels(pods="web-0") | {"device": "gpu-0-ts-0"}
    assert rig.value("dra_device_utilization_percent", **labels) == 0.0
    await rig.cycle(POD_REFRESH_S - 20)
    assert rig.claims.reads == ["claim-1", "claim-1"]
    await rig.cycle(10)
    labels = rig.labels(pods="web-0,web-1") | {"device": "gpu-0-ts-0"}
    assert rig.value("dra_device_utilization_percent", **labels) == 40.0
    await rig.cycle(POD_REFRESH_S)
    assert rig.claims.reads == ["claim-1", "claim-1"]  # the pod is known now: no more reads
    old = rig.labels(pods="web-0") | {"device": "gpu-0-ts-0"}
    assert rig.value("dra_device_utilization_percent", **old) is None  # relabelled, not kept


async def test_a_failing_gpu_skips_the_cycle_and_keeps_what_was_known(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    await rig.cycle()
    await rig.cycle(30)
    rig.failures = (UsageFailure(0, "Unknown Error"),)
    await rig.cycle(30)
    await rig.cycle(30)
    assert rig.value("dra_device_idle_seconds", **rig.labels()) == 30  # last known, kept
    assert rig.claims.writes == []
    rig.failures = ()
    await rig.cycle(1)
    assert [c["status"] for _, c in rig.claims.writes] == ["True"]


async def test_a_claim_is_written_only_after_its_first_read_succeeds(tmp_path: Path) -> None:
    """After a restart the status may say Idle=True already: nothing is written for a claim
    before that is known, and once read, the condition it has stands."""
    rig = Rig(tmp_path)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    status = rig.claims.objects[("team", "claim-1")]["status"]
    since = T0 - timedelta(hours=1)
    status["devices"] = with_condition(
        [], (DRIVER, NODE, "gpu-0"), idle_condition(True, since, "idle")
    )
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    rig.claims.fail_reads = 3
    await rig.cycle()
    await rig.cycle(60)
    await rig.cycle(10)
    assert rig.claims.writes == []
    assert rig.claims.reads == ["claim-1"] * 3
    await rig.cycle(10)  # read at last: the device has been idle for an hour already
    assert rig.claims.writes == []
    assert rig.value("dra_device_idle_seconds", **rig.labels()) == 3680


async def test_the_loop_survives_failing_cycles_and_logs_the_failure_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path, interval_s=0.01)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0"])
    rig.checkpoint = rig.checkpoint.with_claim(_record("u1", "claim-1"))
    rig.usage_errors = 5
    stop = asyncio.Event()
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(rig.sampler.run(stop))
        try:
            await polling.eventually(
                lambda: rig.value("dra_device_idle_seconds", **rig.labels()) is not None,
                "a cycle to succeed after the failing ones",
            )
        finally:
            stop.set()
            await task
    failures = [e for e in logs if e["event"] == "telemetry cycle failed"]
    assert [e["error"] for e in failures] == ["NVML is not loaded"]


async def test_a_skipped_process_is_logged_once_per_cause_and_again_after_it_cleared(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    rig.claims.add("claim-1", "u1", {"web-0": "p0"}, ["gpu-0-ts-0"])
    rig.checkpoint = rig.checkpoint.with_claim(
        _record("u1", "claim-1", "gpu-0-ts-0", DeviceType.TIMESLICE)
    )
    rig.processes = (ProcessUsage(777, GPU0, 40.0, 1 << 30),)  # no /proc/777: it exited
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            await rig.cycle(10)
        rig.processes = ()
        await rig.cycle(10)
        rig.processes = (ProcessUsage(778, GPU0, 40.0, 1 << 30),)
        await rig.cycle(10)
    skipped = [e for e in logs if e["event"] == "telemetry skipped something this cycle"]
    assert [e["cause"] for e in skipped] == [NoPod.EXITED.value, NoPod.EXITED.value]
    labels = rig.labels() | {"device": "gpu-0-ts-0"}
    assert rig.value("dra_device_utilization_percent", **labels) == 0.0
