"""Fake load that follows a curve: what the fake backend's usage sample reports over time, and
how the curve is kept in the node's fake state.

The clock the sample reads (`fake.usage.wall_clock`) is replaced by one the test moves, so a
curve is read at chosen moments without waiting for it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake import usage as fake_usage_module
from dra_driver.backends.fake.load import apply_pod_load, clear_pod_load
from dra_driver.backends.fake.load_curve import LoadCurve
from dra_driver.backends.fake.state import (
    CorruptStateError,
    FakeState,
    FileStateStore,
    ProcessRecord,
    decode_state,
    encode_state,
    state_file_name,
)
from dra_driver.backends.mig import create_mig_device
from dra_driver.backends.usage import ProcessUsage
from dra_driver.inventory.model import MigPlacement
from dra_driver.inventory.products import product
from tests.unit.backends.conftest import NODE

MakeBackend = Callable[..., FakeBackend]
MIB = 1024 * 1024
H100 = product("H100-SXM5-80GB")
H100_BYTES = H100.memory_mib * MIB
POD_A = "11111111-2222-3333-4444-555555555555"
POD_B = "66666666-7777-8888-9999-000000000000"
# A start time a whole number of 120 s days after the epoch.
START = 1_700_006_400.0


class Clock:
    """The time every sample reads, moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock(START)
    monkeypatch.setattr(fake_usage_module, "wall_clock", clock)
    return clock


@pytest.fixture
def spec(tmp_path: Path) -> str:
    """minor 0: H100 without MIG; minor 1: H100 in MIG mode (GPM: its MIG devices report SM)."""
    path = tmp_path / "node.yaml"
    path.write_text(
        "gpus:\n  - profile: H100-SXM5-80GB\n    migEnabled: false\n  - profile: H100-SXM5-80GB\n"
    )
    return str(path)


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    return tmp_path / "proc"


def _processes(state_dir: Path) -> list[ProcessRecord]:
    with FileStateStore(state_dir, NODE).transaction() as state:
        return list(state.processes)


def test_the_usage_sample_follows_a_step_curve(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    (pid,) = apply_pod_load(
        state_dir, NODE, proc_root, POD_A, [whole], LoadCurve.parse("0:5,20:80"), started_at=START
    )

    seen = []
    for elapsed in (0.0, 19.999, 20.0, 3600.0):
        clock.now = START + elapsed
        sample = backend.usage()
        gpu = sample.gpus[0]
        assert gpu.memory_total_bytes == H100_BYTES
        seen.append((gpu.sm_percent, gpu.memory_used_bytes, sample.processes))
    low = (5.0, int(H100_BYTES * 0.05), (ProcessUsage(pid, whole, 5.0, int(H100_BYTES * 0.05)),))
    high = (80.0, int(H100_BYTES * 0.8), (ProcessUsage(pid, whole, 80.0, int(H100_BYTES * 0.8)),))
    assert seen == [low, low, high, high]


def test_a_mig_device_follows_its_curve_in_its_own_memory(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    device = create_mig_device(backend, 1, "1g.10gb", MigPlacement(0, 1))
    profile_bytes = H100.mig_profiles[0].memory_mib * MIB
    curve = LoadCurve.parse("0:50,10:25")
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [device.uuid], curve, started_at=START)

    figures = []
    for elapsed in (1.0, 11.0):
        clock.now = START + elapsed
        sample = backend.usage()
        (mig,) = sample.mig_devices
        figures.append((mig.sm_percent, mig.memory_used_bytes, sample.gpus[1].memory_used_bytes))
    assert figures == [
        (50.0, profile_bytes // 2, profile_bytes // 2),
        (25.0, profile_bytes // 4, profile_bytes // 4),
    ]


def test_pods_with_opposite_phases_share_one_wall_clock_day(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    """Started at different moments, two pods still take turns within the same day: when one
    is at its peak the other is at its valley, and together they keep the GPU at one level."""
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    morning = LoadCurve.parse("daily:peak=60,valley=0,day=120,phase=0")
    evening = LoadCurve.parse("daily:peak=60,valley=0,day=120,phase=0.5")
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], morning, started_at=START - 1000)
    apply_pod_load(state_dir, NODE, proc_root, POD_B, [whole], evening, started_at=START + 7)

    def by_pod() -> tuple[float, float]:
        pids = {p.pid: p.pod_uid for p in _processes(state_dir)}
        percents = {pids[p.pid]: p.sm_percent or 0.0 for p in backend.usage().processes}
        return percents[POD_A], percents[POD_B]

    clock.now = START + 240  # two days on: the day's start
    assert by_pod() == pytest.approx((60, 0))
    clock.now = START + 240 + 60  # half a day later
    assert by_pod() == pytest.approx((0, 60))
    for second in range(0, 120, 7):
        clock.now = START + second
        assert backend.usage().gpus[0].sm_percent == pytest.approx(60)


def test_fake_usage_takes_the_time_it_is_given(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    gpu = backend.gpus[0]
    apply_pod_load(
        state_dir, NODE, proc_root, POD_A, [gpu.uuid], LoadCurve.parse("0:5,20:80"), started_at=0
    )
    with FileStateStore(state_dir, NODE).transaction() as state:
        record = state.gpus[gpu.uuid]
        processes = list(state.processes)
    at = {
        now: fake_usage_module.fake_usage([(gpu, record, ())], processes, now=now).gpus[0]
        for now in (10.0, 25.0)
    }
    assert (at[10.0].sm_percent, at[25.0].sm_percent) == (5.0, 80.0)


def test_a_constant_percent_is_kept_as_before(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    """A plain number, as a float or as a curve, is the fixed share it always was: no curve in
    the state file, and the same figures at every moment."""
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], 30)
    apply_pod_load(state_dir, NODE, proc_root, POD_B, [whole], LoadCurve.parse("0:12.5"))

    document = json.loads((state_dir / state_file_name(NODE)).read_text())
    assert [sorted(p) for p in document["processes"]] == [
        ["memoryBytes", "pid", "podUid", "smPercent", "uuid"]
    ] * 2
    for now in (START, START + 1e6):
        clock.now = now
        assert backend.usage().gpus[0].sm_percent == 42.5


def test_the_curve_and_its_start_are_kept_in_the_state_file(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    curve = LoadCurve.parse("0:5,20:80")
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], curve, started_at=START + 0.5)

    (entry,) = json.loads((state_dir / state_file_name(NODE)).read_text())["processes"]
    # The figures at the start, for readers that know nothing of curves.
    assert entry["smPercent"] == 5.0
    assert entry["memoryBytes"] == int(H100_BYTES * 0.05)
    assert (entry["curve"], entry["startedAt"]) == ("0:5,20:80", START + 0.5)

    # Another backend object on the node reads the same curve from the file.
    other = make_backend(spec, state_dir=state_dir)
    clock.now = START + 20.4
    assert other.usage().gpus[0].sm_percent == 5.0
    clock.now = START + 20.5
    assert other.usage().gpus[0].sm_percent == 80.0


def test_encoding_round_trips_a_process_with_a_curve() -> None:
    state = FakeState(boot_id="b")
    state.processes = [
        ProcessRecord(3_000_000, POD_A, "GPU-1", 5.0, 100, "0:5,20:80", 1_700_000_000.25),
        ProcessRecord(3_000_001, POD_B, "GPU-1", 30.0, 300),
    ]
    assert decode_state(encode_state(state), "<test>") == state


def test_a_state_file_without_curves_still_loads(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    """Processes written before curves existed use their fixed share."""
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], LoadCurve.parse("0:5,20:80"))
    path = state_dir / state_file_name(NODE)
    document = json.loads(path.read_text())
    for process in document["processes"]:
        del process["curve"], process["startedAt"]
    path.write_text(json.dumps(document))

    (process,) = _processes(state_dir)
    assert (process.curve, process.started_at) == (None, None)
    clock.now = START + 1e6
    assert backend.usage().gpus[0].sm_percent == 5.0


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"curve": "0:5,20"}, "processes[0].curve: step '20' is not OFFSET:PERCENT"),
        ({"curve": 7}, "processes[0].curve: expected a string"),
        ({"startedAt": "soon"}, "processes[0].startedAt: expected a number"),
        ({"startedAt": None}, "processes[0].startedAt: expected a number"),
    ],
)
def test_a_state_file_with_a_bad_curve_is_refused(
    make_backend: MakeBackend,
    spec: str,
    state_dir: Path,
    proc_root: Path,
    change: dict[str, object],
    problem: str,
) -> None:
    """Refused when read, rather than loaded and failing every sample later."""
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], LoadCurve.parse("0:5,20:80"))
    path = state_dir / state_file_name(NODE)
    document = json.loads(path.read_text())
    document["processes"][0].update(change)
    path.write_text(json.dumps(document))

    with pytest.raises(CorruptStateError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        backend.usage()


def test_starting_the_same_curve_again_keeps_its_start(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    """The node agent starts a running pod's load again after it restarts; the steps must not
    begin again then. Another curve, or a start given outright, begins anew."""
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    steps = LoadCurve.parse("0:5,20:80")
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], steps, started_at=START)
    (first,) = apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], steps)
    assert [(p.pid, p.started_at) for p in _processes(state_dir)] == [(first, START)]
    clock.now = START + 25
    assert backend.usage().gpus[0].sm_percent == 80.0

    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], steps, started_at=START + 10)
    assert backend.usage().gpus[0].sm_percent == 5.0

    other = LoadCurve.parse("0:6,20:80")
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], other)
    (process,) = _processes(state_dir)
    assert process.started_at is not None and process.started_at > START + 10


def test_a_curve_never_above_zero_runs_nothing(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, clock: Clock
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], LoadCurve.parse("0:5,20:80"))

    for text in ("0:0,20:0", "daily:peak=0,valley=0,day=60"):
        assert (
            apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], LoadCurve.parse(text)) == ()
        )
        assert backend.usage().processes == ()
        assert list(proc_root.iterdir()) == []

    # A curve that starts at 0 but rises later does run a process from the start.
    (pid,) = apply_pod_load(
        state_dir, NODE, proc_root, POD_A, [whole], LoadCurve.parse("0:0,20:80"), started_at=START
    )
    assert backend.usage().processes == (ProcessUsage(pid, whole, 0.0, 0),)
    clear_pod_load(state_dir, NODE, proc_root, POD_A)
    assert backend.usage().processes == ()
