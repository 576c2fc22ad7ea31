"""A claim's on-demand MIG devices on fake GPUs: what the checkpoint file says at every step of
a create, and which live instances a rollback destroys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from api.device_type import DeviceType
from dra_driver.backends.fake import FakeBackend
from dra_driver.checkpoint import (
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
    ClaimState,
    MigInstanceRecord,
)
from dra_driver.inventory.model import Inventory, MigPlacement
from kubeletplugin.prepare import faults
from kubeletplugin.prepare.journal import CheckpointJournal
from kubeletplugin.prepare.mig_ops import MigOperations, dynamic_instances
from kubeletplugin.prepare.targets import OnDemandMig, resolve_target
from tests.support import objects

BOOT = "boot-1"
DEVICE = "gpu-1-mig-3g40gb-4"  # 3g.40gb at memory slice 4 of GPU 1
HALF = MigPlacement(4, 4)


class Steps(faults.CrashPoints):
    """Records the crash points reached, with the claim's MIG instances in the file then."""

    def __init__(self, store: CheckpointStore) -> None:
        super().__init__()
        self._store = store
        self.seen: list[tuple[str, tuple[MigInstanceRecord, ...]]] = []

    def reached(self, step: str) -> None:
        claims = CheckpointStore(self._store.path).load(BOOT).checkpoint.claims
        self.seen.append((step, claims["a"].mig_instances if "a" in claims else ()))


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    made = FakeBackend.from_spec("H100-SXM5-80GB:2", "node-a", boot_id=BOOT)
    yield made
    made.close()


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "checkpoint.json")


def _started(uid: str, device: str = DEVICE) -> ClaimRecord:
    return objects.claim_record(uid, [(device, DeviceType.MIG, 1)], pool="node-a")


def _operations(
    backend: FakeBackend, journal: CheckpointJournal, steps: faults.CrashPoints
) -> MigOperations:
    async def inventory() -> Inventory:
        return backend.inventory()

    return MigOperations(backend, journal, steps, inventory)


async def test_the_gpu_instance_is_on_disk_before_its_compute_instance_is_made(
    backend: FakeBackend, store: CheckpointStore
) -> None:
    steps = Steps(store)
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    record = _started("a")
    await journal.commit(journal.checkpoint.with_claim(record))
    target = resolve_target(backend.inventory(), DEVICE)
    assert isinstance(target, OnDemandMig)

    record, instance = await _operations(backend, journal, steps).create(record, target)

    (device,) = backend.mig_devices(1)
    assert (instance.gi_id, instance.ci_id, instance.uuid) == (
        device.gi_id,
        device.ci_id,
        device.uuid,
    )
    assert record.mig_instances == (instance,)
    assert journal.checkpoint.claims["a"] == record
    unmade = MigInstanceRecord(1, "3g.40gb", device.gi_id, None, None, 4, 4)
    assert steps.seen == [
        (faults.PREPARE_GPU_INSTANCE_UNRECORDED, ()),
        (faults.PREPARE_GPU_INSTANCE, (unmade,)),
        (faults.PREPARE_MIG_DEVICE, (unmade,)),
        (faults.PREPARE_MIG_RECORDED, (instance,)),
    ]
    assert dynamic_instances(journal.checkpoint) == {(1, device.gi_id)}


async def test_a_failed_compute_instance_leaves_a_recorded_gpu_instance_for_the_rollback(
    backend: FakeBackend, store: CheckpointStore
) -> None:
    steps = Steps(store)
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    operations = _operations(backend, journal, steps)
    target = resolve_target(backend.inventory(), DEVICE)
    assert isinstance(target, OnDemandMig)
    backend.fail_next_creates(1, error="Unknown", compute_instance=True)
    with pytest.raises(Exception, match="Unknown"):
        await operations.create(_started("a"), target)
    (recorded,) = journal.checkpoint.claims["a"].mig_instances
    assert recorded.ci_id is None
    assert [i.gi_id for i in backend.gpu_instances(1)] == [recorded.gi_id]

    assert await operations.destroy_claimed(journal.checkpoint.claims["a"]) is True
    assert backend.gpu_instances(1) == ()


async def test_a_started_claim_takes_an_unrecorded_instance_at_its_placement_only(
    backend: FakeBackend, store: CheckpointStore
) -> None:
    steps = Steps(store)
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    operations = _operations(backend, journal, steps)
    # A crash came between creating the GPU instance (with its compute instance) and saving it.
    lost = backend.create_gpu_instance(1, "3g.40gb", HALF)
    backend.create_compute_instance(1, lost)
    # Not the claim's: another profile elsewhere (an administrator's).
    admin = backend.create_gpu_instance(1, "1g.10gb", MigPlacement(0, 1))

    assert await operations.destroy_claimed(_started("a")) is True
    assert [i.gi_id for i in backend.gpu_instances(1)] == [admin]
    assert steps.seen == [(faults.UNPREPARE_COMPUTE_INSTANCE, ())]


async def test_an_instance_another_claim_records_is_never_taken(
    backend: FakeBackend, store: CheckpointStore
) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    operations = _operations(backend, journal, Steps(store))
    theirs = backend.create_gpu_instance(1, "3g.40gb", HALF)
    owner = ClaimRecord(
        uid="b",
        namespace="ns",
        name="claim-b",
        state=ClaimState.PREPARE_COMPLETED,
        devices=_started("b").devices,
        mig_instances=(MigInstanceRecord(1, "3g.40gb", theirs, None, None, 4, 4),),
    )
    await journal.commit(journal.checkpoint.with_claim(owner))

    assert await operations.destroy_claimed(_started("a")) is False
    assert [i.gi_id for i in backend.gpu_instances(1)] == [theirs]
    # A completed claim looks only at what it recorded.
    completed = ClaimRecord(
        uid="a",
        namespace="ns",
        name="claim-a",
        state=ClaimState.PREPARE_COMPLETED,
        devices=_started("a").devices,
    )
    await journal.commit(journal.checkpoint.without_claim("b"))
    assert await operations.destroy_claimed(completed) is False
    assert [i.gi_id for i in backend.gpu_instances(1)] == [theirs]


async def test_a_started_claim_skips_a_device_the_node_no_longer_has(
    backend: FakeBackend, store: CheckpointStore
) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    operations = _operations(backend, journal, Steps(store))
    backend.create_gpu_instance(1, "3g.40gb", HALF)
    # A whole GPU that fell off the bus before the restart: no MIG device of the claim's there.
    record = objects.claim_record(
        "a", [("gpu-5", DeviceType.GPU, 5), (DEVICE, DeviceType.MIG, 1)], pool="node-a"
    )

    assert await operations.destroy_claimed(record) is True
    assert backend.gpu_instances(1) == ()


async def test_a_device_recorded_as_made_on_demand_that_is_not_does_not_end_the_search(
    backend: FakeBackend, store: CheckpointStore
) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    operations = _operations(backend, journal, Steps(store))
    admin = backend.create_gpu_instance(1, "1g.10gb", MigPlacement(0, 1))
    admin_ci = backend.create_compute_instance(1, admin)
    backend.create_gpu_instance(1, "3g.40gb", HALF)
    # A damaged record: an administrator's MIG device without its pre-created mark, first.
    record = objects.claim_record(
        "a",
        [(f"gpu-1-mig-{admin}-{admin_ci}", DeviceType.MIG, 1), (DEVICE, DeviceType.MIG, 1)],
        pool="node-a",
    )

    assert await operations.destroy_claimed(record) is True
    assert [i.gi_id for i in backend.gpu_instances(1)] == [admin]
