"""The checkpoint file: loading with recovery from damage, and crash-safe saving.

Saving writes a hidden temporary file in the same directory, syncs it, renames it over the
checkpoint and syncs the directory, so after a crash the file holds either the old or the new
checkpoint in full. A temporary file left by a crash in the middle is removed at the next load.

Loading never fails because of the file's content (see `errors.py` for the one exception, a
newer format): a damaged file is moved aside as `<name>.corrupt-<UTC timestamp>`, for a person to
inspect, and replaced by an empty checkpoint; `LoadResult.problem` says so, for a warning Event.

After a reboot (another boot ID) the recorded claims describe a node that no longer exists: MIG
instances are gone, and `/var/run/cdi` is usually a tmpfs that was emptied too. They are handed
back apart, in `LoadResult.previous_boot_claims`, so the caller can clean up whatever did survive;
the file is not rewritten by `load`, so a crash before that clean-up finishes loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dra_driver.checkpoint.codec import EncodeCache, decode_checkpoint, encode_checkpoint
from dra_driver.checkpoint.errors import CheckpointError, CorruptCheckpointError
from dra_driver.checkpoint.model import Checkpoint, ClaimRecord
from dra_driver.durable import sync_directory

_TEMP_SUFFIX = ".tmp"
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


@dataclass(frozen=True)
class LoadResult:
    checkpoint: Checkpoint
    # Set when the file was damaged and has been reset; meant for a warning Event.
    problem: str | None = None
    # Claims recorded under another boot ID, void now but possibly leaving files behind.
    previous_boot_claims: Mapping[str, ClaimRecord] = field(default_factory=dict)
    previous_boot_id: str | None = None
    # Where a damaged file was moved to.
    moved_aside_to: Path | None = None


class CheckpointStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._encode_cache = EncodeCache()
        self._temp_name = str(
            path.parent / f"{self._temp_prefix()}{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        )
        # Created on the first save; prepare saves several times per claim.
        self._directory_ready = False

    def load(self, boot_id: str) -> LoadResult:
        self._remove_stale_temp_files()
        try:
            content = self.path.read_bytes()
        except FileNotFoundError:
            return LoadResult(Checkpoint(boot_id=boot_id))
        except OSError as error:
            raise CheckpointError(
                f"checkpoint {self.path}: cannot read: {error.strerror or error}"
            ) from None
        try:
            checkpoint = decode_checkpoint(content, str(self.path))
        except CorruptCheckpointError as error:
            return self._reset(boot_id, str(error))
        if checkpoint.boot_id != boot_id:
            return LoadResult(
                Checkpoint(boot_id=boot_id),
                previous_boot_claims=checkpoint.claims,
                previous_boot_id=checkpoint.boot_id,
            )
        return LoadResult(checkpoint)

    def save(self, checkpoint: Checkpoint) -> None:
        """Replace the file with `checkpoint`, durably; saves must not run concurrently."""
        data = encode_checkpoint(checkpoint, self._encode_cache).encode("ascii")
        directory = self.path.parent
        try:
            if not self._directory_ready:
                directory.mkdir(parents=True, exist_ok=True)
                self._directory_ready = True
            fd, temp_name = self._create_temp()
            try:
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(temp_name, self.path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp_name)
                raise
            sync_directory(directory)
        except OSError as error:
            raise CheckpointError(
                f"checkpoint {self.path}: cannot save: {error.strerror or error}"
            ) from error

    def _create_temp(self) -> tuple[int, str]:
        """The temporary file, under a name fixed for this store (saves come one at a time and
        each renames it away), so a save costs no random name; another process's store, or a
        leftover that somehow survived, makes it fall back to a fresh random name."""
        try:
            fd = os.open(self._temp_name, _CREATE_FLAGS, 0o600)
        except FileExistsError:
            return tempfile.mkstemp(
                dir=self.path.parent, prefix=self._temp_prefix(), suffix=_TEMP_SUFFIX
            )
        return fd, self._temp_name

    def _reset(self, boot_id: str, detail: str) -> LoadResult:
        aside = self._aside_path()
        try:
            os.rename(self.path, aside)
        except OSError as error:
            raise CheckpointError(
                f"{detail}; moving it aside to {aside} failed: {error.strerror or error}"
            ) from None
        fresh = Checkpoint(boot_id=boot_id)
        self.save(fresh)
        problem = f"{detail}; moved aside to {aside} and started from an empty checkpoint"
        return LoadResult(fresh, problem=problem, moved_aside_to=aside)

    def _aside_path(self) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        candidate = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        number = 1
        while candidate.exists():
            candidate = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{number}")
            number += 1
        return candidate

    def _temp_prefix(self) -> str:
        return f".{self.path.name}."

    def _remove_stale_temp_files(self) -> None:
        prefix = self._temp_prefix()
        try:
            entries = list(os.scandir(self.path.parent))
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith(prefix) and entry.name.endswith(_TEMP_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a write may take less than it was given
        view = view[os.write(fd, view) :]
