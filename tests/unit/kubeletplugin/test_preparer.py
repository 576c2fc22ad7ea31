"""The preparer on its own, on fake GPUs, with claims kept in memory: the steps a crash can
interrupt, each with what the checkpoint file says then (what a restarted plugin would find)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake import FakeBackend
from dra_driver.cdi import CdiSpecDir
from dra_driver.checkpoint import Checkpoint, CheckpointStore, ClaimState
from dra_driver.kubeletapi.types import ClaimRef
from kubeletplugin.prepare import faults
from kubeletplugin.prepare.container_edits import NoDeviceNodes
from kubeletplugin.prepare.preparer import Preparer
from tests.support import objects

BOOT = "boot-1"
NODE = "node-a"
UID = "00000000-0000-4000-8000-000000000001"
CLAIM = ClaimRef("default", UID, "claim")


class Steps(faults.CrashPoints):
    """Records the crash points reached, with the state of the claim in the file then (None:
    the file does not hold it)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path
        self.seen: list[tuple[str, ClaimState | None]] = []

    def reached(self, step: str) -> None:
        record = CheckpointStore(self._path).load(BOOT).checkpoint.claims.get(UID)
        self.seen.append((step, record.state if record is not None else None))


class Claims:
    """The API server's claims, as the preparer reads them."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    def allocate(self, ref: ClaimRef, *devices: str) -> None:
        results = [
            {"request": "r", "driver": DEFAULT_DRIVER_NAME, "pool": NODE, "device": device}
            for device in devices
        ]
        self.claims[ref.namespace, ref.name] = {
            "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
            "status": {"allocation": {"devices": {"results": results}}},
        }

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    made = FakeBackend.from_spec("H100-SXM5-80GB:2", NODE, boot_id=BOOT)
    yield made
    made.close()


@pytest.fixture
def claims() -> Claims:
    return Claims()


@pytest.fixture
def steps(tmp_path: Path) -> Steps:
    return Steps(tmp_path / "checkpoint.json")


@pytest.fixture
def preparer(tmp_path: Path, backend: FakeBackend, claims: Claims, steps: Steps) -> Preparer:
    """Built as the daemon builds it, and used without a loaded checkpoint: it starts from an
    empty one of its boot."""
    return Preparer(
        backend=backend,
        claims=claims,
        store=CheckpointStore(tmp_path / "checkpoint.json"),
        cdi=CdiSpecDir(tmp_path / "cdi"),
        device_nodes=NoDeviceNodes(),
        driver_name=DEFAULT_DRIVER_NAME,
        node_name=NODE,
        boot_id=BOOT,
        crash=steps,
    )


async def _prepare(preparer: Preparer) -> None:
    assert (await preparer.prepare([CLAIM]))[UID].error == ""


async def _unprepare(preparer: Preparer) -> None:
    assert await preparer.unprepare([CLAIM]) == {UID: ""}


async def test_a_mig_claim_is_on_disk_from_before_its_first_change_until_it_is_undone(
    preparer: Preparer, claims: Claims, steps: Steps, backend: FakeBackend
) -> None:
    claims.allocate(CLAIM, "gpu-1-mig-1g10gb-0")
    await _prepare(preparer)
    assert len(backend.mig_devices(1)) == 1
    await _unprepare(preparer)
    assert backend.gpu_instances(1) == ()
    started, completed = ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED
    assert steps.seen == [
        (faults.PREPARE_STARTED, started),
        (faults.PREPARE_GPU_INSTANCE_UNRECORDED, started),
        (faults.PREPARE_GPU_INSTANCE, started),
        (faults.PREPARE_MIG_DEVICE, started),
        (faults.PREPARE_MIG_RECORDED, started),
        (faults.PREPARE_CDI_WRITTEN, started),
        (faults.PREPARE_COMPLETED, completed),
        (faults.UNPREPARE_COMPUTE_INSTANCE, completed),
        (faults.UNPREPARE_MIG_DESTROYED, completed),
        (faults.UNPREPARE_CDI_DELETED, completed),
        (faults.UNPREPARE_FORGOTTEN, None),
    ]


async def test_a_claim_prepared_again_before_its_removal_was_saved_is_saved_as_started_first(
    preparer: Preparer, claims: Claims, steps: Steps
) -> None:
    # A whole GPU changes nothing on it: its first prepare saves only the completed record, and
    # its unprepare drops the record in memory only, so the file still holds it.
    claims.allocate(CLAIM, "gpu-0")
    await _prepare(preparer)
    await _unprepare(preparer)
    completed = ClaimState.PREPARE_COMPLETED
    assert steps.seen == [
        (faults.PREPARE_CDI_WRITTEN, None),
        (faults.PREPARE_COMPLETED, completed),
        (faults.UNPREPARE_CDI_DELETED, completed),
        (faults.UNPREPARE_FORGOTTEN, completed),
    ]
    # Prepared again, the new spec must not be written while the old completed record is in
    # charge of the claim on disk: a crash then would leave the new spec to a record that says
    # the claim was prepared.
    steps.seen.clear()
    await _prepare(preparer)
    assert steps.seen == [
        (faults.PREPARE_STARTED, ClaimState.PREPARE_STARTED),
        (faults.PREPARE_CDI_WRITTEN, ClaimState.PREPARE_STARTED),
        (faults.PREPARE_COMPLETED, completed),
    ]


async def test_a_failed_rollback_of_an_earlier_attempt_is_answered_in_the_claims_name(
    preparer: Preparer, claims: Claims
) -> None:
    # An earlier attempt left an on-demand MIG device of a GPU the node no longer has: the
    # rollback cannot look for its GPU instance, and the answer says which claim failed.
    claims.allocate(CLAIM, "gpu-0")
    started = objects.claim_record(UID, [("gpu-5-mig-1g10gb-0", DeviceType.MIG, 5)], pool=NODE)
    preparer.adopt(Checkpoint(boot_id=BOOT).with_claim(started))
    outcome = (await preparer.prepare([CLAIM]))[UID]
    assert outcome.error == (
        f"ResourceClaim default/claim: device gpu-5-mig-1g10gb-0: node {NODE} has no GPU 5"
    )
    assert preparer.checkpoint.claims[UID] == started
