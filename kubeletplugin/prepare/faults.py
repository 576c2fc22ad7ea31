"""Crash points for the crash-recovery tests.

Recovery is only believable if the plugin is really killed between two side effects, so the
plugin can be told (environment variable `DRA_PLUGIN_CRASH_AT`, a comma-separated list of step
names) to SIGKILL itself when it reaches a step. Nothing is cleaned up and no finally block runs,
exactly like an OOM kill or a node-level kill. Unset, every check is one set lookup.
"""

from __future__ import annotations

import os
import signal

import structlog

log = structlog.get_logger(__name__)

ENV_VAR = "DRA_PLUGIN_CRASH_AT"

# Claims whose only side effect is the CDI spec (whole GPUs, pre-created MIG devices, fractional
# shares) skip the PrepareStarted save, so they reach PREPARE_STARTED only when prepared again
# before the removal of their previous record was saved.
PREPARE_STARTED = "prepare-started"  # PrepareStarted saved, no side effect yet
# GPU instance created, the checkpoint does not know it yet (only its claim's PrepareStarted)
PREPARE_GPU_INSTANCE_UNRECORDED = "prepare-gpu-instance-unrecorded"
PREPARE_GPU_INSTANCE = "prepare-gpu-instance"  # GPU instance recorded, no compute instance
PREPARE_MIG_DEVICE = "prepare-mig-device"  # compute instance created too, not yet recorded
PREPARE_MIG_RECORDED = "prepare-mig-recorded"  # the MIG device is in the checkpoint
# The first share of a GPU started its MPS control daemon; nothing on disk records it yet.
PREPARE_MPS_STARTED = "prepare-mps-started"
PREPARE_CDI_WRITTEN = "prepare-cdi-written"  # CDI spec written, still PrepareStarted
PREPARE_COMPLETED = "prepare-completed"  # PrepareCompleted saved, answer not yet sent
# The last share of a GPU told its MPS control daemon to quit; the claim is still recorded.
UNPREPARE_MPS_STOPPED = "unprepare-mps-stopped"
UNPREPARE_COMPUTE_INSTANCE = "unprepare-compute-instance"  # CI destroyed, GI still there
UNPREPARE_MIG_DESTROYED = "unprepare-mig-destroyed"  # MIG device gone, record still there
UNPREPARE_CDI_DELETED = "unprepare-cdi-deleted"  # CDI spec gone, record still there
# Dropped in memory only for claims that changed no GPU: the next save writes the removal.
UNPREPARE_FORGOTTEN = "unprepare-forgotten"  # record dropped, answer not yet sent

PREPARE_STEPS = (
    PREPARE_STARTED,
    PREPARE_GPU_INSTANCE_UNRECORDED,
    PREPARE_GPU_INSTANCE,
    PREPARE_MIG_DEVICE,
    PREPARE_MIG_RECORDED,
    PREPARE_CDI_WRITTEN,
    PREPARE_COMPLETED,
)
UNPREPARE_STEPS = (
    UNPREPARE_COMPUTE_INSTANCE,
    UNPREPARE_MIG_DESTROYED,
    UNPREPARE_CDI_DELETED,
    UNPREPARE_FORGOTTEN,
)
# Reached only by claims whose clients use MPS (shares, MPS configs): tested on their own.
MPS_STEPS = (PREPARE_MPS_STARTED, UNPREPARE_MPS_STOPPED)
STEPS = frozenset(PREPARE_STEPS + UNPREPARE_STEPS + MPS_STEPS)


class CrashPoints:
    def __init__(self, steps: frozenset[str] = frozenset()) -> None:
        unknown = sorted(steps - STEPS)
        if unknown:
            raise ValueError(
                f"{ENV_VAR}: unknown step(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(STEPS))}"
            )
        self._steps = steps

    @classmethod
    def from_environment(cls) -> CrashPoints:
        raw = os.environ.get(ENV_VAR, "")
        return cls(frozenset(s.strip() for s in raw.split(",") if s.strip()))

    def reached(self, step: str) -> None:
        if step in self._steps:
            log.warning("crash point reached, killing the plugin", step=step)
            os.kill(os.getpid(), signal.SIGKILL)
