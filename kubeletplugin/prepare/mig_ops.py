"""On-demand MIG devices of claims, with the checkpoint told at every step.

The steps are `dra_driver.backends.mig`'s; what this adds is the record. The GPU instance is
saved in the claim's record before its compute instance is made, so a crash in between leaves a
recorded leftover, and a failed compute instance is cleaned up by the rollback of the whole
claim, which destroys whatever the record names. A started claim may also have a GPU instance
the checkpoint never heard of (the crash came between the create and the save): those are found
at the claim's allocated placements. Only instances a claim created are ever destroyed;
pre-created MIG devices belong to the administrator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

from dra_driver.backends import mig
from dra_driver.backends.base import GpuBackend
from dra_driver.checkpoint import Checkpoint, ClaimRecord, ClaimState, MigInstanceRecord
from dra_driver.inventory.model import Inventory
from kubeletplugin.prepare import faults
from kubeletplugin.prepare.journal import CheckpointJournal
from kubeletplugin.prepare.targets import OnDemandMig, resolve_target


def dynamic_instances(checkpoint: Checkpoint) -> frozenset[tuple[int, int]]:
    """(minor, GI id) of every MIG instance a claim created: the publisher must not offer them
    again as pre-created devices."""
    return frozenset(
        (instance.minor, instance.gi_id)
        for record in checkpoint.claims.values()
        for instance in record.mig_instances
    )


class MigOperations:
    def __init__(
        self,
        backend: GpuBackend,
        journal: CheckpointJournal,
        crash: faults.CrashPoints,
        inventory: Callable[[], Awaitable[Inventory]],
    ) -> None:
        """`inventory` gives the node's devices as last read (for the placements of a claim's
        devices)."""
        self._backend = backend
        self._journal = journal
        self._crash = crash
        self._inventory = inventory

    async def create(
        self, record: ClaimRecord, target: OnDemandMig
    ) -> tuple[ClaimRecord, MigInstanceRecord]:
        """Create the MIG device of `target` for a claim; returns the claim's record as saved
        with the new instance, and the instance."""
        minor = target.gpu.minor
        gi_id = await asyncio.to_thread(
            self._backend.create_gpu_instance, minor, target.profile.name, target.placement
        )
        self._crash.reached(faults.PREPARE_GPU_INSTANCE_UNRECORDED)
        instance = MigInstanceRecord(
            minor=minor,
            profile=target.profile.name,
            gi_id=gi_id,
            ci_id=None,
            uuid=None,
            placement_start=target.placement.start,
            placement_size=target.placement.size,
        )
        record = replace(record, mig_instances=(*record.mig_instances, instance))
        await self._journal.commit(self._journal.checkpoint.with_claim(record))
        self._crash.reached(faults.PREPARE_GPU_INSTANCE)
        device = await asyncio.to_thread(
            mig.add_compute_instance,
            self._backend,
            minor,
            gi_id,
            f"{minor} ({target.gpu.uuid})",
            target.profile.name,
            target.placement,
            made=self._compute_instance_made,
        )
        done = replace(instance, ci_id=device.ci_id, uuid=device.uuid)
        record = replace(
            record, mig_instances=tuple(done if i is instance else i for i in record.mig_instances)
        )
        await self._journal.commit(self._journal.checkpoint.with_claim(record))
        self._crash.reached(faults.PREPARE_MIG_RECORDED)
        return record, done

    def _compute_instance_made(self) -> None:
        self._crash.reached(faults.PREPARE_MIG_DEVICE)

    async def destroy_claimed(self, record: ClaimRecord) -> bool:
        """Destroy every MIG instance the claim created (for a started claim, also those at its
        placements that no record names); True when there was any."""
        destroyed = False
        for instance in record.mig_instances:
            await self._destroy(instance.minor, instance.gi_id, instance.ci_id)
            destroyed = True
        if record.state is ClaimState.PREPARE_STARTED:
            destroyed |= await self._destroy_unrecorded(record)
        return destroyed

    async def _destroy(self, minor: int, gi_id: int, ci_id: int | None) -> None:
        await asyncio.to_thread(
            mig.destroy_mig_device,
            self._backend,
            minor,
            gi_id,
            ci_id,
            compute_instance_gone=self._compute_instance_gone,
        )

    def _compute_instance_gone(self) -> None:
        self._crash.reached(faults.UNPREPARE_COMPUTE_INSTANCE)

    async def _destroy_unrecorded(self, record: ClaimRecord) -> bool:
        recorded = {(i.minor, i.gi_id) for i in record.mig_instances}
        owned = dynamic_instances(self._journal.checkpoint) - recorded
        destroyed = False
        for device in record.devices:
            if not device.on_demand_mig or device.minor is None:
                continue
            target = resolve_target(await self._inventory(), device.device_name)
            if not isinstance(target, OnDemandMig):
                continue
            live = await asyncio.to_thread(self._backend.gpu_instances, device.minor)
            for instance in live:
                key = (instance.parent_minor, instance.gi_id)
                if (
                    instance.profile == target.profile.name
                    and instance.placement == target.placement
                    and key not in recorded
                    and key not in owned
                ):
                    await self._destroy(device.minor, instance.gi_id, None)
                    destroyed = True
        return destroyed
