"""Checkpoint errors, split by what the plugin does about them.

A corrupt file is reset (the records are lost either way, and refusing to start would turn a bad
file into a crash loop). A file written by a newer plugin is refused: it is most likely intact, and
resetting it would make start-up recovery destroy MIG instances that running pods still use.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """The checkpoint cannot be used; the message names the file and what is wrong."""


class CorruptCheckpointError(CheckpointError):
    """The content is damaged or malformed; `CheckpointStore.load` resets it instead of raising."""


class NewerCheckpointError(CheckpointError):
    """The file has a format version newer than this plugin understands (after a downgrade)."""

    def __init__(self, source: str, version: int, supported: int) -> None:
        self.version = version
        self.supported = supported
        super().__init__(
            f"checkpoint {source}: format version {version} is newer than the newest this plugin "
            f"reads ({supported}); it was written by a newer plugin. Upgrade the plugin again, or "
            "move the file aside to start empty (MIG instances made by prepared claims will then "
            "be treated as unowned)"
        )
