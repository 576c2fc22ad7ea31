"""Typed GPU errors.

Callers decide what to do by type, not by parsing text: prepare retries on `InUseError`, treats
`NotFoundError` during teardown as done, and reports everything else on the claim. Every error
names the GPU and the operation so a message on a ResourceClaim is enough to act on.
"""

from __future__ import annotations


class BackendError(Exception):
    """A GPU operation failed. `gpu` is a human-readable identity (minor and UUID when known)."""

    def __init__(self, gpu: str, operation: str, detail: str, *, code: int | None = None) -> None:
        self.gpu = gpu
        self.operation = operation
        self.detail = detail
        self.code = code
        super().__init__(f"GPU {gpu}: {operation}: {detail}")


class NotFoundError(BackendError):
    """The instance or device does not exist (teardown treats this as already done)."""


class InUseError(BackendError):
    """The resource is busy (processes running, or a GPU instance still has compute instances)."""


class InsufficientResourcesError(BackendError):
    """The request is well formed but collides with what exists (an overlapping placement)."""


class InvalidArgumentError(BackendError):
    """The request can never succeed on this GPU (a placement the profile does not offer)."""


class NotSupportedError(BackendError):
    """The GPU or driver cannot do this (MIG on a GPU without MIG mode, an unknown profile)."""


class PermissionDeniedError(BackendError):
    """The process lacks the privilege (MIG management needs root or the mig capability)."""


class GpuLostError(BackendError):
    """The GPU stopped answering (fallen off the bus, needs a reset)."""


class NvmlUnavailableError(BackendError):
    """NVML itself cannot be used: library missing, driver not loaded, not initialised."""


class TimeSliceCommandError(BackendError):
    """`nvidia-smi compute-policy` failed, timed out or could not be started."""


class UnknownBackendError(BackendError):
    """A failure that none of the types above describes; the code is kept for diagnosis."""
