"""Which MPS control daemons the manager keeps running, and when their GPU's shares are reported
unhealthy, with a stand-in for the control tool and a clock the test moves."""

from __future__ import annotations

from pathlib import Path

import structlog.testing

from dra_driver.checkpoint import MpsDaemonRecord
from kubeletplugin.mps.daemon import DaemonDirs, MpsControl, MpsError
from kubeletplugin.mps.manager import MpsManager

UUID = "GPU-aaaa"
OTHER = "GPU-bbbb"


class Control(MpsControl):
    """Daemons that run while the test says so; a start gives the next pid or fails."""

    def __init__(self) -> None:
        super().__init__(("nvidia-cuda-mps-control",), environment={})
        self.pids: dict[Path, int] = {}
        self.next_pid = 100
        self.fail_starts = 0
        self.started: list[tuple[str, DaemonDirs]] = []
        self.quit_calls: list[tuple[str, DaemonDirs, int | None]] = []

    def running_pid(self, dirs: DaemonDirs) -> int | None:
        return self.pids.get(dirs.pipe)

    async def start(self, uuid: str, dirs: DaemonDirs) -> int:
        self.started.append((uuid, dirs))
        if self.fail_starts:
            self.fail_starts -= 1
            raise MpsError(f"cannot start the daemon for {uuid}")
        self.next_pid += 1
        self.pids[dirs.pipe] = self.next_pid
        return self.next_pid

    async def quit(self, uuid: str, dirs: DaemonDirs, pid: int | None) -> None:
        self.quit_calls.append((uuid, dirs, pid))
        self.pids.pop(dirs.pipe, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _manager(
    tmp_path: Path, **options: object
) -> tuple[MpsManager, Control, Clock, list[int], list[None]]:
    control, clock = Control(), Clock()
    counts: list[int] = []
    restarts: list[None] = []
    manager = MpsManager(
        control,
        tmp_path / "mps",
        tmp_path / "host",
        on_running=counts.append,
        on_restart=lambda: restarts.append(None),
        clock=clock,
        **options,  # type: ignore[arg-type]
    )
    return manager, control, clock, counts, restarts


def test_directories_live_under_the_state_directory_as_plugin_and_host_see_it(
    tmp_path: Path,
) -> None:
    manager = MpsManager(Control(), tmp_path / "mps", tmp_path / "host")
    assert manager.dirs(UUID) == DaemonDirs(
        tmp_path / "mps" / UUID / "pipe", tmp_path / "mps" / UUID / "log"
    )
    assert manager.host_pipe_dir(UUID) == tmp_path / "host" / UUID / "pipe"
    assert manager.record(UUID, 3, 42) == MpsDaemonRecord(
        UUID, 3, 42, str(tmp_path / "mps" / UUID / "pipe"), str(tmp_path / "mps" / UUID / "log")
    )
    alone = MpsManager(Control(), tmp_path / "mps")
    assert alone.host_pipe_dir(UUID) == tmp_path / "mps" / UUID / "pipe"


def test_running_lists_the_daemons_of_our_directories_in_order(tmp_path: Path) -> None:
    manager, control, *_ = _manager(tmp_path)
    assert manager.running() == {}  # no directory yet
    for uuid in (OTHER, UUID, "GPU-cccc"):
        (tmp_path / "mps" / uuid).mkdir(parents=True)
    control.pids[manager.dirs(OTHER).pipe] = 7
    control.pids[manager.dirs(UUID).pipe] = 5
    assert list(manager.running().items()) == [(UUID, 5), (OTHER, 7)]


def test_the_running_count_goes_to_the_callback_when_there_is_one(tmp_path: Path) -> None:
    manager, _, _, counts, _ = _manager(tmp_path)
    manager.report_running(2)
    manager.report_running(0)
    assert counts == [2, 0]
    MpsManager(Control(), tmp_path).report_running(1)  # no callback: nothing to do


async def test_ensure_adopts_a_running_daemon_and_starts_a_missing_one(tmp_path: Path) -> None:
    manager, control, *_ = _manager(tmp_path)
    control.pids[manager.dirs(UUID).pipe] = 55
    assert await manager.ensure(UUID, 0) == (manager.record(UUID, 0, 55), False)
    assert control.started == []
    record, started = await manager.ensure(OTHER, 1)
    assert (record, started) == (manager.record(OTHER, 1, 101), True)
    assert control.started == [(OTHER, manager.dirs(OTHER))]


async def test_revive_keeps_a_live_daemon_and_follows_a_new_pid(tmp_path: Path) -> None:
    manager, control, _, _, restarts = _manager(tmp_path)
    record = manager.record(UUID, 2, 55)
    control.pids[manager.dirs(UUID).pipe] = 55
    assert await manager.revive(record) is record
    control.pids[manager.dirs(UUID).pipe] = 56
    assert await manager.revive(record) == manager.record(UUID, 2, 56)
    assert restarts == [] and control.started == []
    assert manager.unhealthy() == {} and manager.health_version == 0


async def test_a_dead_daemon_is_started_again_and_counted_as_a_restart(tmp_path: Path) -> None:
    manager, control, _, _, restarts = _manager(tmp_path)
    record = manager.record(UUID, 2, 55)
    revived = await manager.revive(record)
    assert revived == manager.record(UUID, 2, 101)
    assert restarts == [None]
    assert control.started == [(UUID, manager.dirs(UUID))]
    # One death is below the default of three.
    assert manager.unhealthy() == {} and manager.health_version == 0


async def test_a_daemon_that_cannot_be_started_again_keeps_its_record_and_counts_twice(
    tmp_path: Path,
) -> None:
    manager, control, *_ = _manager(tmp_path, max_failures=2)
    control.fail_starts = 1
    record = manager.record(UUID, 2, 55)
    assert await manager.revive(record) is record
    assert manager.unhealthy() == {
        2: f"MPS control daemon for {UUID} failed 2 times in 300 s: "
        f"cannot start the daemon for {UUID}"
    }
    assert manager.health_version == 1


async def test_failures_within_the_window_make_the_shares_unhealthy(tmp_path: Path) -> None:
    manager, control, clock, *_ = _manager(tmp_path, max_failures=3, failure_window_s=60.5)
    record = manager.record(UUID, 4, 55)
    for _ in range(2):
        control.pids.clear()  # it died
        record = await manager.revive(record)
        clock.now += 10
    assert manager.unhealthy() == {} and manager.health_version == 0
    control.pids.clear()
    record = await manager.revive(record)
    why = f"MPS control daemon for {UUID} failed 3 times in 60.5 s: the MPS control daemon died"
    assert manager.unhealthy() == {4: why}
    assert manager.health_version == 1
    # A fourth death in the window changes the reason (the count), so the version moves.
    control.pids.clear()
    record = await manager.revive(record)
    assert manager.unhealthy() == {4: why.replace("3 times", "4 times")}
    assert manager.health_version == 2


async def test_failures_older_than_the_window_do_not_count(tmp_path: Path) -> None:
    manager, control, clock, *_ = _manager(tmp_path, max_failures=2, failure_window_s=60)
    record = manager.record(UUID, 0, 55)
    control.pids.clear()
    record = await manager.revive(record)
    clock.now += 60  # exactly the window: the first still counts
    control.pids.clear()
    record = await manager.revive(record)
    assert set(manager.unhealthy()) == {0}
    # While the daemon runs, the failures age out and the shares are healthy again.
    clock.now += 60
    assert await manager.revive(record) is record
    assert set(manager.unhealthy()) == {0}  # the second failure is exactly a window old
    clock.now += 0.5
    assert await manager.revive(record) is record
    assert manager.unhealthy() == {} and manager.health_version == 2
    # Counting starts afresh: one more death is not two.
    control.pids.clear()
    record = await manager.revive(record)
    assert manager.unhealthy() == {}
    clock.now += 61
    control.pids.clear()
    await manager.revive(record)
    assert manager.unhealthy() == {}


async def test_the_same_failure_reported_again_does_not_move_the_version(tmp_path: Path) -> None:
    manager, control, clock, *_ = _manager(tmp_path, max_failures=1, failure_window_s=60)
    record = manager.record(UUID, 1, 55)
    control.pids.clear()
    record = await manager.revive(record)
    why = f"MPS control daemon for {UUID} failed 1 times in 60 s: the MPS control daemon died"
    assert manager.unhealthy() == {1: why} and manager.health_version == 1
    # Dead again after the first failure aged out: the same count, the same reason, no news.
    clock.now += 100
    control.pids.clear()
    await manager.revive(record)
    assert manager.unhealthy() == {1: why} and manager.health_version == 1


async def test_stopping_a_daemon_clears_its_failures_and_its_health(tmp_path: Path) -> None:
    manager, control, *_ = _manager(tmp_path, max_failures=2)
    record = manager.record(UUID, 1, 55)
    await manager.revive(record)
    await manager.stop(UUID, 1, 101)
    assert control.quit_calls == [(UUID, manager.dirs(UUID), 101)]
    assert manager.health_version == 0
    # The failure before the stop is forgotten: one more is not two.
    control.pids.clear()
    await manager.revive(record)
    assert manager.unhealthy() == {}
    control.pids.clear()
    await manager.revive(record)
    assert set(manager.unhealthy()) == {1} and manager.health_version == 1
    await manager.stop(UUID, 1, None)
    assert manager.unhealthy() == {} and manager.health_version == 2


async def test_daemons_no_claim_needs_are_forgotten_with_their_failures(tmp_path: Path) -> None:
    manager, control, *_ = _manager(tmp_path, max_failures=2)
    kept, dropped = manager.record(UUID, 0, 55), manager.record(OTHER, 1, 66)
    for record in (kept, dropped, kept, dropped):
        control.pids.clear()
        await manager.revive(record)
    assert set(manager.unhealthy()) == {0, 1} and manager.health_version == 2
    manager.forget_unneeded({UUID})
    assert set(manager.unhealthy()) == {0} and manager.health_version == 3
    # OTHER's failures went too: it takes two more deaths to report it again.
    control.pids.clear()
    await manager.revive(dropped)
    assert set(manager.unhealthy()) == {0}
    manager.forget_unneeded(set())
    assert manager.unhealthy() == {} and manager.health_version == 4
    control.pids.clear()
    await manager.revive(kept)
    assert manager.unhealthy() == {}


async def test_a_zero_window_keeps_only_failures_of_this_instant(tmp_path: Path) -> None:
    manager, control, clock, *_ = _manager(tmp_path, max_failures=2, failure_window_s=0)
    record = manager.record(UUID, 0, 55)
    control.pids.clear()
    record = await manager.revive(record)
    clock.now += 1
    control.pids.clear()
    await manager.revive(record)
    assert manager.unhealthy() == {}


async def test_by_default_three_deaths_in_five_minutes_make_the_shares_unhealthy(
    tmp_path: Path,
) -> None:
    control, clock = Control(), Clock()
    manager = MpsManager(control, tmp_path / "mps", clock=clock)
    record = manager.record(UUID, 0, 55)
    for _ in range(2):
        control.pids.clear()
        record = await manager.revive(record)
        clock.now += 149.5
    assert manager.unhealthy() == {}
    control.pids.clear()
    await manager.revive(record)
    assert manager.unhealthy() == {
        0: f"MPS control daemon for {UUID} failed 3 times in 300 s: the MPS control daemon died"
    }


async def test_the_shares_turning_unhealthy_is_logged_once(tmp_path: Path) -> None:
    manager, control, *_ = _manager(tmp_path, max_failures=1)
    record = manager.record(UUID, 3, 55)
    # The second death changes the reason (the count), not the state: no second error.
    for version in (1, 2):
        with structlog.testing.capture_logs() as logs:
            control.pids.clear()
            record = await manager.revive(record)
        errors = [(e["event"], e.get("minor")) for e in logs if e["log_level"] == "error"]
        assert errors == ([("MPS shares unhealthy", 3)] if version == 1 else [])
        assert manager.health_version == version
