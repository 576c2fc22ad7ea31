"""The kubelet plugin's checkpoint: prepared claims, and what preparing them changed on the node.

It is what lets a restarted or crashed plugin finish or undo its work: roll back claims caught in
the middle of prepare, keep MIG instances that prepared claims own, and destroy the rest.
"""

from dra_driver.checkpoint.codec import (
    CURRENT_VERSION,
    UPGRADERS,
    EncodeCache,
    decode_checkpoint,
    encode_checkpoint,
)
from dra_driver.checkpoint.errors import (
    CheckpointError,
    CorruptCheckpointError,
    NewerCheckpointError,
)
from dra_driver.checkpoint.model import (
    Checkpoint,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
    MigInstanceRecord,
    MpsDaemonRecord,
)
from dra_driver.checkpoint.store import CheckpointStore, LoadResult

__all__ = [
    "CURRENT_VERSION",
    "UPGRADERS",
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "ClaimRecord",
    "ClaimState",
    "CorruptCheckpointError",
    "DeviceRecord",
    "EncodeCache",
    "LoadResult",
    "MigInstanceRecord",
    "MpsDaemonRecord",
    "NewerCheckpointError",
    "decode_checkpoint",
    "encode_checkpoint",
]
