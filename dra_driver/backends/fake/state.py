"""Mutable state of fake GPUs and where it lives.

Real MIG instances outlive the process that made them, and a test must be able to inject a fault
into a plugin running in another process. So with a state directory, everything that can change
lives in one JSON file per node: every operation re-reads it under an exclusive `flock` and a
mutating one replaces it atomically (temp file, fsync, rename), so readers never see half a file
and concurrent processes serialise like calls into one driver. Without a directory the same
encoded form is kept in memory, so both modes run exactly the same code.

A file that cannot be decoded is an error, never reset: silently forgetting live instances would
make the fake disagree with what the rest of the system believes exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dra_driver.backends.fake.load_curve import LoadCurve

STATE_VERSION = 2
# Versions this code reads; version 1 predates fake processes and reads as "none running".
READABLE_VERSIONS = frozenset({1, 2})
# Fake process ids start far above what a real kernel hands out on a test machine (pid_max is
# at most 4194304), high enough not to collide with the host's own processes in a proc root.
FIRST_FAKE_PID = 3_000_000
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
# Used when the boot ID cannot be read (no /proc): state then survives every restart.
FALLBACK_BOOT_ID = "fake-boot"
# Health events kept for slow readers; older ones are dropped (a reader that far behind has
# bigger problems than a missed event, and the file must not grow without bound).
MAX_EVENTS = 1000


class CorruptStateError(RuntimeError):
    """The state file exists but cannot be understood; it is left untouched for inspection."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(f"fake GPU state file {path} is unreadable: {detail}")


@dataclass(slots=True)
class ComputeInstanceRecord:
    ci_id: int
    uuid: str


@dataclass(slots=True)
class GpuInstanceRecord:
    gi_id: int
    profile: str
    gi_profile_id: int
    start: int
    size: int
    compute_instances: list[ComputeInstanceRecord] = field(default_factory=list)
    # Processes are "running" on this instance: its compute instance cannot be destroyed.
    busy: bool = False
    # The profile's memory, so fake load can size a process without the product's facts
    # (a YAML spec may define products the packaged facts lack); 0 in version 1 files.
    memory_bytes: int = 0


@dataclass(slots=True)
class UnhealthyRecord:
    xid: int
    reason: str


@dataclass(slots=True)
class CreateFault:
    """The next `remaining` creates of one kind fail with the error named `error`."""

    error: str
    remaining: int


@dataclass(slots=True)
class GpuRecord:
    # Product the record was made for: a GPU whose product changed under the same minor (and so
    # the same UUID) must not inherit instances of profiles it does not have.
    product: str
    instances: list[GpuInstanceRecord] = field(default_factory=list)
    # Compute instances ever created on this GPU; feeds MIG UUIDs so re-creation renames.
    creations: int = 0
    timeslice: int = 0
    unhealthy: UnhealthyRecord | None = None
    gpu_instance_fault: CreateFault | None = None
    compute_instance_fault: CreateFault | None = None
    # The GPU's memory, for the same reason as GpuInstanceRecord.memory_bytes.
    memory_bytes: int = 0


@dataclass(slots=True)
class EventRecord:
    seq: int
    uuid: str
    health: str
    reason: str
    xid: int | None


@dataclass(slots=True)
class ProcessRecord:
    """A fake compute process of a pod, on a GPU or MIG device (by UUID), using a share of that
    device's SM time and memory.

    Without `curve` the share is fixed: `sm_percent` and `memory_bytes`. With one (the wire form
    of a `LoadCurve`, read back by `fake.usage` at every sample) the share changes over time,
    and those two fields hold the figures at `started_at` (epoch seconds), so that a reader
    that knows nothing of curves still sees a plausible process."""

    pid: int
    pod_uid: str
    uuid: str
    sm_percent: float
    memory_bytes: int
    curve: str | None = None
    started_at: float | None = None


@dataclass(slots=True)
class FakeState:
    boot_id: str = ""
    gpus: dict[str, GpuRecord] = field(default_factory=dict)
    events: list[EventRecord] = field(default_factory=list)
    next_event_seq: int = 0
    processes: list[ProcessRecord] = field(default_factory=list)
    next_pid: int = FIRST_FAKE_PID

    def allocate_pid(self) -> int:
        """Pids only grow, so one is never reused while the state lives."""
        pid = self.next_pid
        self.next_pid += 1
        return pid

    def add_event(self, uuid: str, health: str, reason: str, xid: int | None) -> None:
        self.events.append(EventRecord(self.next_event_seq, uuid, health, reason, xid))
        self.next_event_seq += 1
        del self.events[:-MAX_EVENTS]


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    try:
        return path.read_text().strip() or FALLBACK_BOOT_ID
    except OSError:
        return FALLBACK_BOOT_ID


# ---- encoding ---------------------------------------------------------------------------------


def encode_state(state: FakeState) -> str:
    document = {
        "version": STATE_VERSION,
        "bootId": state.boot_id,
        "nextEventSeq": state.next_event_seq,
        "events": [
            {"seq": e.seq, "uuid": e.uuid, "health": e.health, "reason": e.reason, "xid": e.xid}
            for e in state.events
        ],
        "gpus": {uuid: _encode_gpu(record) for uuid, record in sorted(state.gpus.items())},
        "nextPid": state.next_pid,
        "processes": [_encode_process(p) for p in state.processes],
    }
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def _encode_process(process: ProcessRecord) -> dict[str, Any]:
    encoded: dict[str, Any] = {
        "pid": process.pid,
        "podUid": process.pod_uid,
        "uuid": process.uuid,
        "smPercent": process.sm_percent,
        "memoryBytes": process.memory_bytes,
    }
    # Only curves add keys: a constant load's file stays as earlier versions wrote it.
    if process.curve is not None:
        encoded["curve"] = process.curve
        encoded["startedAt"] = process.started_at
    return encoded


def _encode_fault(fault: CreateFault | None) -> dict[str, Any] | None:
    return None if fault is None else {"error": fault.error, "remaining": fault.remaining}


def _encode_gpu(record: GpuRecord) -> dict[str, Any]:
    return {
        "product": record.product,
        "memoryBytes": record.memory_bytes,
        "creations": record.creations,
        "timeslice": record.timeslice,
        "unhealthy": None
        if record.unhealthy is None
        else {"xid": record.unhealthy.xid, "reason": record.unhealthy.reason},
        "gpuInstanceFault": _encode_fault(record.gpu_instance_fault),
        "computeInstanceFault": _encode_fault(record.compute_instance_fault),
        "instances": [
            {
                "giId": gi.gi_id,
                "profile": gi.profile,
                "giProfileId": gi.gi_profile_id,
                "start": gi.start,
                "size": gi.size,
                "busy": gi.busy,
                "memoryBytes": gi.memory_bytes,
                "computeInstances": [
                    {"ciId": ci.ci_id, "uuid": ci.uuid} for ci in gi.compute_instances
                ],
            }
            for gi in record.instances
        ],
    }


class _ShapeError(Exception):
    """Decoded JSON that does not have the state's shape (turned into CorruptStateError)."""


class _Reader:
    """Typed access to decoded JSON; every mismatch names the JSON path that is wrong."""

    def __init__(self, value: object, where: str) -> None:
        self.value = value
        self.where = where

    def _fail(self, expected: str) -> _ShapeError:
        return _ShapeError(f"{self.where}: expected {expected}, got {self.value!r}")

    def obj(self) -> dict[str, Any]:
        if not isinstance(self.value, dict):
            raise self._fail("an object")
        return self.value

    def get(self, key: str) -> _Reader:
        mapping = self.obj()
        if key not in mapping:
            raise _ShapeError(f"{self.where}: missing {key!r}")
        return _Reader(mapping[key], f"{self.where}.{key}")

    def items(self) -> Iterator[tuple[str, _Reader]]:
        for key, value in self.obj().items():
            yield key, _Reader(value, f"{self.where}.{key}")

    def as_list(self) -> list[_Reader]:
        if not isinstance(self.value, list):
            raise self._fail("a list")
        return [_Reader(v, f"{self.where}[{i}]") for i, v in enumerate(self.value)]

    def as_int(self) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self._fail("an integer")
        return self.value

    def as_str(self) -> str:
        if not isinstance(self.value, str):
            raise self._fail("a string")
        return self.value

    def as_float(self) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise self._fail("a number")
        return float(self.value)

    def has(self, key: str) -> bool:
        return key in self.obj()

    def as_bool(self) -> bool:
        if not isinstance(self.value, bool):
            raise self._fail("a boolean")
        return self.value

    def is_null(self) -> bool:
        return self.value is None


def decode_state(text: str, path: str) -> FakeState:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise CorruptStateError(path, f"not JSON: {error}") from None
    try:
        return _decode(_Reader(raw, "$"))
    except _ShapeError as error:
        raise CorruptStateError(path, str(error)) from None


def _decode(root: _Reader) -> FakeState:
    version = root.get("version").as_int()
    if version not in READABLE_VERSIONS:
        raise _ShapeError(f"unsupported version {version} (expected at most {STATE_VERSION})")
    events = []
    for e in root.get("events").as_list():
        xid = e.get("xid")
        events.append(
            EventRecord(
                seq=e.get("seq").as_int(),
                uuid=e.get("uuid").as_str(),
                health=e.get("health").as_str(),
                reason=e.get("reason").as_str(),
                xid=None if xid.is_null() else xid.as_int(),
            )
        )
    return FakeState(
        boot_id=root.get("bootId").as_str(),
        gpus={uuid: _decode_gpu(gpu) for uuid, gpu in root.get("gpus").items()},
        events=events,
        next_event_seq=root.get("nextEventSeq").as_int(),
        # Version 1 files have neither: no fake process ever ran.
        processes=[_decode_process(p) for p in root.get("processes").as_list()]
        if root.has("processes")
        else [],
        next_pid=root.get("nextPid").as_int() if root.has("nextPid") else FIRST_FAKE_PID,
    )


def _optional_int(raw: _Reader, key: str) -> int:
    """A number added in version 2; 0 where an older file does not have it."""
    return raw.get(key).as_int() if raw.has(key) else 0


def _decode_process(raw: _Reader) -> ProcessRecord:
    return ProcessRecord(
        pid=raw.get("pid").as_int(),
        pod_uid=raw.get("podUid").as_str(),
        uuid=raw.get("uuid").as_str(),
        sm_percent=raw.get("smPercent").as_float(),
        memory_bytes=raw.get("memoryBytes").as_int(),
        # Files from before curves have neither key: the process uses its fixed share.
        curve=_decode_curve(raw.get("curve")) if raw.has("curve") else None,
        started_at=raw.get("startedAt").as_float() if raw.has("curve") else None,
    )


def _decode_curve(raw: _Reader) -> str:
    """The curve's wire form, refused here if it does not parse: a sample must not fail later
    on a file that loaded."""
    text = raw.as_str()
    try:
        LoadCurve.from_wire(text)
    except ValueError as error:
        raise _ShapeError(f"{raw.where}: {error}") from None
    return text


def _decode_fault(raw: _Reader) -> CreateFault | None:
    if raw.is_null():
        return None
    return CreateFault(error=raw.get("error").as_str(), remaining=raw.get("remaining").as_int())


def _decode_gpu(raw: _Reader) -> GpuRecord:
    unhealthy = raw.get("unhealthy")
    return GpuRecord(
        product=raw.get("product").as_str(),
        memory_bytes=_optional_int(raw, "memoryBytes"),
        creations=raw.get("creations").as_int(),
        timeslice=raw.get("timeslice").as_int(),
        unhealthy=None
        if unhealthy.is_null()
        else UnhealthyRecord(
            xid=unhealthy.get("xid").as_int(), reason=unhealthy.get("reason").as_str()
        ),
        gpu_instance_fault=_decode_fault(raw.get("gpuInstanceFault")),
        compute_instance_fault=_decode_fault(raw.get("computeInstanceFault")),
        instances=[
            GpuInstanceRecord(
                gi_id=gi.get("giId").as_int(),
                profile=gi.get("profile").as_str(),
                gi_profile_id=gi.get("giProfileId").as_int(),
                start=gi.get("start").as_int(),
                size=gi.get("size").as_int(),
                busy=gi.get("busy").as_bool(),
                memory_bytes=_optional_int(gi, "memoryBytes"),
                compute_instances=[
                    ComputeInstanceRecord(
                        ci_id=ci.get("ciId").as_int(), uuid=ci.get("uuid").as_str()
                    )
                    for ci in gi.get("computeInstances").as_list()
                ],
            )
            for gi in raw.get("instances").as_list()
        ],
    )


# ---- stores -----------------------------------------------------------------------------------


class StateStore(Protocol):
    @property
    def path(self) -> Path | None: ...

    def transaction(self) -> contextlib.AbstractContextManager[FakeState]:
        """Exclusive access to the current state; changes are saved when the block exits
        normally and discarded when it raises."""
        ...


class MemoryStateStore:
    """State for one backend object only, as when each process has its own fake GPUs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text: str | None = None

    @property
    def path(self) -> Path | None:
        return None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[FakeState]:
        with self._lock:
            state = FakeState() if self._text is None else decode_state(self._text, "<memory>")
            yield state
            self._text = encode_state(state)


def state_file_name(node_name: str) -> str:
    """Node names are DNS subdomains already; anything else is replaced to stay one path part."""
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', node_name)}.fake-gpus.json"


class FileStateStore:
    """State shared by every backend object and process using the same directory and node."""

    def __init__(self, directory: Path, node_name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._directory = directory
        self._path = directory / state_file_name(node_name)
        # The lock lives in its own file: the state file is replaced by rename on every write,
        # so a lock on it would be a lock on an inode nobody else opens any more.
        self._lock_path = directory / f".{self._path.name}.lock"
        self._thread_lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    @contextlib.contextmanager
    def transaction(self) -> Iterator[FakeState]:
        with self._thread_lock, open(self._lock_path, "a+b") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                before = self._read()
                state = FakeState() if before is None else decode_state(before, str(self._path))
                yield state
                after = encode_state(state)
                if after != before:
                    self._write(after)
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _read(self) -> str | None:
        try:
            return self._path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise CorruptStateError(str(self._path), str(error)) from None

    def _write(self, text: str) -> None:
        fd, temp_name = tempfile.mkstemp(
            dir=self._directory, prefix=f".{self._path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(fd, "w") as temp:
                temp.write(text)
                temp.flush()
                os.fsync(temp.fileno())
            os.replace(temp_name, self._path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_name)
            raise
        directory_fd = os.open(self._directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
