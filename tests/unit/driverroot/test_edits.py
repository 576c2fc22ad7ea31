"""The edits every GPU container gets from a driver root."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import structlog.testing

from dra_driver.cdi import CdiDevice, CdiSpec, ContainerEdits, minimum_version, spec_to_dict
from dra_driver.driverroot import MOUNT_OPTIONS, NO_HOOK_WARNING, discover, driver_edits
from dra_driver.driverroot import edits as edits_module
from dra_driver.driverroot.libraries import LIBRARIES
from tests.support import fake_driver_root
from tests.support.fake_driver_root import VERSION

HOST = PurePosixPath("/run/nvidia/driver")


def _mounts(edits: ContainerEdits) -> dict[str, str]:
    return {m.container_path: m.host_path for m in edits.mounts}


@pytest.mark.parametrize("layout", ["ubuntu", "rhel"])
def test_libraries_firmware_programs_and_sockets_are_read_only_mounts(
    tmp_path: Path, layout: str
) -> None:
    fake = fake_driver_root.build(tmp_path, layout=layout)
    edits = driver_edits(discover(fake.root), host_root=HOST, dev_root=fake.dev)
    mounts = _mounts(edits)
    for name in LIBRARIES:
        file = str(fake.library_file(name))
        assert mounts[file] == f"{HOST}{file}", name
    firmware = f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"
    assert mounts[firmware] == f"{HOST}/usr{firmware}"
    assert mounts["/usr/bin/nvidia-smi"] == f"{HOST}/usr/bin/nvidia-smi"
    assert mounts["/run/nvidia-persistenced/socket"] == f"{HOST}/run/nvidia-persistenced/socket"
    assert all(m.options == MOUNT_OPTIONS and m.type is None for m in edits.mounts)
    assert edits.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    assert [n.path for n in edits.device_nodes] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]


def test_hooks_make_soname_links_and_refresh_the_linker_cache(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    edits = driver_edits(discover(fake.root), host_root=HOST, dev_root=fake.dev)
    symlinks, ldcache = edits.hooks
    hook = f"{HOST}/usr/bin/nvidia-cdi-hook"
    assert (symlinks.hook_name, symlinks.path) == ("createContainer", hook)
    assert symlinks.args[:2] == ("nvidia-cdi-hook", "create-symlinks")
    links = [symlinks.args[i + 1] for i, a in enumerate(symlinks.args) if a == "--link"]
    assert f"libcuda.so.{VERSION}::/usr/lib64/libcuda.so.1" in links
    assert "libcuda.so.1::/usr/lib64/libcuda.so" in links
    assert f"libnvidia-nvvm.so.{VERSION}::/usr/lib64/libnvidia-nvvm.so.4" in links
    assert (ldcache.hook_name, ldcache.path) == ("createContainer", hook)
    assert ldcache.args == ("nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64")
    # With hooks, only the real files are mounted: the links are made in the container.
    assert "/usr/lib64/libcuda.so.1" not in _mounts(edits)


def test_without_a_hook_program_sonames_are_mounted_and_a_warning_given(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", hook=None)
    warnings: list[str] = []
    edits = driver_edits(discover(fake.root), dev_root=fake.dev, warn=warnings.append)
    assert edits.hooks == ()
    assert warnings == [NO_HOOK_WARNING]
    mounts = _mounts(edits)
    real = str(fake.root / f"usr/lib64/libcuda.so.{VERSION}")
    assert mounts["/usr/lib64/libcuda.so.1"] == real
    assert mounts["/usr/lib64/libcuda.so"] == real
    assert mounts["/usr/lib64/libnvidia-ml.so.1"].endswith(f"libnvidia-ml.so.{VERSION}")


def test_the_host_root_defaults_to_the_driver_root(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path)
    edits = driver_edits(discover(fake.root), dev_root=fake.dev)
    assert _mounts(edits)["/usr/bin/nvidia-smi"] == str(fake.root / "usr/bin/nvidia-smi")
    assert edits.hooks[0].path == str(fake.root / "usr/bin/nvidia-cdi-hook")


def test_specs_stay_at_the_lowest_cdi_version(tmp_path: Path) -> None:
    """Mounts carry no type and hooks need no newer version; device nodes under the real /dev
    carry no host path, so a spec of the driver's edits is a 0.3.0 spec."""
    fake = fake_driver_root.build(tmp_path)
    driver = discover(fake.root)
    edits = driver_edits(driver, host_root=PurePosixPath("/"), dev_root=Path("/dev"))
    spec = CdiSpec(
        kind="k8s.gpu.dra-driver.dev/gpu",
        devices=(CdiDevice("claim-gpu-0", ContainerEdits(env=("A=1",))),),
        edits=edits,
    )
    assert minimum_version(spec) == "0.3.0"
    assert spec_to_dict(spec)["containerEdits"]["hooks"][1]["args"][1] == "update-ldcache"
    moved = CdiSpec(spec.kind, spec.devices, driver_edits(driver, dev_root=fake.dev))
    assert minimum_version(moved) == "0.5.0"  # device nodes with a host path


def test_libraries_in_two_directories_refresh_both_in_the_linker_cache(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", ld_cache=False)
    libs = fake.root / "usr/lib64"
    other = fake.root / "usr/lib"
    for name in (f"libnvidia-nvvm.so.{VERSION}", "libnvidia-nvvm.so.4"):
        (libs / name).rename(other / name)
    edits = driver_edits(discover(fake.root), host_root=HOST, dev_root=fake.dev)
    symlinks, ldcache = edits.hooks
    assert ldcache.args == (
        "nvidia-cdi-hook",
        "update-ldcache",
        "--folder",
        "/usr/lib64",
        "--folder",
        "/usr/lib",
    )
    assert f"libnvidia-nvvm.so.{VERSION}::/usr/lib/libnvidia-nvvm.so.4" in symlinks.args


def test_with_nvidia_ctk_the_hooks_are_its_subcommands(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", hook="nvidia-ctk")
    edits = driver_edits(discover(fake.root), host_root=HOST, dev_root=fake.dev)
    symlinks, ldcache = edits.hooks
    assert symlinks.path == ldcache.path == f"{HOST}/usr/bin/nvidia-ctk"
    assert symlinks.args[:3] == ("nvidia-ctk", "hook", "create-symlinks")
    assert ldcache.args == ("nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib64")


def test_without_a_hook_only_libcuda_gets_its_development_name(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", hook=None)
    edits = driver_edits(discover(fake.root), dev_root=fake.dev, warn=lambda _: None)
    paths = [m.container_path for m in edits.mounts]
    assert "/usr/lib64/libcuda.so" in paths
    assert "/usr/lib64/libnvidia-ml.so" not in paths
    # A library whose soname is its file is mounted once.
    assert paths.count(f"/usr/lib64/libnvidia-gpucomp.so.{VERSION}") == 1


def test_the_no_hook_warning_says_what_containers_lose_and_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert NO_HOOK_WARNING.startswith("no nvidia-cdi-hook or nvidia-ctk under the driver root")
    assert "no linker cache update" in NO_HOOK_WARNING
    monkeypatch.setattr(edits_module, "_warned", set())
    fake = fake_driver_root.build(tmp_path, layout="rhel", hook=None)
    driver = discover(fake.root)
    with structlog.testing.capture_logs() as logs:
        driver_edits(driver, dev_root=fake.dev)
        driver_edits(driver, dev_root=fake.dev)
    assert [(e["log_level"], e["event"]) for e in logs] == [("warning", NO_HOOK_WARNING)]
