"""NVML return codes the fake backend attaches to its errors, and the errors tests can inject.

Code that handles backend errors may log or branch on `BackendError.code`; the fake sets the
code the real NVML call would have returned so such code is exercised the same way without a GPU.
"""

from __future__ import annotations

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

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_UNKNOWN = 999

# Names accepted by `FakeBackend.fail_next_creates`, spelled like the NVML_ERROR_* suffixes in
# CamelCase so a test reads like the failure it simulates.
FAULT_ERRORS: dict[str, tuple[type[BackendError], int]] = {
    "InsufficientResources": (InsufficientResourcesError, NVML_ERROR_INSUFFICIENT_RESOURCES),
    "InUse": (InUseError, NVML_ERROR_IN_USE),
    "InvalidArgument": (InvalidArgumentError, NVML_ERROR_INVALID_ARGUMENT),
    "NotFound": (NotFoundError, NVML_ERROR_NOT_FOUND),
    "NotSupported": (NotSupportedError, NVML_ERROR_NOT_SUPPORTED),
    "NoPermission": (PermissionDeniedError, NVML_ERROR_NO_PERMISSION),
    "GpuIsLost": (GpuLostError, NVML_ERROR_GPU_IS_LOST),
    "Uninitialized": (NvmlUnavailableError, NVML_ERROR_UNINITIALIZED),
    "Unknown": (UnknownBackendError, NVML_ERROR_UNKNOWN),
}


def check_fault_name(name: str) -> None:
    """Reject a misspelt fault at injection time, not when the fault fires in another process."""
    if name not in FAULT_ERRORS:
        raise ValueError(
            f"unknown fault error {name!r}; expected one of: {', '.join(sorted(FAULT_ERRORS))}"
        )


def fault_error(name: str, gpu: str, operation: str) -> BackendError:
    check_fault_name(name)
    error_type, code = FAULT_ERRORS[name]
    return error_type(gpu, operation, f"injected fault {name} (NVML code {code})", code=code)
