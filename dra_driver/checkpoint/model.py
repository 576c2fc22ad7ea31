"""What the kubelet plugin must remember about prepared claims across restarts and crashes.

A claim that changes a GPU is recorded as `PrepareStarted` before anything on the node changes,
so a crash in the middle leaves a record naming what may need undoing; MIG instances are added as
soon as each exists for the same reason. (A claim whose only side effect is its CDI spec is
reconciled from the spec directory instead, so the plugin may save it later; see the preparer.)
Records are immutable; a new checkpoint is derived for every change and saved whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


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
    shape: str = ""
    minor: int | None = None
    timeslice_interval: str | None = None
    mps_thread_percentage: int | None = None
    mps_pinned_memory_bytes: int | None = None


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

    def with_claim(self, record: ClaimRecord) -> Checkpoint:
        """A copy with `record` added or replacing the record of the same UID."""
        claims = dict(self.claims)
        claims[record.uid] = record
        return Checkpoint(boot_id=self.boot_id, claims=claims)

    def without_claim(self, uid: str) -> Checkpoint:
        """A copy without that claim; the same checkpoint when it is not recorded."""
        if uid not in self.claims:
            return self
        claims = dict(self.claims)
        del claims[uid]
        return Checkpoint(boot_id=self.boot_id, claims=claims)
