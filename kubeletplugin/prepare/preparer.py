"""The prepare/unprepare state machine.

Every claim goes `PrepareStarted` (with everything needed to undo it) → side effects →
`PrepareCompleted` (saved before the answer goes back). When the claim changes a GPU (a MIG
instance, a time-slice setting), `PrepareStarted` is saved before the first side effect and the
record is removed from the file before unprepare answers. A claim whose only side effect is its
CDI spec skips the `PrepareStarted` save and has its removal written by whichever save comes
next: recovery deletes every spec no record owns and drops every such record whose spec is gone.
Whatever step a crash interrupts, the checkpoint and the CDI directory say what may exist, and
rolling back a started claim is the same code as unpreparing a completed one. Claims of one call
run concurrently; a lock per physical GPU serialises the MIG and time-slice changes that touch the
same GPU, and a lock per claim UID makes a repeated call wait for the first one and then return
its answer.

This module is the flow; the mechanisms it drives live beside it: the checkpoint's saves in
`journal.py`, the locks in `locks.py`, MIG devices in `mig_ops.py` and MPS control daemons in
`mps_lifecycle.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import structlog

from api import AllocatedDevice, ConfigError, resolve_device_configs
from api.device_type import DeviceType
from api.v1alpha1 import DeviceConfig, GpuConfig, Lending
from dra_driver.backends.base import GpuBackend, TimeSliceInterval
from dra_driver.backends.errors import BackendError, InUseError
from dra_driver.cdi import CdiSpecDir
from dra_driver.checkpoint import (
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
)
from dra_driver.inventory.model import Inventory
from dra_driver.kubeletapi.types import ClaimRef, PreparedDevice, PrepareOutcome
from kubeletplugin.mps.manager import MpsManager
from kubeletplugin.prepare import faults
from kubeletplugin.prepare.claim_cache import ClaimCache
from kubeletplugin.prepare.claims import (
    AllocatedResult,
    ClaimAllocation,
    ClaimError,
    ClaimSource,
    claim_label,
    read_allocation,
)
from kubeletplugin.prepare.container_edits import DeviceNodes, HandedOut, cdi_id, claim_spec
from kubeletplugin.prepare.journal import CheckpointJournal
from kubeletplugin.prepare.locks import ClaimLocks, GpuLocks
from kubeletplugin.prepare.mig_ops import MigOperations, dynamic_instances
from kubeletplugin.prepare.mps_lifecycle import MpsLifecycle
from kubeletplugin.prepare.sharing import (
    MpsLimits,
    ShareError,
    borrower_limits,
    config_limits,
    granted_limits,
    requested_interval,
    strictest,
    timeslice_users,
    uses_mps,
)
from kubeletplugin.prepare.targets import (
    FractionalShare,
    LentShare,
    OnDemandMig,
    StaticMig,
    Target,
    TimeSliceShare,
    UnknownDeviceError,
    resolve_target,
    type_word,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

# Device types that many claims may hold at once; every other device belongs to one claim.
SHARED_TYPES = frozenset({DeviceType.SHARED, DeviceType.OPPORTUNISTIC})


@dataclass(frozen=True, slots=True)
class _Planned:
    result: AllocatedResult
    target: Target
    record: DeviceRecord
    limits: MpsLimits
    sharing: str | None
    # Its clients go through the MPS control daemon of the device they get.
    mps: bool = False


class Preparer:
    """Implements the kubelet-facing `NodeDriver` contract on top of a GPU backend."""

    def __init__(
        self,
        *,
        backend: GpuBackend,
        claims: ClaimSource,
        store: CheckpointStore,
        cdi: CdiSpecDir,
        device_nodes: DeviceNodes,
        driver_name: str,
        node_name: str,
        boot_id: str,
        crash: faults.CrashPoints | None = None,
        on_prepared_devices: Callable[[int], None] | None = None,
        claim_cache: ClaimCache | None = None,
        mps: MpsManager | None = None,
        lendable: Callable[[int], int | None] | None = None,
    ) -> None:
        """Without `mps`, MPS limits only travel in the environment and no daemon is run.
        `lendable(minor)` is the memory a borrower may have on that GPU now (bytes), None when
        the GPU may not be lent (kubeletplugin/lending); without it nothing is lent."""
        self._backend = backend
        self.lendable: Callable[[int], int | None] = lendable or (lambda _minor: None)
        self._claims = claims
        self._claim_cache = claim_cache
        self._cdi = cdi
        self.cdi_in_memory = cdi.in_memory
        self._nodes = device_nodes
        self.driver_name = driver_name
        self.node_name = node_name
        self.cdi_kind = f"{driver_name}/gpu"
        self._crash = crash or faults.CrashPoints()
        self._journal = CheckpointJournal(
            store, Checkpoint(boot_id=boot_id, claims={}), on_prepared_devices=on_prepared_devices
        )
        self._inventory: Inventory | None = None
        self._gpu_locks = GpuLocks()
        self._claim_locks = ClaimLocks()
        self._mig = MigOperations(backend, self._journal, self._crash, self._current_inventory)
        self.mps = MpsLifecycle(mps, self._journal, self._gpu_locks, self._crash)

    # ---- state ---------------------------------------------------------------------------

    @property
    def checkpoint(self) -> Checkpoint:
        return self._journal.checkpoint

    def adopt(self, checkpoint: Checkpoint) -> None:
        """Start from a loaded checkpoint (recovery decides what to do with its claims)."""
        self._journal.adopt(checkpoint)

    def dynamic_instances(self) -> frozenset[tuple[int, int]]:
        """(minor, GI id) of every MIG instance a claim created: the publisher must not offer
        them again as pre-created devices."""
        return dynamic_instances(self._journal.checkpoint)

    async def flush(self) -> None:
        """Write changes kept in memory only: at shut-down, after recovery, and before a
        repeated call answers from memory (its earlier save may have failed)."""
        await self._journal.flush()

    async def _on_cdi_dir(self, operation: Callable[..., T], *args: object) -> T:
        """Run a spec-file operation: on the event loop when the directory is in memory (a few
        tens of microseconds, less than a hand-off to a thread), else in a worker thread."""
        if self.cdi_in_memory:
            return operation(*args)
        return await asyncio.to_thread(operation, *args)

    async def _current_inventory(self) -> Inventory:
        """The node's devices as last read (read once, on first need)."""
        if self._inventory is None:
            self._inventory = await asyncio.to_thread(self._backend.inventory)
        return self._inventory

    # ---- prepare -------------------------------------------------------------------------

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareOutcome]:
        if len(claims) == 1:  # kubelet's usual call: no task needed
            return {claims[0].uid: await self._prepare_guarded(claims[0])}
        outcomes = await asyncio.gather(*(self._prepare_guarded(ref) for ref in claims))
        return {ref.uid: outcome for ref, outcome in zip(claims, outcomes, strict=True)}

    async def _prepare_guarded(self, ref: ClaimRef) -> PrepareOutcome:
        label = claim_label(ref.namespace, ref.name)
        try:
            async with self._claim_locks.held(ref.uid):
                return await self._prepare_one(ref)
        except (ClaimError, UnknownDeviceError, ShareError) as err:
            message = str(err) if str(err).startswith(label) else f"{label}: {err}"
        except BackendError as err:
            message = f"{label}: {err}"
        except Exception as err:  # the plugin must answer, whatever broke
            log.exception("prepare failed unexpectedly", claim=label, uid=ref.uid)
            message = f"{label}: internal error while preparing: {err}"
        log.warning("prepare refused", claim=label, uid=ref.uid, error=message)
        return PrepareOutcome(error=message)

    async def _prepare_one(self, ref: ClaimRef) -> PrepareOutcome:
        existing = self._journal.checkpoint.claims.get(ref.uid)
        if existing is not None and existing.state is ClaimState.PREPARE_COMPLETED:
            # Success is answered only once the disk agrees: when the save that completed the
            # claim failed, memory is ahead of the file, which a restart would roll back.
            await self.flush()
            return outcome_of(existing)
        label = claim_label(ref.namespace, ref.name)
        claim = await self._read_claim(ref)
        if claim is None:
            raise ClaimError(f"{label}: not found in the API server")
        allocation = read_allocation(claim, ref.uid, self.driver_name, self.node_name)
        if existing is not None:
            # An earlier attempt stopped half-way (it failed, or the plugin restarted).
            await self._undo(existing)
        planned = await self._plan(ref, allocation)
        minors = [p.target.gpu.minor for p in planned]
        async with self._gpu_locks.held(minors):
            self._check_exclusive(ref, planned)
            record = ClaimRecord(
                uid=ref.uid,
                namespace=ref.namespace,
                name=ref.name,
                state=ClaimState.PREPARE_STARTED,
                devices=tuple(p.record for p in planned),
            )
            if changes_gpus(record) or self._journal.removal_unsaved(ref.uid):
                # Also when the file may still hold this claim from before its last unprepare:
                # a crash after the new spec must not leave that old record in charge of it.
                await self._journal.commit(self._journal.checkpoint.with_claim(record))
                self._crash.reached(faults.PREPARE_STARTED)
            else:
                # The CDI spec is the only side effect besides an MPS daemon, and start-up
                # recovery deletes every spec and stops every daemon that no record needs
                # (daemons are found through their pid files): the record need not be durable
                # before them, so it is only kept in memory (where a failed attempt's rollback
                # finds it); the PrepareCompleted save below is the first one.
                self._journal.keep(self._journal.checkpoint.with_claim(record))
            try:
                record = await self._apply(record, planned)
            except BaseException:
                try:
                    await self._undo_locked(self._journal.checkpoint.claims.get(ref.uid, record))
                except Exception:
                    # Left as PrepareStarted: the next attempt or the next start rolls it back.
                    log.exception("rolling back a failed prepare failed", uid=ref.uid)
                raise
            record = replace(record, state=ClaimState.PREPARE_COMPLETED)
            await self._journal.commit(self._journal.checkpoint.with_claim(record))
            self._crash.reached(faults.PREPARE_COMPLETED)
        # Debug, not info: one line per call costs a few per cent of a cycle, kubelet logs its
        # calls itself, the metrics count them, and the CDI spec says what was handed out.
        log.debug("claim prepared", claim=label, uid=ref.uid, devices=len(record.devices))
        return outcome_of(record)

    async def _read_claim(self, ref: ClaimRef) -> dict[str, Any] | None:
        if self._claim_cache is not None:
            cached = self._claim_cache.lookup(ref.namespace, ref.name, ref.uid)
            if cached is not None:
                return cached
        return await asyncio.to_thread(self._claims.get, ref.namespace, ref.name)

    async def _plan(self, ref: ClaimRef, allocation: ClaimAllocation) -> list[_Planned]:
        label = claim_label(ref.namespace, ref.name)
        targets = [
            (result, await self._resolve(result.device, label, result.where))
            for result in allocation.results
        ]
        devices = [AllocatedDevice(r.request, r.device, t.device_type) for r, t in targets]
        try:
            configs = resolve_device_configs(allocation.config, devices, self.driver_name)
        except ConfigError as err:
            details = "; ".join(
                f"status.allocation.devices.{problem.field}: {problem.reason}"
                for problem in err.problems
            )
            raise ClaimError(f"{label}: invalid opaque config: {details}") from None
        taken: dict[str, int] = {}
        planned: list[_Planned] = []
        for (result, target), device in zip(targets, devices, strict=True):
            config = configs[device].config
            cdi_name = f"{ref.uid}-{result.device}"
            taken[cdi_name] = taken.get(cdi_name, 0) + 1
            if taken[cdi_name] > 1:  # the same shareable device twice in one claim
                cdi_name = f"{cdi_name}-{taken[cdi_name]}"
            limits, sharing, interval, mps = self._sharing(result, target, config, label)
            mps_uuid = None
            if mps and self.mps.runs_daemons and not isinstance(target, OnDemandMig):
                # An on-demand MIG device has its UUID only once it exists (see _apply).
                mps_uuid = target.uuid if isinstance(target, StaticMig) else target.gpu.uuid
            record = DeviceRecord(
                request_names=(result.base_request,),
                pool_name=result.pool,
                device_name=result.device,
                cdi_device_ids=(cdi_id(self.cdi_kind, cdi_name),),
                share_id=result.share_id,
                device_type=target.device_type,
                pre_created=isinstance(target, StaticMig),
                minor=target.gpu.minor,
                timeslice_interval=interval,
                mps_thread_percentage=limits.thread_percentage,
                mps_pinned_memory_bytes=limits.pinned_memory_bytes,
                mps_uuid=mps_uuid,
                lends=lends(config),
            )
            planned.append(_Planned(result, target, record, limits, sharing, mps))
        return planned

    def _sharing(
        self, result: AllocatedResult, target: Target, config: DeviceConfig, label: str
    ) -> tuple[MpsLimits, str | None, str | None, bool]:
        """MPS limits, the sharing description for the environment, the time-slice interval
        this device asks for (None: it does not take part in the GPU's time-slice setting), and
        whether its clients go through an MPS control daemon."""
        if result.admin_access:
            return MpsLimits(), None, None, False
        if isinstance(target, FractionalShare):
            limits = granted_limits(result.consumed_capacity, f"{label}: {result.where}")
            return limits, _describe_mps(limits), None, True
        if isinstance(target, LentShare):
            limits = borrower_limits(
                granted_limits(result.consumed_capacity, f"{label}: {result.where}"),
                self.lendable(target.gpu.minor),
                f"{label}: {result.where}.device {result.device}",
            )
            return limits, _describe_mps(limits), None, True
        interval = requested_interval(config)
        if isinstance(target, TimeSliceShare):
            chosen = interval or TimeSliceInterval.DEFAULT
            name = _interval_name(chosen)
            return MpsLimits(), f"TimeSlicing:{name}", name, False
        if interval is not None:  # a whole GPU shared by the claim's containers
            name = _interval_name(interval)
            return MpsLimits(), f"TimeSlicing:{name}", name, False
        limits = config_limits(config, target.gpu.index, target.gpu.uuid)
        if uses_mps(config):
            return limits, _describe_mps(limits), None, True
        return limits, None, None, False

    def _check_exclusive(self, ref: ClaimRef, planned: Sequence[_Planned]) -> None:
        holders: dict[str, ClaimRecord] = {}
        for uid, record in self._journal.checkpoint.claims.items():
            if uid == ref.uid:
                continue
            for device in record.devices:
                if device.device_type not in SHARED_TYPES:
                    holders[device.device_name] = record
        for item in planned:
            if item.result.admin_access or item.record.device_type in SHARED_TYPES:
                continue
            holder = holders.get(item.result.device)
            if holder is not None:
                raise ClaimError(
                    f"{claim_label(ref.namespace, ref.name)}: {item.result.where}.device "
                    f"{item.result.device} is already prepared for ResourceClaim "
                    f"{holder.namespace}/{holder.name} (uid {holder.uid}); it can serve one "
                    "claim at a time"
                )

    async def _resolve(self, device: str, label: str, where: str) -> Target:
        inventory = self._inventory
        if inventory is None:
            inventory = await self._current_inventory()
        try:
            return resolve_target(inventory, device)
        except UnknownDeviceError:
            # Pre-created MIG devices come and go: look again before refusing.
            self._inventory = await asyncio.to_thread(self._backend.inventory)
        try:
            return resolve_target(self._inventory, device)
        except UnknownDeviceError as err:
            raise ClaimError(f"{label}: {where}.device: {err}") from None

    async def _apply(self, record: ClaimRecord, planned: Sequence[_Planned]) -> ClaimRecord:
        uuids: dict[int, str] = {}
        mig_ids: dict[int, tuple[int, int]] = {}
        for position, item in enumerate(planned):
            target = item.target
            if isinstance(target, OnDemandMig) and not item.result.admin_access:
                record, instance = await self._mig.create(record, target)
                assert instance.uuid is not None and instance.ci_id is not None
                uuids[position] = instance.uuid
                mig_ids[position] = (instance.gi_id, instance.ci_id)
            elif isinstance(target, StaticMig):
                uuids[position] = target.uuid
                mig_ids[position] = (target.gi_id, target.ci_id)
            else:
                uuids[position] = target.gpu.uuid
        await self._apply_timeslices({r.minor for r in record.devices if r.timeslice_interval})
        record = await self.mps.start(record, [item.mps for item in planned], uuids)
        items = [
            HandedOut(
                cdi_name=item.record.cdi_device_ids[0].split("=", 1)[1],
                device_name=item.result.device,
                device_type=type_word(item.target),
                uuid=uuids[position],
                parent_minor=item.target.gpu.minor,
                mig_ids=mig_ids.get(position),
                sharing=item.sharing,
                extra_env=self.mps.environment(record.devices[position], item.limits),
                mounts=self.mps.mounts(record.devices[position]),
            )
            for position, item in enumerate(planned)
        ]
        spec = claim_spec(self.cdi_kind, items, self._nodes)
        path = await self._on_cdi_dir(self._cdi.write_claim_spec, record.uid, spec)
        record = replace(record, cdi_spec=str(path))
        self._journal.keep(self._journal.checkpoint.with_claim(record))
        self._crash.reached(faults.PREPARE_CDI_WRITTEN)
        return record

    async def _apply_timeslices(self, minors: Iterable[int | None], *, without: str = "") -> None:
        for minor in sorted(m for m in set(minors) if m is not None):
            interval = strictest(
                timeslice_users(self._journal.checkpoint.claims, minor, exclude=without)
            )
            await asyncio.to_thread(self._backend.set_timeslice, minor, interval)

    # ---- unprepare and rollback ------------------------------------------------------------

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        if len(claims) == 1:
            return {claims[0].uid: await self._unprepare_guarded(claims[0])}
        errors = await asyncio.gather(*(self._unprepare_guarded(ref) for ref in claims))
        return {ref.uid: error for ref, error in zip(claims, errors, strict=True)}

    async def _unprepare_guarded(self, ref: ClaimRef) -> str:
        label = claim_label(ref.namespace, ref.name)
        try:
            async with self._claim_locks.held(ref.uid):
                record = self._journal.checkpoint.claims.get(ref.uid)
                if record is None:
                    # Unknown means done once the disk agrees: an earlier unprepare whose
                    # save failed dropped the record in memory only, and a restart would take
                    # the record still on disk for a prepared claim. A spec left by a crash
                    # before the checkpoint knew about the claim is removed all the same.
                    await self.flush()
                    await self._on_cdi_dir(self._cdi.delete_claim_spec, self.cdi_kind, ref.uid)
                    return ""
                await self._undo(record)
            log.debug("claim unprepared", claim=label, uid=ref.uid)
            return ""
        except InUseError as err:
            message = f"{label}: {err} (the device is in use; kubelet retries unprepare)"
        except BackendError as err:
            message = f"{label}: {err}"
        except Exception as err:
            log.exception("unprepare failed unexpectedly", claim=label, uid=ref.uid)
            message = f"{label}: internal error while unpreparing: {err}"
        log.warning("unprepare failed", claim=label, uid=ref.uid, error=message)
        return message

    async def undo(self, record: ClaimRecord) -> None:
        """Unprepare a completed claim or roll back a started one (recovery uses this)."""
        async with self._claim_locks.held(record.uid):
            await self._undo(record)

    async def _undo(self, record: ClaimRecord) -> None:
        minors = {d.minor for d in record.devices if d.minor is not None}
        minors |= {i.minor for i in record.mig_instances}
        async with self._gpu_locks.held(minors):
            await self._undo_locked(record)

    async def _undo_locked(self, record: ClaimRecord) -> None:
        """Undo every side effect a claim may have had; each step tolerates "already undone".

        A started claim may have created a GPU instance that the checkpoint never heard of (the
        crash came between the create and the save), so for started claims the live instances
        at its allocated placements are found and destroyed too.
        """
        # First, so a MIG device is not destroyed under its daemon; a crash after this leaves a
        # claim whose daemon the next start brings back until kubelet's unprepare comes again.
        await self.mps.release(record)
        if await self._mig.destroy_claimed(record):
            self._crash.reached(faults.UNPREPARE_MIG_DESTROYED)
        await self._apply_timeslices(
            (d.minor for d in record.devices if d.timeslice_interval), without=record.uid
        )
        await self._on_cdi_dir(self._cdi.delete_claim_spec, self.cdi_kind, record.uid)
        self._crash.reached(faults.UNPREPARE_CDI_DELETED)
        if changes_gpus(record):
            await self._journal.commit(self._journal.checkpoint.without_claim(record.uid))
        else:
            self._journal.forget(record.uid)
        self._crash.reached(faults.UNPREPARE_FORGOTTEN)

    def cdi_specs(self) -> dict[str, Path]:
        return self._cdi.claim_specs(self.cdi_kind)

    async def reapply_timeslices(self, minors: Iterable[int]) -> None:
        async with self._gpu_locks.held(minors):
            await self._apply_timeslices(minors)


def changes_gpus(record: ClaimRecord) -> bool:
    """Whether the claim changes a GPU (an on-demand MIG device, a time-slice setting): only a
    record on disk lets a restarted plugin find such a change, so it is saved before the change
    is made and removed only once it is undone. Any other claim has its CDI spec as its only
    side effect, which recovery reconciles from the spec directory itself."""
    return bool(record.mig_instances) or any(
        device.on_demand_mig or device.timeslice_interval is not None for device in record.devices
    )


def spec_only_record_is_stale(record: ClaimRecord, spec_uids: Set[str]) -> bool:
    """A completed claim that changed no GPU and whose spec is gone was being unprepared (the
    spec goes first) or has nothing left to hand out: recovery drops it."""
    return (
        record.state is ClaimState.PREPARE_COMPLETED
        and not changes_gpus(record)
        and record.uid not in spec_uids
    )


def outcome_of(record: ClaimRecord) -> PrepareOutcome:
    return PrepareOutcome(
        devices=tuple(
            PreparedDevice(
                request_names=d.request_names,
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=d.cdi_device_ids,
                share_id=d.share_id,
            )
            for d in record.devices
        )
    )


def lends(config: DeviceConfig) -> bool:
    """Whether the device's owner lets its GPU be lent while idle (docs/overcommit.md). Recorded
    at prepare because the lender reads only the checkpoint; a MIG device has no say (its GPU is
    never lent), and a borrower's device never gets a lending choice (api/precedence.py)."""
    return not (isinstance(config, GpuConfig) and config.lending is Lending.NEVER)


def _interval_name(interval: TimeSliceInterval) -> str:
    return interval.name.capitalize()


def _describe_mps(limits: MpsLimits) -> str:
    parts = ["MPS"]
    if limits.thread_percentage is not None:
        parts.append(f"threads={limits.thread_percentage}%")
    if limits.pinned_memory_bytes is not None:
        parts.append(f"pinnedMemory={limits.pinned_memory_bytes // (1 << 20)}Mi")
    return ":".join(parts)


def record_minors(records: Mapping[str, ClaimRecord]) -> set[int]:
    minors: set[int] = set()
    for record in records.values():
        minors |= {d.minor for d in record.devices if d.minor is not None}
        minors |= {i.minor for i in record.mig_instances}
    return minors
