"""`dra-driver cdi` on fake driver roots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import main
from dra_driver.driverroot.libraries import LIBRARIES
from tests.support import fake_driver_root
from tests.support.fake_driver_root import VERSION


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["cdi", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("layout", "lib_dir"), [("ubuntu", None), ("rhel", "/usr/lib64")])
def test_prints_the_edits_of_every_gpu_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str, lib_dir: str | None
) -> None:
    fake = fake_driver_root.build(tmp_path, layout=layout, gpus=2)
    lib_dir = lib_dir or str(fake.lib_dir)
    code, out, err = _run(
        capsys, "--driver-root", str(fake.root), "--dev-root", str(fake.dev), "--output", "json"
    )
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    assert data["driverVersion"] == VERSION
    edits = data["containerEdits"]
    assert set(edits) == {"env", "deviceNodes", "mounts", "hooks"}
    paths = {m["containerPath"] for m in edits["mounts"]}
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", *LIBRARIES):
        assert f"{lib_dir}/{name}.{VERSION}" in paths, name
    assert f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin" in paths
    assert "/usr/bin/nvidia-smi" in paths
    options = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    assert all(m["options"] == options for m in edits["mounts"])
    nodes = [n["path"] for n in edits["deviceNodes"]]
    assert nodes[:2] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert [d["containerEdits"]["deviceNodes"][0]["path"] for d in data["devices"]] == [
        "/dev/nvidia0",
        "/dev/nvidia1",
    ]
    symlinks, ldcache = edits["hooks"]
    assert f"libcuda.so.1::{lib_dir}/libcuda.so" in symlinks["args"]
    assert ldcache["args"] == ["nvidia-cdi-hook", "update-ldcache", "--folder", lib_dir]


def test_yaml_output_and_the_container_driver_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    fake = fake_driver_root.build(tmp_path, layout="rhel")
    code, out, _ = _run(
        capsys,
        f"--driver-root={fake.root}",
        f"--dev-root={fake.dev}",
        "--container-driver-root=/run/nvidia/driver",
    )
    assert code == 0
    mounts = yaml.safe_load(out)["containerEdits"]["mounts"]
    assert {"hostPath": f"/run/nvidia/driver/usr/lib64/libcuda.so.{VERSION}"}.items() <= next(
        m for m in mounts if m["containerPath"].endswith(f"libcuda.so.{VERSION}")
    ).items()


def test_without_a_hook_the_fallback_is_printed_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", hook=None)
    code, out, err = _run(capsys, f"--driver-root={fake.root}", "--output=json")
    assert code == 0
    assert "warning: no nvidia-cdi-hook" in err
    edits = json.loads(out)["containerEdits"]
    assert "hooks" not in edits
    assert "/usr/lib64/libcuda.so.1" in {m["containerPath"] for m in edits["mounts"]}


def test_a_bad_driver_root_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, f"--driver-root={tmp_path / 'missing'}")
    assert code == 2 and out == ""
    assert f"driver root {tmp_path / 'missing'} does not exist" in err
