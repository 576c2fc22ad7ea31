"""Discovery on fake driver roots laid out as Ubuntu and RHEL hosts leave them."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path, PurePosixPath

import pytest

from dra_driver.cdi.nvidia import CONTROL_NODES
from dra_driver.driverroot import DriverRootError, discover, discover_device_nodes, driver_edits
from dra_driver.driverroot.ldcache import (
    FLAG_AARCH64_LIB64,
    FLAG_ELF_LIBC6,
    FLAG_X8664_LIB64,
    FLAG_X8664_LIBX32,
    CacheEntry,
    build_ld_cache,
    native_abi,
    read_ld_cache,
)
from dra_driver.driverroot.libraries import BINARIES, LIBRARIES, LIBRARY_DIRS
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
    with pytest.raises(DriverRootError) as caught:
        discover(tmp_path / "file")
    assert str(caught.value) == f"driver root {tmp_path / 'file'} is not a directory"


def test_a_root_without_the_driver_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "usr/lib64").mkdir(parents=True)
    with pytest.raises(DriverRootError) as caught:
        discover(tmp_path)
    message = str(caught.value)
    assert f"driver root {tmp_path} has no libcuda.so or libnvidia-ml.so" in message
    assert str(tmp_path / "usr/lib64") in message
    assert message.endswith("); is the NVIDIA driver installed there?")


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
    with pytest.raises(DriverRootError) as caught:
        discover(fake.root)
    assert str(caught.value) == (
        f"cannot tell the driver version under {fake.root}: /usr/lib64/libcuda.so.1 is not "
        "named libcuda.so.<version>"
    )
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


def _add_to_cache(root: Path, *entries: CacheEntry, first: bool = True) -> None:
    cache = root / "etc/ld.so.cache"
    listed = read_ld_cache(cache)
    cache.write_bytes(build_ld_cache((*entries, *listed) if first else (*listed, *entries)))


def _abi() -> int:
    abi = native_abi()
    assert abi is not None
    return FLAG_ELF_LIBC6 | abi


def test_a_failure_to_read_the_root_names_the_path_and_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", ld_cache=False)
    broken = fake.root / "usr/lib64"
    listdir = os.listdir

    def failing(path: os.PathLike[str] | str = ".") -> list[str]:
        if Path(path) == broken:
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", failing)
    with pytest.raises(DriverRootError) as caught:
        discover(fake.root)
    assert str(caught.value) == (
        f"cannot read the driver under {fake.root}: {broken}: Permission denied"
    )


def test_a_failure_without_a_path_names_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", ld_cache=False)

    def failing(path: os.PathLike[str] | str = ".") -> list[str]:
        raise OSError("the disk went away")

    monkeypatch.setattr(os, "listdir", failing)
    with pytest.raises(DriverRootError) as caught:
        discover(fake.root)
    assert str(caught.value) == (
        f"cannot read the driver under {fake.root}: {fake.root}: the disk went away"
    )


def test_without_a_linker_cache_every_library_directory_is_named_as_searched(
    tmp_path: Path,
) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", ld_cache=False)
    driver = discover(fake.root)
    assert driver.searched == ", ".join(str(fake.root / d) for d in LIBRARY_DIRS)
    assert driver.library("libnvidia-nonesuch.so") is None


def test_on_an_unknown_machine_every_64_bit_copy_counts_but_not_the_32_bit_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_driver_root.build(tmp_path, layout="ubuntu")
    # An x32 copy listed before the real one must be passed over as the i386 one is.
    x32 = fake.root / "usr/libx32"
    x32.mkdir()
    (x32 / f"libnvidia-ml.so.{VERSION}").write_bytes(b"\x7fELF x32")
    os.symlink(f"libnvidia-ml.so.{VERSION}", x32 / "libnvidia-ml.so.1")
    _add_to_cache(
        fake.root,
        CacheEntry(
            "libnvidia-ml.so.1", "/usr/libx32/libnvidia-ml.so.1", FLAG_ELF_LIBC6 | FLAG_X8664_LIBX32
        ),
    )
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    driver = discover(fake.root)
    assert [lib.name for lib in driver.libraries] == list(LIBRARIES)
    for library in driver.libraries:
        assert library.file == fake.library_file(library.name), library.name


def test_a_cache_entry_whose_file_is_gone_is_passed_over(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", leftover=OLD_VERSION)
    shutil.rmtree(fake.root / LEFTOVER_DIR.relative_to("/"))
    driver = discover(fake.root)
    assert driver.version == VERSION
    for library in driver.libraries:
        assert library.file == fake.library_file(library.name), library.name


def test_a_name_for_the_library_in_another_directory_is_no_soname(tmp_path: Path) -> None:
    """A container gets the sonames that sit beside the library's file; a link elsewhere that
    leads to it (a compat directory) is not one of them, whatever it is called."""
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    compat = fake.root / "opt/compat"
    compat.mkdir(parents=True)
    os.symlink(f"/usr/lib64/libcuda.so.{VERSION}", compat / "libcuda.so.7")
    _add_to_cache(fake.root, CacheEntry("libcuda.so.7", "/opt/compat/libcuda.so.7", _abi()))
    cuda = discover(fake.root).library("libcuda.so")
    assert cuda is not None
    assert cuda.file == fake.library_file("libcuda.so")
    assert cuda.sonames == ("libcuda.so.1",)


def test_every_link_beside_a_library_that_leads_to_it_is_a_soname(tmp_path: Path) -> None:
    """The cache lists one name per library; other links next to the file that lead to it are
    sonames too, but not links to another file, plain copies or another library's names."""
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    libs = fake.root / "usr/lib64"
    os.symlink("libcuda.so.1", libs / "libcuda.so.1.1")  # through the soname: still this file
    (libs / "libcuda.so.590.44.01").write_bytes(b"\x7fELF newer")
    os.symlink("libcuda.so.590.44.01", libs / "libcuda.so.2")
    (libs / "libcuda.so.3").write_bytes(b"\x7fELF a copy")
    os.symlink(f"libcuda.so.{VERSION}", libs / "libcudax.so.1")
    cuda = discover(fake.root).library("libcuda.so")
    assert cuda is not None
    assert cuda.sonames == ("libcuda.so.1", "libcuda.so.1.1")


def test_a_program_in_two_directories_is_taken_once_from_the_first(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    local = fake.root / "usr/local/bin"
    local.mkdir(parents=True)
    (local / "nvidia-smi").write_text("#!/bin/sh\n")
    (fake.root / "usr/bin/nvidia-debugdump").rename(local / "nvidia-debugdump")
    binaries = [str(f.path) for f in discover(fake.root).binaries]
    assert binaries == [
        "/usr/bin/nvidia-smi",
        "/usr/local/bin/nvidia-debugdump",
        "/usr/bin/nvidia-persistenced",
        "/usr/bin/nvidia-cuda-mps-control",
        "/usr/bin/nvidia-cuda-mps-server",
    ]


@pytest.mark.parametrize("empty", [True, False], ids=["empty-lib-dir", "no-lib-dir"])
def test_firmware_comes_from_usr_lib_when_lib_has_none(tmp_path: Path, empty: bool) -> None:
    """On a root that is not merged-/usr, `/lib/firmware/nvidia/<version>` may be missing or
    hold no GSP firmware; `/usr/lib/firmware` is looked at next."""
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    (fake.root / "lib").unlink()
    (fake.root / "lib").mkdir()
    if empty:
        (fake.root / f"lib/firmware/nvidia/{VERSION}").mkdir(parents=True)
        (fake.root / f"lib/firmware/nvidia/{VERSION}/README").write_text("")
    firmware = PurePosixPath("/usr/lib/firmware/nvidia") / VERSION
    assert [(f.path, f.source) for f in discover(fake.root).firmware] == [
        (firmware / name, firmware / name) for name in FIRMWARE
    ]


def test_the_hook_program_wins_over_nvidia_ctk_wherever_each_is(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, hook="nvidia-ctk")
    local = fake.root / "usr/local/bin"
    local.mkdir(parents=True)
    (local / "nvidia-cdi-hook").write_text("#!/bin/sh\n")
    hook = discover(fake.root).hook
    assert hook is not None
    assert (hook.path, hook.subcommand) == (PurePosixPath("/usr/local/bin/nvidia-cdi-hook"), False)


def test_device_nodes_are_listed_in_numeric_order(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, gpus=0)
    for name in ("nvidia10", "nvidia2", "nvidia-uvm2", "nvidiafoo"):
        (fake.dev / name).write_bytes(b"")
    for name in ("nvidia-cap10", "nvidia-cap3", "nvidia-cap", "nvidia-cap3a", "nvidia-cap0"):
        (fake.dev / "nvidia-caps" / name).write_bytes(b"")
    nodes = discover_device_nodes(fake.dev, ("nvidiactl", "nvidia-nonesuch"))
    assert nodes.control == ("nvidiactl",)
    assert nodes.gpu_minors == (2, 10)
    assert nodes.capabilities == tuple(
        f"nvidia-caps/{n}"
        for n in (
            "nvidia-cap",
            "nvidia-cap0",
            "nvidia-cap1",
            "nvidia-cap2",
            "nvidia-cap3",
            "nvidia-cap10",
            "nvidia-cap3a",
        )
    )


def test_a_copy_for_another_64_bit_machine_is_passed_over(tmp_path: Path) -> None:
    """A cache may list libraries of another architecture (a multiarch host); only those of
    this machine's ABI are loaded."""
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    native = native_abi()
    foreign = FLAG_AARCH64_LIB64 if native == FLAG_X8664_LIB64 else FLAG_X8664_LIB64
    other = fake.root / "usr/lib/foreign"
    other.mkdir(parents=True)
    (other / f"libcuda.so.{VERSION}").write_bytes(b"\x7fELF foreign")
    os.symlink(f"libcuda.so.{VERSION}", other / "libcuda.so.1")
    _add_to_cache(
        fake.root,
        CacheEntry("libcuda.so.1", "/usr/lib/foreign/libcuda.so.1", FLAG_ELF_LIBC6 | foreign),
    )
    cuda = discover(fake.root).library("libcuda.so")
    assert cuda is not None and cuda.file == fake.library_file("libcuda.so")


def test_the_listed_file_of_the_version_wins_over_an_unlisted_one_beside_a_leftover(
    tmp_path: Path,
) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", leftover=OLD_VERSION)
    leftover = fake.root / LEFTOVER_DIR.relative_to("/")
    (leftover / f"libcuda.so.{VERSION}").write_bytes(b"\x7fELF stray")
    cuda = discover(fake.root, VERSION).library("libcuda.so")
    assert cuda is not None and cuda.file == fake.library_file("libcuda.so")


def test_a_directory_named_like_a_library_is_not_one(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel", ld_cache=False)
    libs = fake.root / "usr/lib64"
    for name in (f"libnvidia-nvvm.so.{VERSION}", "libnvidia-nvvm.so.4"):
        (libs / name).unlink()
    (libs / "libnvidia-nvvm.so.4").mkdir()
    assert discover(fake.root).library("libnvidia-nvvm.so") is None


def test_sockets_of_daemons_that_do_not_run_are_left_out(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    (fake.root / "run/nvidia-fabricmanager/socket").unlink()
    sockets = discover(fake.root).sockets
    assert [str(f.path) for f in sockets] == ["/run/nvidia-persistenced/socket"]
