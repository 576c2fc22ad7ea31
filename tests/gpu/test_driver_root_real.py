"""`dra-driver cdi` on this machine's own driver; read-only, skipped where there is no GPU.

Every path the edits name must exist, and the CUDA and NVML libraries found must initialise when
loaded from the paths the containers would get (in a child process, so this process's own NVML
use is untouched). Nothing here changes a GPU setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import main
from tests.gpu.conftest import nvml_gpu_count

_COUNT, _WHY_NOT = nvml_gpu_count()
if _COUNT == 0:
    pytest.skip(_WHY_NOT, allow_module_level=True)

pytestmark = pytest.mark.gpu

_INIT = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
if sys.argv[2] == "cuda":
    sys.exit(lib.cuInit(0))
code = lib.nvmlInit_v2()
lib.nvmlShutdown()
sys.exit(code)
"""


@pytest.fixture(scope="module")
def edits() -> dict[str, Any]:
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["cdi", "--output", "json"]) == 0
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def test_every_path_named_exists(edits: dict[str, Any]) -> None:
    container = edits["containerEdits"]
    for mount in container["mounts"]:
        assert os.path.exists(mount["hostPath"]), mount
    for node in container.get("deviceNodes", []):
        assert os.path.exists(node.get("hostPath") or node["path"]), node
    for hook in container.get("hooks", []):
        assert os.access(hook["path"], os.X_OK), hook
    assert len(edits.get("devices", [])) >= _COUNT


def test_the_driver_version_is_nvmls(edits: dict[str, Any]) -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    version = version.decode() if isinstance(version, bytes) else version
    assert edits["driverVersion"] == version
    mounts = {Path(m["containerPath"]).name for m in edits["containerEdits"]["mounts"]}
    assert f"libcuda.so.{version}" in mounts


@pytest.mark.parametrize(
    ("library", "kind"), [("libcuda.so.", "cuda"), ("libnvidia-ml.so.", "nvml")]
)
def test_the_listed_library_initialises(edits: dict[str, Any], library: str, kind: str) -> None:
    mounts = edits["containerEdits"]["mounts"]
    (path,) = [
        m["hostPath"]
        for m in mounts
        if Path(m["containerPath"]).name.startswith(library)
        and Path(m["containerPath"]).name.removeprefix(library).count(".") >= 1
    ]
    argv = [sys.executable, "-c", _INIT, path, kind]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{kind} init from {path}: {done.returncode} {done.stderr}"
