"""Turning NVML return codes into the driver's typed errors.

Callers branch on error types (retry on InUseError, treat NotFoundError as done during teardown),
so the code-to-type table below is part of the driver's behaviour. It lives in one place and every
NVML call site goes through `nvml_errors`, so a code can never be mapped two different ways.

The codes are NVML's C ABI values. They are spelled out here rather than read from the pynvml
module so this mapping does not depend on which module (real or stand-in) a backend was given; a
unit test checks them against the installed pynvml.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager

from dra_driver.backends.errors import (
    BackendError,
    GpuLostError,
    InsufficientResourcesError,
    InUseError,
    InvalidArgumentError,
    NotFoundError,
    NotSupportedError,
    NvmlUnavailableError,
    PermissionDeniedError,
    UnknownBackendError,
)


class NvmlReturn(enum.IntEnum):
    """nvmlReturn_t values this driver reasons about (names without the NVML_ERROR_ prefix)."""

    SUCCESS = 0
    UNINITIALIZED = 1
    INVALID_ARGUMENT = 2
    NOT_SUPPORTED = 3
    NO_PERMISSION = 4
    ALREADY_INITIALIZED = 5
    NOT_FOUND = 6
    INSUFFICIENT_SIZE = 7
    INSUFFICIENT_POWER = 8
    DRIVER_NOT_LOADED = 9
    TIMEOUT = 10
    IRQ_ISSUE = 11
    LIBRARY_NOT_FOUND = 12
    FUNCTION_NOT_FOUND = 13
    CORRUPTED_INFOROM = 14
    GPU_IS_LOST = 15
    RESET_REQUIRED = 16
    OPERATING_SYSTEM = 17
    LIB_RM_VERSION_MISMATCH = 18
    IN_USE = 19
    MEMORY = 20
    NO_DATA = 21
    INSUFFICIENT_RESOURCES = 23
    ARGUMENT_VERSION_MISMATCH = 25
    UNKNOWN = 999


class NvmlCallError(Exception):
    """An NVML call failed; raised by the adapter so nothing else touches pynvml's exceptions.

    It is an intermediate form: the backend converts it to a BackendError (which also names the
    GPU and the operation) before it leaves the backend.
    """

    def __init__(self, code: int, function: str, text: str) -> None:
        self.code = code
        self.function = function
        self.text = text
        super().__init__(f"{function}: {text} (NVML code {code})")


_ERROR_TYPES: dict[int, type[BackendError]] = {
    NvmlReturn.NOT_FOUND: NotFoundError,
    NvmlReturn.IN_USE: InUseError,
    NvmlReturn.INSUFFICIENT_RESOURCES: InsufficientResourcesError,
    NvmlReturn.INVALID_ARGUMENT: InvalidArgumentError,
    NvmlReturn.NOT_SUPPORTED: NotSupportedError,
    NvmlReturn.NO_PERMISSION: PermissionDeniedError,
    NvmlReturn.GPU_IS_LOST: GpuLostError,
    NvmlReturn.RESET_REQUIRED: GpuLostError,
    NvmlReturn.UNINITIALIZED: NvmlUnavailableError,
    NvmlReturn.LIBRARY_NOT_FOUND: NvmlUnavailableError,
    NvmlReturn.DRIVER_NOT_LOADED: NvmlUnavailableError,
    NvmlReturn.FUNCTION_NOT_FOUND: NvmlUnavailableError,
}


def error_type(code: int) -> type[BackendError]:
    """The typed error for an NVML code; codes without a meaning of their own are 'unknown'."""
    return _ERROR_TYPES.get(code, UnknownBackendError)


def to_backend_error(failure: NvmlCallError, gpu: str, operation: str) -> BackendError:
    return error_type(failure.code)(gpu, operation, str(failure), code=failure.code)


@contextmanager
def nvml_errors(gpu: str, operation: str) -> Iterator[None]:
    """Re-raise any NvmlCallError inside as the typed error naming `gpu` and `operation`."""
    try:
        yield
    except NvmlCallError as failure:
        raise to_backend_error(failure, gpu, operation) from failure
