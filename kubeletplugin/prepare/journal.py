"""The checkpoint as the prepare flow changes it: in memory first, on disk when it must be.

Every change is numbered. `commit` makes a change current and durable before returning; saves
are serialised and each writes the newest state, so claims that change the checkpoint while a
save runs share the next one (group commit), whatever order they finish in. `keep` changes
memory only, for state that recovery can rebuild without the file (a claim being prepared whose
only side effect is its CDI spec, an MPS daemon's pid), and `forget` drops such a claim in memory
only, remembering which change dropped it until a save covers that change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dra_driver.checkpoint import Checkpoint, CheckpointStore, ClaimState


class CheckpointJournal:
    def __init__(
        self,
        store: CheckpointStore,
        checkpoint: Checkpoint,
        *,
        on_prepared_devices: Callable[[int], None] | None = None,
    ) -> None:
        """`on_prepared_devices` hears the number of devices of completed claims after every
        numbered change (the plugin's gauge)."""
        self._store = store
        # Read often on the hot path, so a plain attribute; written through the methods below.
        self.checkpoint = checkpoint
        self._on_prepared = on_prepared_devices
        self._save_lock = asyncio.Lock()
        # `_saved` is the number of the last change on disk.
        self._changes = 0
        self._saved = 0
        # Claims dropped from the checkpoint in memory only, with the change that dropped them.
        self._unsaved_removals: dict[str, int] = {}

    def adopt(self, checkpoint: Checkpoint) -> None:
        """Start from a loaded checkpoint (recovery decides what to do with its claims)."""
        self.checkpoint = checkpoint
        self._report_prepared()

    def keep(self, checkpoint: Checkpoint) -> None:
        """Make `checkpoint` current in memory only; whichever save comes next writes it."""
        self.checkpoint = checkpoint

    def removal_unsaved(self, uid: str) -> bool:
        """Whether the file may still hold this claim from before its last unprepare."""
        return uid in self._unsaved_removals

    async def commit(self, checkpoint: Checkpoint) -> None:
        """Make `checkpoint` current and durable before returning.

        Saves are serialised and each writes the newest state, so a save that starts after a
        change always includes it, whatever order concurrent claims finish in; claims that
        change the checkpoint while a save runs share the next one.
        """
        self.checkpoint = checkpoint
        self._changes += 1
        wanted = self._changes
        async with self._save_lock:
            # Group commit: a save that began after this change may already have covered it.
            if self._saved < wanted:
                covered = self._changes
                await asyncio.to_thread(self._store.save, self.checkpoint)
                self._saved = covered
                if self._unsaved_removals:
                    self._unsaved_removals = {
                        uid: change
                        for uid, change in self._unsaved_removals.items()
                        if change > covered
                    }
        self._report_prepared()

    def forget(self, uid: str) -> None:
        """Drop a claim that changed no GPU, in memory only: its CDI spec is already gone, and
        recovery drops such a record when it finds no spec, so the next save, whoever makes it,
        is soon enough to write the removal."""
        self.checkpoint = self.checkpoint.without_claim(uid)
        self._changes += 1
        self._unsaved_removals[uid] = self._changes
        self._report_prepared()

    async def flush(self) -> None:
        """Write changes kept in memory only: at shut-down, after recovery, and before a
        repeated call answers from memory (its earlier save may have failed)."""
        if self._saved < self._changes:
            await self.commit(self.checkpoint)

    def _report_prepared(self) -> None:
        if self._on_prepared is not None:
            self._on_prepared(
                sum(
                    len(r.devices)
                    for r in self.checkpoint.claims.values()
                    if r.state is ClaimState.PREPARE_COMPLETED
                )
            )
