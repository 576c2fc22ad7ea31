"""NVML error codes become typed errors that name the GPU and the operation."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

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
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.backends.return_codes import NvmlCallError, NvmlReturn, error_type, nvml_errors
from dra_driver.inventory.model import MigPlacement
from tests.unit.backends.nvml_standin import (
    ERROR_CLASSES,
    H100_A,
    NVMLError,
    StandInNvml,
    build_backend,
)

MAPPED: list[tuple[int, type[BackendError]]] = [
    (pynvml.NVML_ERROR_NOT_FOUND, NotFoundError),
    (pynvml.NVML_ERROR_IN_USE, InUseError),
    (pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, InsufficientResourcesError),
    (pynvml.NVML_ERROR_INVALID_ARGUMENT, InvalidArgumentError),
    (pynvml.NVML_ERROR_NOT_SUPPORTED, NotSupportedError),
    (pynvml.NVML_ERROR_NO_PERMISSION, PermissionDeniedError),
    (pynvml.NVML_ERROR_GPU_IS_LOST, GpuLostError),
    (pynvml.NVML_ERROR_RESET_REQUIRED, GpuLostError),
    (pynvml.NVML_ERROR_UNINITIALIZED, NvmlUnavailableError),
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, NvmlUnavailableError),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, NvmlUnavailableError),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, NvmlUnavailableError),
]
UNMAPPED = [
    pynvml.NVML_ERROR_UNKNOWN,
    pynvml.NVML_ERROR_TIMEOUT,
    pynvml.NVML_ERROR_MEMORY,
    pynvml.NVML_ERROR_CORRUPTED_INFOROM,
    pynvml.NVML_ERROR_INSUFFICIENT_SIZE,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_ALREADY_INITIALIZED,
    12345,
]


def test_return_codes_match_the_installed_pynvml() -> None:
    for member in NvmlReturn:
        real = "NVML_SUCCESS" if member.name == "SUCCESS" else f"NVML_ERROR_{member.name}"
        assert getattr(pynvml, real) == member.value, real


def test_standin_errors_behave_like_pynvml_errors() -> None:
    for code in (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_IN_USE, 12345):
        real, ours = pynvml.NVMLError(code), NVMLError(code)
        assert type(real).__name__ == type(ours).__name__
        assert (real.value, ours.value) == (code, code)
        assert isinstance(ours, NVMLError)
    assert str(NVMLError(pynvml.NVML_ERROR_IN_USE)) == str(
        pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
    )
    assert set(ERROR_CLASSES) == {n for n in dir(pynvml) if n.startswith("NVMLError_")}
    lost: Any = ERROR_CLASSES["NVMLError_GpuIsLost"]  # like pynvml, takes no arguments
    assert isinstance(lost(), NVMLError)
    assert lost().value == pynvml.NVML_ERROR_GPU_IS_LOST


@pytest.mark.parametrize(("code", "expected"), MAPPED)
def test_mapped_codes(tmp_path: Path, code: int, expected: type[BackendError]) -> None:
    machine, backend = build_backend(tmp_path)
    machine.fail("nvmlDeviceCreateGpuInstanceWithPlacement", code)
    with pytest.raises(BackendError) as caught:
        backend.create_gpu_instance(0, "1g.10gb", MigPlacement(6, 1))
    error = caught.value
    assert type(error) is expected
    assert error.code == code
    assert "minor 0" in str(error) and H100_A in str(error)
    assert "create GPU instance 1g.10gb at placement 6" in str(error)
    assert error.operation == "create GPU instance 1g.10gb at placement 6"


@pytest.mark.parametrize("code", UNMAPPED)
def test_other_codes_are_unknown_errors_that_keep_the_code(tmp_path: Path, code: int) -> None:
    machine, backend = build_backend(tmp_path)
    machine.fail("nvmlGpuInstanceDestroy", code)
    gi_id = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    with pytest.raises(UnknownBackendError) as caught:
        backend.destroy_gpu_instance(0, gi_id)
    assert caught.value.code == code
    assert f"destroy GPU instance {gi_id}" in str(caught.value)
    assert H100_A in str(caught.value)


@pytest.mark.parametrize(
    ("code", "expected"), [*MAPPED, *((c, UnknownBackendError) for c in UNMAPPED)]
)
def test_mapping_table(code: int, expected: type[BackendError]) -> None:
    assert error_type(code) is expected
    with pytest.raises(expected) as caught, nvml_errors("minor 3 (GPU-x)", "do a thing"):
        raise NvmlCallError(code, "nvmlDoThing", "it failed")
    assert str(caught.value).startswith("GPU minor 3 (GPU-x): do a thing: nvmlDoThing: it failed")
    assert isinstance(caught.value.__cause__, NvmlCallError)


def test_every_operation_names_itself(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    gi_id = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    ci_id = backend.create_compute_instance(0, gi_id)
    cases: list[tuple[str, Callable[[], object], str]] = [
        (
            "nvmlGpuInstanceCreateComputeInstance",
            lambda: backend.create_compute_instance(0, gi_id),
            f"create compute instance in GPU instance {gi_id}",
        ),
        (
            "nvmlComputeInstanceDestroy",
            lambda: backend.destroy_compute_instance(0, gi_id, ci_id),
            f"destroy compute instance {ci_id} of GPU instance {gi_id}",
        ),
        ("nvmlDeviceGetGpuInstances", lambda: backend.gpu_instances(0), "list GPU instances"),
        ("nvmlDeviceGetMigDeviceHandleByIndex", lambda: backend.mig_devices(0), "list MIG devices"),
    ]
    for function, action, operation in cases:
        machine.fail(function, pynvml.NVML_ERROR_UNKNOWN)
        with pytest.raises(UnknownBackendError) as caught:
            action()
        assert caught.value.operation == operation
        assert caught.value.gpu == f"minor 0 ({H100_A})"
        assert function in caught.value.detail


def test_lost_gpu_fails_inventory_naming_the_gpu(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.inventory()
    machine.gpu(0).lost = True
    with pytest.raises(GpuLostError) as caught:
        backend.inventory()
    assert caught.value.gpu == f"minor 0 ({H100_A})"
    assert caught.value.code == pynvml.NVML_ERROR_GPU_IS_LOST


def test_enumeration_failure_names_the_node(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    machine.fail("nvmlDeviceGetCount", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(NvmlUnavailableError, match=r"node node-a.*enumerate GPUs"):
        backend.inventory()


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_NO_PERMISSION,
    ],
)
def test_init_failure_is_mapped(code: int) -> None:
    machine = StandInNvml()
    machine.init_error = code
    with pytest.raises(BackendError) as caught:
        NvmlBackend("node-a", nvml=machine)
    assert type(caught.value) is error_type(code)
    assert caught.value.operation == "initialise NVML"
    assert "node-a" in str(caught.value)


def test_default_module_is_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = StandInNvml()
    monkeypatch.setitem(sys.modules, "pynvml", machine)
    backend = NvmlBackend("node-a")
    assert machine.initialised == 1
    backend.close()
    backend.close()
    assert machine.shutdowns == 1


def test_missing_pynvml_is_nvml_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailableError, match="import pynvml"):
        NvmlBackend("node-a")


def test_function_missing_from_an_old_binding_is_nvml_unavailable(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    machine.nvmlDeviceCreateGpuInstanceWithPlacement = None  # type: ignore[assignment,method-assign]
    with pytest.raises(NvmlUnavailableError) as caught:
        backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    assert caught.value.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND


def test_close_shuts_nvml_down_once(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.inventory()
    with backend:
        pass
    backend.close()
    assert machine.shutdowns == 1
    assert machine.initialised == 0
