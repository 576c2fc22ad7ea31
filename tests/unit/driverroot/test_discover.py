"""Discovery on fake driver roots laid out as Ubuntu and RHEL hosts leave them."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from dra_driver.cdi.nvidia import CONTROL_NODES
from dra_driver.driverroot import DriverRootError, discover, discover_device_nodes, driver_edits
from dra_driver.driverroot.libraries import BINARIES, LIBRARIES
from tests.support import fake_driver_root
from tests.support.fake_driver_root import FIRMWARE, LEFTOVER_DIR, OLD_VERSION, VERSION

LAYOUTS = ["ubuntu", "rhel"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ld_cache", [True, False], ids=["ld-cache", "directories"])
def test_every_capability_library_is_found_with_its_sonames(
    tmp_path: Path, layout: str, ld_cache: bool
) -> None:
    fake = fake_driver_root.build(tmp_path, layout=layout, ld_cache=ld_cache)
    driver = discover(fake.root)
    assert driver.version == VERSION
    assert [lib.name for lib in driver.libraries] == list(LIBRARIES)
    for library in driver.libraries:
        assert library.file == fake.library_file(library.name), library.name
        soname = fake.soname(library.name)
        expected = () if soname == library.file.name else (soname,)
        assert library.sonames == expected, library.name
    searched = str(fake.root / "etc/ld.so.cache") if ld_cache else "usr/lib64"
    assert searched in driver.searched


@pytest.mark.parametrize("layout", LAYOUTS)
def test_firmware_programs_sockets_and_hook(tmp_path: Path, layout: str) -> None:
    fake = fake_driver_root.build(tmp_path, layout=layout)
    driver = discover(fake.root)
    firmware = PurePosixPath("/lib/firmware/nvidia") / VERSION
    assert [(f.path, f.source) for f in driver.firmware] == [
        (firmware / name, PurePosixPath("/usr") / firmware.relative_to("/") / name)
        for name in FIRMWARE
    ]
    assert [f.path for f in driver.binaries] == [PurePosixPath("/usr/bin", b) for b in BINARIES]
    assert [str(f.path) for f in driver.sockets] == [
        "/run/nvidia-persistenced/socket",
        "/run/nvidia-fabricmanager/socket",
    ]
    assert driver.hook is not None and driver.hook.path == PurePosixPath("/usr/bin/nvidia-cdi-hook")
    assert driver.hook.argv("update-ldcache") == ("nvidia-cdi-hook", "update-ldcache")


def test_nvidia_ctk_serves_as_hook_when_it_is_the_only_one(tmp_path: Path) -> None:
    driver = discover(fake_driver_root.build(tmp_path, hook="nvidia-ctk").root)
    assert driver.hook is not None and driver.hook.subcommand
    assert driver.hook.argv("update-ldcache") == ("nvidia-ctk", "hook", "update-ldcache")


def test_no_hook_program_is_reported_as_none(tmp_path: Path) -> None:
    assert discover(fake_driver_root.build(tmp_path, hook=None).root).hook is None


def test_32_bit_copies_in_the_cache_are_skipped(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="ubuntu")
    cuda = discover(fake.root).library("libcuda.so")
    assert cuda is not None and "i386" not in str(cuda.file)


def test_optional_libraries_may_be_missing(tmp_path: Path) -> None:
    gone = ("libnvidia-fatbinaryloader.so", "libnvidia-compiler.so", "libnvidia-pkcs11.so")
    driver = discover(fake_driver_root.build(tmp_path, omit=gone).root)
    assert {lib.name for lib in driver.libraries} == set(LIBRARIES) - set(gone)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("leftover_first", [True, False], ids=["old-listed-first", "old-last"])
def test_the_running_drivers_libraries_win_over_an_older_drivers_leftovers(
    tmp_path: Path, layout: str, leftover_first: bool
) -> None:
    """A node upgraded in place may keep an older driver's copies, with soname links to them,
    in its linker cache: the container must get the files of the version NVML reports (as the
    NVIDIA container toolkit does), in whichever order the cache lists the two, or CUDA fails at
    start with a driver/library version mismatch."""
    fake = fake_driver_root.build(
        tmp_path, layout=layout, leftover=OLD_VERSION, leftover_first=leftover_first
    )
    driver = discover(fake.root, VERSION)
    assert [lib.name for lib in driver.libraries] == list(LIBRARIES)
    for library in driver.libraries:
        assert library.file == fake.library_file(library.name), library.name
        soname = fake.soname(library.name)
        assert library.sonames == (() if soname == library.file.name else (soname,)), library.name
    mounted = [m.host_path for m in driver_edits(driver, dev_root=fake.dev).mounts]
    assert str(fake.root) + str(fake.library_file("libcuda.so")) in mounted
    assert not [path for path in mounted if OLD_VERSION in path or str(LEFTOVER_DIR) in path]


@pytest.mark.parametrize("ld_cache", [True, False], ids=["ld-cache", "directories"])
def test_the_running_drivers_file_wins_over_a_soname_link_to_another_version_beside_it(
    tmp_path: Path, ld_cache: bool
) -> None:
    """After an in-place downgrade ldconfig links each soname to the highest version in the
    directory, the newer leftover: the cache then names only `libcuda.so.1`, which leads to the
    wrong file. The file named for the version NVML reports is the one the container needs."""
    fake = fake_driver_root.build(tmp_path, layout="rhel", ld_cache=ld_cache)
    libs = fake.root / "usr/lib64"
    newer = "590.44.01"
    for name in ("libcuda.so", "libnvidia-ml.so"):
        (libs / f"{name}.{newer}").write_bytes(b"\x7fELF newer")
        (libs / fake.soname(name)).unlink()
        os.symlink(f"{name}.{newer}", libs / fake.soname(name))
    driver = discover(fake.root, VERSION)
    for name in ("libcuda.so", "libnvidia-ml.so"):
        library = driver.library(name)
        assert library is not None
        assert library.file == fake.library_file(name)
        # The container still gets the soname, made to lead to the right file.
        assert library.sonames == (fake.soname(name),)


def test_the_nvml_version_picks_the_firmware_directory(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path)
    (fake.root / "usr/lib/firmware/nvidia/999.1").mkdir()
    assert discover(fake.root, "999.1").firmware == ()
    assert discover(fake.root, "999.1").version == "999.1"


def test_absolute_links_are_followed_inside_the_root(tmp_path: Path) -> None:
    """A driver container's root holds links such as lib64 -> /usr/lib64; they mean the root's
    /usr/lib64, never the plugin's own."""
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    cuda = fake.root / "usr/lib64/libcuda.so.1"
    cuda.unlink()
    os.symlink(f"/lib64/libcuda.so.{VERSION}", cuda)
    os.unlink(fake.root / "lib64")
    os.symlink("/usr/lib64", fake.root / "lib64")
    library = discover(fake.root).library("libcuda.so")
    assert library is not None
    assert library.file == PurePosixPath(f"/usr/lib64/libcuda.so.{VERSION}")
    assert library.sonames == ("libcuda.so.1",)


def test_a_missing_driver_root_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DriverRootError, match=f"driver root {tmp_path / 'nope'} does not exist"):
        discover(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(DriverRootError, match="is not a directory"):
        discover(tmp_path / "file")


def test_a_root_without_the_driver_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "usr/lib64").mkdir(parents=True)
    with pytest.raises(DriverRootError) as caught:
        discover(tmp_path)
    message = str(caught.value)
    assert f"driver root {tmp_path} has no libcuda.so or libnvidia-ml.so" in message
    assert str(tmp_path / "usr/lib64") in message


def test_a_cache_without_libcuda_is_an_error(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, omit=["libcuda.so"])
    with pytest.raises(DriverRootError, match=r"has no libcuda\.so \(looked in .*ld\.so\.cache"):
        discover(fake.root)


def test_a_corrupt_linker_cache_is_an_error_naming_it(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path)
    cache = fake.root / "etc/ld.so.cache"
    cache.write_bytes(b"garbage" * 10)
    with pytest.raises(DriverRootError, match=f"linker cache {cache} is not in the"):
        discover(fake.root)


def test_an_unreadable_linker_cache_is_an_error_naming_it(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path)
    cache = fake.root / "etc/ld.so.cache"
    cache.unlink()
    cache.mkdir()
    with pytest.raises(DriverRootError, match=f"cannot read the linker cache {cache}"):
        discover(fake.root)


def test_a_libcuda_without_a_version_needs_one_given(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", ld_cache=False)
    libs = fake.root / "usr/lib64"
    (libs / "libcuda.so.1").unlink()
    (libs / f"libcuda.so.{VERSION}").rename(libs / "libcuda.so.1")
    with pytest.raises(DriverRootError, match="cannot tell the driver version"):
        discover(fake.root)
    assert discover(fake.root, VERSION).version == VERSION


def test_device_nodes_plain_files_and_real_character_devices(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, gpus=3)
    nodes = discover_device_nodes(fake.dev, CONTROL_NODES)
    assert nodes.control == CONTROL_NODES
    assert nodes.gpu_minors == (0, 1, 2)
    assert nodes.capabilities == ("nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2")
    real = tmp_path / "real-dev"
    real.mkdir()
    os.symlink("/dev/null", real / "nvidiactl")  # a character device, as on a host
    os.symlink("/dev/null", real / "nvidia7")
    found = discover_device_nodes(real, CONTROL_NODES)
    assert found.control == ("nvidiactl",) and found.gpu_minors == (7,)
    assert found.capabilities == ()
    assert discover_device_nodes(tmp_path / "none", CONTROL_NODES).gpu_minors == ()
