"""Idle stretches, the window, unknown samples and seeding, on an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubeletplugin.telemetry.idle import IdleState, IdleTracker

KEY = ("claim-uid", "node-a", "gpu-0")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _tracker(clock: Clock) -> IdleTracker:
    return IdleTracker(threshold_percent=5.0, window_s=60.0, clock=clock)


def test_idle_is_reported_once_the_window_has_passed_with_the_stretchs_start() -> None:
    clock = Clock()
    tracker = _tracker(clock)
    assert tracker.observe(KEY, 1.0) is None  # the stretch starts at T0
    clock.advance(59)
    assert tracker.observe(KEY, 4.9) is None
    assert tracker.idle_seconds(KEY) == 59
    clock.advance(1)
    assert tracker.observe(KEY, 0.0) == IdleState(True, T0)
    clock.advance(30)
    assert tracker.observe(KEY, 0.0) is None  # transitions only
    assert tracker.state(KEY) == IdleState(True, T0)
    assert tracker.idle_seconds(KEY) == 90


def test_use_ends_the_stretch_at_once_and_reports_false_after_true() -> None:
    clock = Clock()
    tracker = _tracker(clock)
    tracker.observe(KEY, 0.0)
    clock.advance(60)
    assert tracker.observe(KEY, 0.0) == IdleState(True, T0)
    clock.advance(5)
    assert tracker.observe(KEY, 5.0) == IdleState(False, T0 + timedelta(seconds=65))
    assert tracker.idle_seconds(KEY) == 0
    assert tracker.observe(KEY, 80.0) is None


def test_a_busy_sample_inside_the_window_restarts_the_stretch() -> None:
    clock = Clock()
    tracker = _tracker(clock)
    tracker.observe(KEY, 0.0)
    clock.advance(50)
    assert tracker.observe(KEY, 50.0) is None  # never reported idle: nothing to say
    clock.advance(10)
    assert tracker.observe(KEY, 0.0) is None
    clock.advance(59)
    assert tracker.observe(KEY, 0.0) is None
    clock.advance(1)
    assert tracker.observe(KEY, 0.0) == IdleState(True, T0 + timedelta(seconds=60))


def test_unknown_samples_neither_start_nor_end_a_stretch() -> None:
    clock = Clock()
    tracker = _tracker(clock)
    assert tracker.observe(KEY, None) is None
    clock.advance(120)
    assert tracker.observe(KEY, None) is None
    assert tracker.state(KEY) is None
    assert tracker.idle_seconds(KEY) == 0
    tracker.observe(KEY, 0.0)
    clock.advance(60)
    assert tracker.observe(KEY, None) is None  # unknown does not complete the window either
    assert tracker.observe(KEY, 0.0) == IdleState(True, T0 + timedelta(seconds=120))
    assert tracker.observe(KEY, None) is None  # nor ends the idle state
    assert tracker.state(KEY) == IdleState(True, T0 + timedelta(seconds=120))


def test_a_seeded_idle_device_keeps_its_stretch_and_is_not_reported_again() -> None:
    clock = Clock()
    tracker = _tracker(clock)
    since = T0 - timedelta(hours=2)
    tracker.seed(KEY, IdleState(True, since))
    assert tracker.observe(KEY, 0.0) is None
    assert tracker.idle_seconds(KEY) == 7200
    assert tracker.observe(KEY, 90.0) == IdleState(False, T0)


def test_a_seeded_busy_device_goes_idle_after_a_full_window() -> None:
    clock = Clock()
    tracker = _tracker(clock)
    tracker.seed(KEY, IdleState(False, T0 - timedelta(hours=1)))
    assert tracker.observe(KEY, 0.0) is None
    clock.advance(60)
    assert tracker.observe(KEY, 0.0) == IdleState(True, T0)


def test_devices_are_tracked_apart_and_forgotten() -> None:
    clock = Clock()
    tracker = _tracker(clock)
    other = ("claim-uid", "node-a", "gpu-1")
    tracker.observe(KEY, 0.0)
    tracker.observe(other, 90.0)
    clock.advance(60)
    assert tracker.observe(KEY, 0.0) == IdleState(True, T0)
    assert tracker.observe(other, 0.0) is None
    tracker.forget(KEY)
    assert tracker.tracked() == {other}
    assert tracker.state(KEY) is None
