"""The checkpoint journal: what reaches the file when, and what only memory holds."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from api.device_type import DeviceType
from dra_driver.checkpoint import (
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
    ClaimState,
)
from kubeletplugin.prepare.journal import CheckpointJournal
from tests.support import objects

BOOT = "boot-1"


def _claim(
    uid: str, state: ClaimState = ClaimState.PREPARE_COMPLETED, devices: int = 1
) -> ClaimRecord:
    held = [(f"gpu-{i}", DeviceType.GPU, i) for i in range(devices)]
    return objects.claim_record(uid, held, state=state)


class GatedStore(CheckpointStore):
    """A real store whose saves can be held at the start, and which counts them."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.saves = 0
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def save(self, checkpoint: Checkpoint) -> None:
        self.entered.set()
        self.gate.wait()
        if self.fail:
            raise OSError("disk full")
        self.saves += 1
        super().save(checkpoint)


@pytest.fixture
def store(tmp_path: Path) -> GatedStore:
    return GatedStore(tmp_path / "checkpoint.json")


def _on_disk(store: CheckpointStore) -> set[str]:
    return set(CheckpointStore(store.path).load(BOOT).checkpoint.claims)


async def test_a_commit_is_on_disk_when_it_returns_and_reports_the_prepared_devices(
    store: GatedStore,
) -> None:
    reported: list[int] = []
    journal = CheckpointJournal(
        store, Checkpoint(boot_id=BOOT), on_prepared_devices=reported.append
    )
    await journal.commit(journal.checkpoint.with_claim(_claim("a", devices=2)))
    await journal.commit(journal.checkpoint.with_claim(_claim("b", ClaimState.PREPARE_STARTED)))
    assert _on_disk(store) == {"a", "b"}
    # Only completed claims count: a started one hands out nothing yet.
    assert reported == [2, 2]


async def test_commits_made_while_a_save_runs_share_the_next_save(store: GatedStore) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))

    async def add(uid: str) -> None:
        await journal.commit(journal.checkpoint.with_claim(_claim(uid)))

    store.gate.clear()
    first = asyncio.create_task(add("a"))
    await asyncio.to_thread(store.entered.wait)
    later = [asyncio.create_task(add(uid)) for uid in ("b", "c")]
    # Both run up to the save lock before the end of the first save can wake its commit: they
    # were scheduled first.
    store.gate.set()
    await asyncio.gather(first, *later)
    assert store.saves == 2
    assert _on_disk(store) == {"a", "b", "c"}


async def test_a_forgotten_claim_leaves_the_file_with_the_next_save_of_any_claim(
    store: GatedStore,
) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    await journal.commit(journal.checkpoint.with_claim(_claim("a")))
    journal.forget("a")
    assert "a" not in journal.checkpoint.claims
    assert _on_disk(store) == {"a"} and journal.removal_unsaved("a")
    await journal.commit(journal.checkpoint.with_claim(_claim("b")))
    assert _on_disk(store) == {"b"} and not journal.removal_unsaved("a")


async def test_a_removal_made_as_a_waiting_commit_queues_is_saved_by_that_commit(
    store: GatedStore,
) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    await journal.commit(journal.checkpoint.with_claim(_claim("a")))

    async def add(uid: str) -> None:
        await journal.commit(journal.checkpoint.with_claim(_claim(uid)))

    store.gate.clear()
    store.entered.clear()
    first = asyncio.create_task(add("b"))
    await asyncio.to_thread(store.entered.wait)
    waiting = asyncio.create_task(add("c"))
    await asyncio.sleep(0)  # up to the save lock
    # The last change before the waiting commit's save: that save writes it.
    journal.forget("a")
    store.gate.set()
    await asyncio.gather(first, waiting)
    assert _on_disk(store) == {"b", "c"}
    assert not journal.removal_unsaved("a")


async def test_flush_writes_a_forgotten_claim_and_then_saves_nothing_more(
    store: GatedStore,
) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    await journal.commit(journal.checkpoint.with_claim(_claim("a")))
    journal.forget("a")
    await journal.flush()
    assert _on_disk(store) == set() and not journal.removal_unsaved("a")
    await journal.flush()
    assert store.saves == 2


async def test_a_kept_change_waits_for_the_next_save(store: GatedStore) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    journal.keep(journal.checkpoint.with_claim(_claim("a", ClaimState.PREPARE_STARTED)))
    await journal.flush()  # nothing numbered changed: no save
    assert store.saves == 0 and "a" in journal.checkpoint.claims
    await journal.commit(journal.checkpoint.with_claim(_claim("b")))
    assert _on_disk(store) == {"a", "b"}


async def test_a_failed_save_leaves_memory_ahead_and_flush_writes_it(store: GatedStore) -> None:
    journal = CheckpointJournal(store, Checkpoint(boot_id=BOOT))
    store.fail = True
    with pytest.raises(OSError, match="disk full"):
        await journal.commit(journal.checkpoint.with_claim(_claim("a")))
    assert "a" in journal.checkpoint.claims
    store.fail = False
    await journal.flush()
    assert _on_disk(store) == {"a"}


def test_adopting_a_loaded_checkpoint_reports_its_prepared_devices(store: GatedStore) -> None:
    reported: list[int] = []
    journal = CheckpointJournal(
        store, Checkpoint(boot_id=BOOT), on_prepared_devices=reported.append
    )
    loaded = Checkpoint(boot_id=BOOT).with_claim(_claim("a", devices=3))
    journal.adopt(loaded)
    assert journal.checkpoint is loaded and reported == [3]
