"""What the kubelet plugin must remember about prepared claims across restarts and crashes.

A claim that changes a GPU is recorded as `PrepareStarted` before anything on the node changes,
so a crash in the middle leaves a record naming what may need undoing; MIG instances are added as
soon as each exists for the same reason. (A claim whose only side effect is its CDI spec is
reconciled from the spec directory instead, so the plugin may save it later; see the preparer.)
Records are immutable; a new checkpoint is derived for every change and saved whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from api.device_type import DeviceType


class ClaimState(StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


@dataclass(frozen=True)
class MigInstanceRecord:
    """A MIG instance a claim created, with the IDs needed to destroy exactly that instance."""

    minor: int
    profile: str
    gi_id: int
    ci_id: int | None
    uuid: str | None
    placement_start: int
    placement_size: int


@dataclass(frozen=True)
class DeviceRecord:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None
    device_type: DeviceType | None = None
    # A MIG device an administrator created: prepare hands it out but neither made it nor undoes
    # it, unlike a MIG device made on demand at prepare.
    pre_created: bool = False
    minor: int | None = None
    timeslice_interval: str | None = None
    mps_thread_percentage: int | None = None
    mps_pinned_memory_bytes: int | None = None
    # UUID of the GPU (or MIG device) whose MPS control daemon serves this device's clients.
    mps_uuid: str | None = None
    # False when the claim's owner refused to lend (`lending: Never` in its GpuConfig): the lender
    # keeps the device's GPU closed to borrowers while the claim is prepared. Kept here, not read
    # from the claim again, because the lender decides at every telemetry sample from the
    # checkpoint alone.
    lends: bool = True

    def __post_init__(self) -> None:
        if self.pre_created and self.device_type is not DeviceType.MIG:
            raise ValueError(f"only a MIG device is pre-created, not {self.device_type!r}")

    @property
    def on_demand_mig(self) -> bool:
        """A MIG device that prepare created, so unprepare (or recovery) must destroy it."""
        return self.device_type is DeviceType.MIG and not self.pre_created


@dataclass(frozen=True)
class MpsDaemonRecord:
    """An MPS control daemon the plugin started: enough to find it again after a restart (its
    pid, checked against the pid file in its pipe directory) instead of starting a second one
    under running clients."""

    uuid: str
    minor: int
    pid: int
    pipe_dir: str
    log_dir: str


@dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[DeviceRecord, ...] = ()
    mig_instances: tuple[MigInstanceRecord, ...] = ()
    cdi_spec: str | None = None


@dataclass(frozen=True)
class Checkpoint:
    boot_id: str
    claims: Mapping[str, ClaimRecord] = field(default_factory=dict)
    # MPS control daemons by the UUID of the device they serve.
    mps_daemons: Mapping[str, MpsDaemonRecord] = field(default_factory=dict)

    def with_claim(self, record: ClaimRecord) -> Checkpoint:
        """A copy with `record` added or replacing the record of the same UID."""
        claims = dict(self.claims)
        claims[record.uid] = record
        return replace(self, claims=claims)

    def without_claim(self, uid: str) -> Checkpoint:
        """A copy without that claim; the same checkpoint when it is not recorded."""
        if uid not in self.claims:
            return self
        claims = dict(self.claims)
        del claims[uid]
        return replace(self, claims=claims)

    def with_mps_daemon(self, record: MpsDaemonRecord) -> Checkpoint:
        daemons = dict(self.mps_daemons)
        daemons[record.uuid] = record
        return replace(self, mps_daemons=daemons)

    def without_mps_daemon(self, uuid: str) -> Checkpoint:
        if uuid not in self.mps_daemons:
            return self
        daemons = dict(self.mps_daemons)
        del daemons[uuid]
        return replace(self, mps_daemons=daemons)
