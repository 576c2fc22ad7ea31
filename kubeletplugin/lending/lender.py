"""When a GPU may be lent, and when it must be taken back, from the telemetry's samples.

Each GPU that publishes a lent share is in one of three phases, decided anew at every sample:

- open: nobody holds the GPU, or every owner's device has stayed below the busy threshold for
  `lend_after_s`; the lent share carries no taint and borrowers may be placed there;
- closed: an owner is idle but not yet long enough, or refuses to lend (`lending: Never` in its
  claim's GpuConfig, or in its namespace's GpuQueue); the lent share carries a NoSchedule taint,
  so no new borrower comes, and those already there stay;
- busy: an owner's device is at or above the threshold (or cannot be read, which never counts
  as idle), or the GPU's free memory fell below half the headroom while borrowers hold memory
  on it; the lent share carries a NoExecute taint, so Kubernetes' device-taint eviction removes
  the borrowers' pods, and every borrower still on the GPU is taken back on the node at once.

The owner's figures are its own processes' (the attribution leaves the borrowers out), so a
borrower cannot keep the GPU from being lent by being busy itself, nor make the owner look busy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from api.device_type import DeviceType
from dra_driver.backends.usage import UsageSample
from dra_driver.checkpoint.model import ClaimRecord, ClaimState
from dra_driver.slices import names
from kubeletplugin.telemetry.attribution import Attribution, ClaimPods, PodOf


class Phase(StrEnum):
    OPEN = "Open"
    CLOSED = "Closed"
    BUSY = "Busy"


@dataclass(frozen=True, slots=True)
class LendingSettings:
    lend_after_s: float
    busy_percent: float
    headroom_bytes: int

    def __post_init__(self) -> None:
        if self.lend_after_s < 0:
            raise ValueError(f"lend_after_s must be 0 or more, got {self.lend_after_s}")
        if self.headroom_bytes < 0:
            raise ValueError(f"headroom_bytes must be 0 or more, got {self.headroom_bytes}")


@dataclass(frozen=True, slots=True)
class Borrower:
    """A claim holding a GPU's lent share, with the pods it is reserved for."""

    claim: ClaimRecord
    pods: ClaimPods


@dataclass(frozen=True, slots=True)
class TakeBack:
    """Borrowers to stop on one GPU, and why."""

    minor: int
    borrowers: tuple[Borrower, ...]
    pids: tuple[int, ...]
    """The borrowers' processes on the GPU in the sample that found the owner busy."""
    busy_at: float
    """Monotonic time of that sample: interference is counted from here."""
    reason: str


@dataclass(slots=True)
class _Gpu:
    phase: Phase = Phase.CLOSED
    idle_since: float | None = None
    lendable: int | None = None
    borrowers: int = 0


@dataclass(slots=True)
class Lender:
    settings: LendingSettings
    driver_name: str
    clock: Callable[[], float] = time.monotonic
    _gpus: dict[int, _Gpu] = field(default_factory=dict)

    def observe(
        self,
        sample: UsageSample,
        claims: Mapping[str, ClaimRecord],
        attributed: Attribution,
        pods: Mapping[str, ClaimPods],
        pod_of: PodOf,
        lent_minors: Collection[int],
        refusing: Collection[str] = (),
    ) -> list[TakeBack]:
        """One sample: every lending GPU's phase, and the take-backs it calls for.

        `refusing` holds the UIDs of claims whose owners refuse to lend."""
        now = self.clock()
        failed = {f.minor for f in sample.failures}
        gpus = {g.minor: g for g in sample.gpus}
        owners: dict[int, list[str]] = {}
        borrowers: dict[int, list[str]] = {}
        for uid, record in claims.items():
            if record.state is not ClaimState.PREPARE_COMPLETED:
                continue
            for device in record.devices:
                if device.minor is None:
                    continue
                into = borrowers if device.device_type is DeviceType.OPPORTUNISTIC else owners
                into.setdefault(device.minor, []).append(uid)
        sm: dict[tuple[str, str], float | None] = {
            (d.claim_uid, d.device): d.sm_percent for d in attributed.devices
        }
        used: dict[str, int] = {}
        for d in attributed.devices:
            if d.memory_used_bytes is not None:
                used[d.claim_uid] = used.get(d.claim_uid, 0) + d.memory_used_bytes
        take_backs: list[TakeBack] = []
        for minor in lent_minors:
            state = self._gpus.setdefault(minor, _Gpu())
            gpu = gpus.get(minor)
            held_by = sorted(set(owners.get(minor, [])))
            lent_to = [claims[u] for u in dict.fromkeys(borrowers.get(minor, []))]
            state.borrowers = len(lent_to)
            if gpu is None or minor in failed:
                state.phase, state.idle_since, state.lendable = Phase.BUSY, None, None
                reason = f"GPU {minor} could not be read"
            else:
                figures = [
                    sm.get((uid, d.device_name))
                    for uid in held_by
                    for d in claims[uid].devices
                    if d.minor == minor
                ]
                busy = [f for f in figures if f is None or f >= self.settings.busy_percent]
                total = gpu.memory_total_bytes or 0
                in_use = gpu.memory_used_bytes
                borrowed = sum(used.get(r.uid, 0) for r in lent_to)
                owner_used = None if in_use is None else max(0, in_use - borrowed)
                free = None if in_use is None else total - in_use
                pressed = bool(lent_to) and (
                    free is None or free < self.settings.headroom_bytes // 2
                )
                if busy:
                    state.phase, state.idle_since = Phase.BUSY, None
                    shown = ", ".join("unknown" if f is None else f"{f:g}%" for f in busy)
                    reason = (
                        f"its owner is busy again (SM {shown}, threshold "
                        f"{self.settings.busy_percent:g}%)"
                    )
                elif pressed:
                    state.phase = Phase.BUSY
                    reason = (
                        "its owner needs the memory (less than half the headroom of "
                        f"{self.settings.headroom_bytes >> 20} MiB is free)"
                    )
                elif held_by and any(uid in refusing for uid in held_by):
                    state.phase, state.idle_since = Phase.CLOSED, None
                    reason = "its owner refuses to lend"
                elif held_by:
                    if state.idle_since is None:
                        state.idle_since = now
                    waited = now - state.idle_since >= self.settings.lend_after_s
                    state.phase = Phase.OPEN if waited else Phase.CLOSED
                    reason = "its owner has not been idle long enough"
                else:
                    state.phase, state.idle_since = Phase.OPEN, None
                    reason = ""
                if state.phase is Phase.OPEN and owner_used is not None:
                    state.lendable = max(0, total - owner_used - self.settings.headroom_bytes)
                else:
                    state.lendable = None
            if state.phase is Phase.BUSY and lent_to:
                uids = {u for r in lent_to for u in pods.get(r.uid, ClaimPods()).uids}
                on_gpu = (
                    ()
                    if gpu is None
                    else tuple(
                        p.pid
                        for p in sample.processes
                        if p.uuid == gpu.uuid and pod_of(p.pid) in uids
                    )
                )
                take_backs.append(
                    TakeBack(
                        minor,
                        tuple(Borrower(r, pods.get(r.uid, ClaimPods())) for r in lent_to),
                        on_gpu,
                        now,
                        f"GPU {minor} was taken back from its borrowers: {reason}",
                    )
                )
        for minor in set(self._gpus) - set(lent_minors):
            del self._gpus[minor]
        return take_backs

    def phase(self, minor: int) -> Phase | None:
        state = self._gpus.get(minor)
        return None if state is None else state.phase

    def lendable(self, minor: int) -> int | None:
        """Memory a new borrower may pin on this GPU now; None while it may not be lent."""
        state = self._gpus.get(minor)
        return None if state is None else state.lendable

    def borrowed(self, minor: int) -> int:
        state = self._gpus.get(minor)
        return 0 if state is None else state.borrowers

    def taints(self, minors: Collection[int] = ()) -> dict[str, list[dict[str, str]]]:
        """The lent shares' taints, by device name: of the GPUs sampled, and of `minors` not
        sampled yet, which are closed (nothing is lent before its owner was seen idle)."""
        found: dict[str, list[dict[str, str]]] = {}
        for minor in {*self._gpus, *minors}:
            state = self._gpus.get(minor)
            taint = self.taint(Phase.CLOSED if state is None else state.phase)
            if taint is not None:
                found[names.lent_share(minor)] = [taint]
        return found

    def taint(self, phase: Phase) -> dict[str, str] | None:
        if phase is Phase.OPEN:
            return None
        if phase is Phase.CLOSED:
            return {"key": f"{self.driver_name}/lending", "value": "closed", "effect": "NoSchedule"}
        return {"key": f"{self.driver_name}/owner-busy", "value": "true", "effect": "NoExecute"}


__all__ = ["Borrower", "Lender", "LendingSettings", "Phase", "TakeBack"]
