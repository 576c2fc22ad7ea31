"""The telemetry loop: sample, attribute, export, track idleness, write transitions.

Every interval the backend is asked for a sample in a worker thread (NVML calls block), the
figures are attributed to the prepared devices, the metrics are set, and each device's idleness
is tracked. The claim's status is written only where the condition the tracker wants differs
from the one last written: "observed" and "written" are kept apart, so a write that failed is
sent again at the next check instead of being lost, and a write never happens per sample.
Writes run in a task of their own, one batch at a time, so a slow API server never holds up
sampling.

Each claim is read once when it first shows up in the checkpoint (its pods, and its `Idle`
conditions to continue from after a restart), again whenever its status is written, and again
when a process on its device belongs to a pod it does not list, at most once a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import structlog

from dra_driver.backends.usage import UsageSample
from dra_driver.checkpoint.model import Checkpoint, ClaimRecord, ClaimState
from dra_driver.device_status import DeviceKey, idle_condition, idleness
from dra_driver.durations import format_duration
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.telemetry.attribution import Attribution, ClaimPods, attribute
from kubeletplugin.telemetry.cgroups import process_pod
from kubeletplugin.telemetry.idle import IdleState, IdleTracker, TrackKey
from kubeletplugin.telemetry.status_writer import WriteOutcome

log = structlog.get_logger(__name__)

POD_REFRESH_S = 60.0
"""At most one re-read of a claim per this many seconds because of a pod it does not list."""


class Observer(Protocol):
    """Told of every sample with its attribution (the lender, kubeletplugin/lending)."""

    async def __call__(
        self,
        sample: UsageSample,
        claims: dict[str, ClaimRecord],
        attributed: Attribution,
        pods: dict[str, ClaimPods],
        pod_of: Callable[[int], Any],
    ) -> None: ...


class StatusWriter(Protocol):
    def read(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def set_condition(
        self, namespace: str, name: str, uid: str, key: DeviceKey, condition: dict[str, Any]
    ) -> tuple[WriteOutcome, dict[str, Any] | None]: ...


@dataclass(frozen=True)
class TelemetrySettings:
    node_name: str
    driver_name: str
    interval_s: float = 10.0
    idle_threshold_percent: float = 5.0
    idle_after_s: float = 1800.0
    proc_root: Path = Path("/proc")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class TelemetrySampler:
    def __init__(
        self,
        settings: TelemetrySettings,
        usage: Callable[[], UsageSample],
        checkpoint: Callable[[], Checkpoint],
        writer: StatusWriter,
        metrics: PluginMetrics,
        clock: Callable[[], datetime] = _utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        observer: Observer | None = None,
    ) -> None:
        self.settings = settings
        self._observer = observer
        self._usage = usage
        self._checkpoint = checkpoint
        self._writer = writer
        self._metrics = metrics
        self._monotonic = monotonic
        self.tracker = IdleTracker(settings.idle_threshold_percent, settings.idle_after_s, clock)
        self._pods: dict[str, ClaimPods] = {}
        self._pods_read_at: dict[str, float] = {}
        self._claims: dict[str, ClaimRecord] = {}
        self._written: dict[TrackKey, IdleState] = {}
        self._dropped: set[TrackKey] = set()
        self._causes: set[tuple[str, str]] = set()
        self._write_task: asyncio.Task[None] | None = None
        self._cycle_error = ""

    # -- the loop

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    await self.sample_once()
                    self._cycle_error = ""
                except Exception as err:  # one bad cycle never ends telemetry
                    if str(err) != self._cycle_error:  # logged once until it changes or clears
                        log.warning("telemetry cycle failed", error=str(err))
                    self._cycle_error = str(err)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.settings.interval_s)
        finally:
            if self._write_task is not None:
                self._write_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._write_task

    async def sample_once(self) -> None:
        """One cycle; status writes it finds due are started, not waited for."""
        sample = await asyncio.to_thread(self._usage)
        causes: set[tuple[str, str]] = set()
        for failure in sample.failures:
            causes.add((f"reading GPU usage failed: {failure.message}", f"GPU {failure.minor}"))
        claims = {
            uid: record
            for uid, record in self._checkpoint().claims.items()
            if record.state is ClaimState.PREPARE_COMPLETED
        }
        self._forget_gone(set(claims))
        for uid, record in claims.items():
            # Until its first read succeeds a claim is attributed but written nothing: what
            # its status already says (after a restart) must be known first.
            if uid in self._claims or await self._first_read(record):
                self._claims[uid] = record
        proc_root = self.settings.proc_root
        result: Attribution = await asyncio.to_thread(
            attribute,
            sample,
            list(claims.values()),
            dict(self._pods),
            lambda pid: process_pod(proc_root, pid),
        )
        causes.update((s.cause, s.subject) for s in result.skipped)
        self._log_new_causes(causes)
        now = self._monotonic()
        for uid in result.stale_pods:
            if now - self._pods_read_at.get(uid, float("-inf")) >= POD_REFRESH_S:
                try:
                    await self._read_pods(claims[uid])
                except Exception as err:  # the known pods stand; tried again in a minute
                    log.warning("cannot read the claim's pods", claim=uid, error=str(err))
        for device in result.devices:
            key = (device.claim_uid, device.pool, device.device)
            self.tracker.observe(key, device.sm_percent)
            pods = self._pods.get(device.claim_uid, ClaimPods())
            self._metrics.set_device_usage(
                key,
                (
                    self.settings.node_name,
                    device.uuid,
                    device.device,
                    device.namespace,
                    device.name,
                    ",".join(pods.names),
                ),
                device.sm_percent,
                device.memory_used_bytes,
                self.tracker.idle_seconds(key),
            )
        self._start_writes()
        if self._observer is not None:
            await self._observer(
                sample, claims, result, dict(self._pods), lambda pid: process_pod(proc_root, pid)
            )

    async def flush_writes(self) -> None:
        """Wait for the status writes in flight (tests, shutdown)."""
        if self._write_task is not None:
            await self._write_task

    # -- claims and their pods

    async def _first_read(self, record: ClaimRecord) -> bool:
        """Read the claim's pods and continue from its Idle conditions; False when the read
        failed (tried again next cycle)."""
        try:
            claim = await self._read_pods(record)
        except Exception as err:
            log.warning(
                "cannot read the claim's pods",
                claim=f"{record.namespace}/{record.name}",
                error=str(err),
            )
            return False
        if claim is None:
            return True
        states = idleness(claim)
        for device in record.devices:
            key = (self.settings.driver_name, device.pool_name, device.device_name)
            state = states.get(key)
            if state is not None:
                track = (record.uid, device.pool_name, device.device_name)
                seeded = IdleState(state.idle, state.since)
                self.tracker.seed(track, seeded)
                self._written[track] = seeded
        return True

    async def _read_pods(self, record: ClaimRecord) -> dict[str, Any] | None:
        """The claim as read (None when gone), its pods kept; raises when the read fails."""
        self._pods_read_at[record.uid] = self._monotonic()
        claim = await asyncio.to_thread(self._writer.read, record.namespace, record.name)
        if claim is None or (claim.get("metadata") or {}).get("uid") != record.uid:
            self._pods[record.uid] = ClaimPods()
            return None
        self._pods[record.uid] = ClaimPods.from_claim(claim)
        return claim

    def _forget_gone(self, current: set[str]) -> None:
        for uid in set(self._claims) - current:
            del self._claims[uid]
            self._pods.pop(uid, None)
            self._pods_read_at.pop(uid, None)
        for key in self._metrics.device_usage_keys() | self.tracker.tracked():
            if key[0] not in current:
                self._metrics.remove_device_usage(key)
                self.tracker.forget(key)
                self._written.pop(key, None)
                self._dropped.discard(key)

    # -- status writes

    def _due(self) -> list[tuple[TrackKey, IdleState]]:
        due: list[tuple[TrackKey, IdleState]] = []
        for key in self.tracker.tracked():
            observed = self.tracker.state(key)
            if observed is None or key in self._dropped or key[0] not in self._claims:
                continue
            if self._written.get(key) != observed:
                due.append((key, observed))
        return due

    def _start_writes(self) -> None:
        if self._write_task is not None and not self._write_task.done():
            return  # the next cycle picks up whatever this batch did not settle
        due = self._due()
        if due:
            self._write_task = asyncio.create_task(self._write(due), name="idle-status")

    async def _write(self, due: list[tuple[TrackKey, IdleState]]) -> None:
        for key, state in due:
            record = self._claims.get(key[0])
            if record is None:
                continue
            condition = idle_condition(state.idle, state.since, self._message(state))
            device_key = (self.settings.driver_name, key[1], key[2])
            label = f"{record.namespace}/{record.name}"
            try:
                outcome, claim = await asyncio.to_thread(
                    self._writer.set_condition,
                    record.namespace,
                    record.name,
                    record.uid,
                    device_key,
                    condition,
                )
            except Exception as err:  # written != observed still: tried again next cycle
                log.warning(
                    "cannot write the Idle condition", claim=label, device=key[2], error=str(err)
                )
                continue
            if outcome is WriteOutcome.WRITTEN:
                self._written[key] = state
                log.info("Idle condition written", claim=label, device=key[2], idle=state.idle)
            elif outcome is WriteOutcome.GONE:
                self._dropped.add(key)
                log.info(
                    "claim or device gone; its Idle condition is not written",
                    claim=label,
                    device=key[2],
                )
            else:
                log.warning("Idle condition write kept conflicting", claim=label, device=key[2])
            if claim is not None and (claim.get("metadata") or {}).get("uid") == record.uid:
                self._pods[record.uid] = ClaimPods.from_claim(claim)
                self._pods_read_at[record.uid] = self._monotonic()

    def _message(self, state: IdleState) -> str:
        threshold = f"{self.settings.idle_threshold_percent:g}%"
        if state.idle:
            window = format_duration(self.settings.idle_after_s)
            return f"SM utilisation below {threshold} for at least {window}"
        return f"SM utilisation at or above {threshold}"

    # -- logging each cause once

    def _log_new_causes(self, causes: set[tuple[str, str]]) -> None:
        for cause, subject in sorted(causes - self._causes):
            log.warning("telemetry skipped something this cycle", cause=cause, subject=subject)
        self._causes = causes


__all__ = ["POD_REFRESH_S", "StatusWriter", "TelemetrySampler", "TelemetrySettings"]
