"""When a prepared device counts as idle, per claim and device.

A device is idle from the first sample below the threshold; it is reported `Idle=True` only
once it stayed there for the whole window, and `Idle=False` at the first sample at or above the
threshold after that. An unknown figure (None) neither starts nor ends a stretch: a device NVML
cannot see into is never called idle, nor busy. Only transitions come out, so the claim's status
is written when something changed and never per sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

TrackKey = tuple[str, str, str]
"""(claim UID, pool, device)."""


@dataclass(frozen=True, slots=True)
class IdleState:
    """What the claim's `Idle` condition should say: `since` is its lastTransitionTime (for True,
    when the idle stretch began; for False, when the device was first seen busy again)."""

    idle: bool
    since: datetime


@dataclass(slots=True)
class _Device:
    below_since: datetime | None = None
    reported: IdleState | None = None


class IdleTracker:
    def __init__(
        self, threshold_percent: float, window_s: float, clock: Callable[[], datetime]
    ) -> None:
        self.threshold = threshold_percent
        self.window = timedelta(seconds=window_s)
        self._clock = clock
        self._devices: dict[TrackKey, _Device] = {}

    def seed(self, key: TrackKey, state: IdleState) -> None:
        """Continue from what the claim's status says (after a restart): an idle device keeps
        the start of its stretch, so it is not reported again nor its idle time reset."""
        self._devices[key] = _Device(
            below_since=state.since if state.idle else None, reported=state
        )

    def observe(self, key: TrackKey, sm_percent: float | None) -> IdleState | None:
        """Take one sample of the device; the new state when the condition must change."""
        device = self._devices.setdefault(key, _Device())
        if sm_percent is None:
            return None
        now = self._clock()
        if sm_percent >= self.threshold:
            device.below_since = None
            if device.reported is not None and device.reported.idle:
                device.reported = IdleState(False, now)
                return device.reported
            return None
        if device.below_since is None:
            device.below_since = now
        idle = device.reported is not None and device.reported.idle
        if not idle and now - device.below_since >= self.window:
            device.reported = IdleState(True, device.below_since)
            return device.reported
        return None

    def state(self, key: TrackKey) -> IdleState | None:
        """The condition the device should carry now; None before its first transition."""
        device = self._devices.get(key)
        return device.reported if device else None

    def idle_seconds(self, key: TrackKey) -> float:
        """How long the device has been below the threshold; 0 when busy or unknown."""
        device = self._devices.get(key)
        if device is None or device.below_since is None:
            return 0.0
        return max(0.0, (self._clock() - device.below_since).total_seconds())

    def tracked(self) -> set[TrackKey]:
        return set(self._devices)

    def forget(self, key: TrackKey) -> None:
        self._devices.pop(key, None)


__all__ = ["IdleState", "IdleTracker", "TrackKey"]
