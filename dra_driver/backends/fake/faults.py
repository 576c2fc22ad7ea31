"""NVML return codes the fake backend attaches to its errors, and the errors tests can inject.

Code that handles backend errors may log or branch on `BackendError.code`; the fake sets the
code the real NVML call would have returned so such code is exercised the same way without a GPU.
"""

from __future__ import annotations

from dra_driver.backends.errors import BackendError
from dra_driver.backends.return_codes import NvmlReturn, error_type

# Names accepted by `FakeBackend.fail_next_creates`, spelled like the NVML_ERROR_* suffixes in
# CamelCase so a test reads like the failure it simulates. The error type comes from the same
# code table the NVML backend uses, so an injected fault is exactly what real NVML would raise.
FAULT_ERRORS: dict[str, NvmlReturn] = {
    "InsufficientResources": NvmlReturn.INSUFFICIENT_RESOURCES,
    "InUse": NvmlReturn.IN_USE,
    "InvalidArgument": NvmlReturn.INVALID_ARGUMENT,
    "NotFound": NvmlReturn.NOT_FOUND,
    "NotSupported": NvmlReturn.NOT_SUPPORTED,
    "NoPermission": NvmlReturn.NO_PERMISSION,
    "GpuIsLost": NvmlReturn.GPU_IS_LOST,
    "Uninitialized": NvmlReturn.UNINITIALIZED,
    "Unknown": NvmlReturn.UNKNOWN,
}


TORN_DOWN = "TornDown"
"""Not an NVML error: the compute instance is made and the call succeeds, but another process
(an admin's `nvidia-smi mig -dci -dgi`, another agent) destroys it and its GPU instance before the
caller can list it. Injected with `FakeBackend.tear_down_next_mig_devices`."""


def check_fault_name(name: str) -> None:
    """Reject a misspelt fault at injection time, not when the fault fires in another process."""
    if name not in FAULT_ERRORS:
        raise ValueError(
            f"unknown fault error {name!r}; expected one of: {', '.join(sorted(FAULT_ERRORS))}"
        )


def fault_error(name: str, gpu: str, operation: str) -> BackendError:
    check_fault_name(name)
    code = FAULT_ERRORS[name]
    detail = f"injected fault {name} (NVML code {int(code)})"
    return error_type(code)(gpu, operation, detail, code=int(code))
