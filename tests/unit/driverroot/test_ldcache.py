"""The linker cache reader against files in glibc's binary format."""

from __future__ import annotations

import platform
import struct
from pathlib import Path

import pytest

from dra_driver.driverroot import DriverRootError
from dra_driver.driverroot.ldcache import (
    FLAG_ELF_LIBC6,
    FLAG_X8664_LIB64,
    OLD_MAGIC,
    CacheEntry,
    build_ld_cache,
    native_abi,
    parse_ld_cache,
    read_ld_cache,
)

ENTRIES = (
    CacheEntry("libcuda.so.1", "/usr/lib64/libcuda.so.1", FLAG_ELF_LIBC6 | FLAG_X8664_LIB64),
    CacheEntry("libcuda.so.1", "/usr/lib/libcuda.so.1", FLAG_ELF_LIBC6),
    CacheEntry("libc.so.6", "/usr/lib64/libc.so.6", FLAG_ELF_LIBC6 | FLAG_X8664_LIB64),
)


def test_round_trip_keeps_names_paths_and_flags() -> None:
    data = build_ld_cache(ENTRIES)
    assert data.startswith(b"glibc-ld.so.cache1.1")
    assert parse_ld_cache(data, "cache") == ENTRIES
    assert ENTRIES[0].abi == FLAG_X8664_LIB64 and ENTRIES[1].abi == 0


def test_new_format_behind_the_old_table_is_found() -> None:
    """glibc before 2.32 wrote an old-format table first; the new one follows, 8-aligned."""
    old_count = 3
    old = OLD_MAGIC + b"\0" + struct.pack("<I", old_count) + b"\0" * (12 * old_count)
    padded = old + b"\0" * (-len(old) % 8)
    new = build_ld_cache(ENTRIES)
    assert parse_ld_cache(padded + new, "cache") == ENTRIES


def test_big_endian_cache_is_read() -> None:
    little = build_ld_cache(ENTRIES[:1])
    header = struct.unpack_from("<20sIIB3xI12x", little)
    big = bytearray(struct.pack(">20sIIB3xI12x", header[0], header[1], header[2], 3, header[4]))
    flags, key, value, osv, hwcap = struct.unpack_from("<iIIIQ", little, 48)
    big += struct.pack(">iIIIQ", flags, key, value, osv, hwcap)
    big += little[48 + 24 :]
    assert parse_ld_cache(bytes(big), "cache") == ENTRIES[:1]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "truncated"),
        (b"not a linker cache at all, just text" * 3, "not in the glibc-ld.so.cache1.1 format"),
        (build_ld_cache(ENTRIES)[:60], "truncated"),
    ],
)
def test_corrupt_caches_are_refused_with_the_path(data: bytes, problem: str) -> None:
    with pytest.raises(DriverRootError, match=problem) as caught:
        parse_ld_cache(data, "/root/etc/ld.so.cache")
    assert "/root/etc/ld.so.cache" in str(caught.value)


def test_string_offsets_outside_the_file_are_refused() -> None:
    data = bytearray(build_ld_cache(ENTRIES[:1]))
    struct.pack_into("<I", data, 48 + 4, len(data) + 100)
    with pytest.raises(DriverRootError, match="outside the file"):
        parse_ld_cache(bytes(data), "cache")


def test_an_unreadable_cache_names_its_path(tmp_path: Path) -> None:
    cache = tmp_path / "ld.so.cache"
    cache.mkdir()  # reading a directory fails for root too, unlike a chmod
    with pytest.raises(DriverRootError, match=f"cannot read the linker cache {cache}"):
        read_ld_cache(cache)


def test_native_abi_of_known_machines() -> None:
    assert native_abi("x86_64") == FLAG_X8664_LIB64
    assert native_abi("aarch64") == 0x0A00
    assert native_abi("riscv64") is None


def test_a_cache_without_entries_is_read_as_empty() -> None:
    data = build_ld_cache(())
    assert len(data) == 48
    assert parse_ld_cache(data, "cache") == ()


def test_the_header_counts_entries_and_string_bytes_as_ldconfig_writes_them() -> None:
    data = build_ld_cache(ENTRIES)
    magic, count, strings, endian, extension = struct.unpack_from("<20sIIB3xI12x", data)
    assert (magic, count, endian, extension) == (b"glibc-ld.so.cache1.1", 3, 2, 0)
    assert strings == len(data) - 48 - 3 * 24
    for index, entry in enumerate(ENTRIES):
        flags, _, _, os_version, hwcap = struct.unpack_from("<iIIIQ", data, 48 + 24 * index)
        assert (flags, os_version, hwcap) == (entry.flags, 0, 0)
    assert data.endswith(b"/usr/lib64/libc.so.6\0")


@pytest.mark.parametrize("old_count", [0, 1, 2, 3])
def test_the_new_format_behind_an_old_table_of_any_length_is_found(old_count: int) -> None:
    old = OLD_MAGIC + b"\0" + struct.pack("<I", old_count) + b"\0" * (12 * old_count)
    padded = old + b"\0" * (-len(old) % 8)
    assert parse_ld_cache(padded + build_ld_cache(ENTRIES), "cache") == ENTRIES


def test_a_cut_old_header_and_a_missing_new_header_are_told_apart() -> None:
    old = OLD_MAGIC + b"\0" + struct.pack("<I", 0)
    with pytest.raises(DriverRootError) as caught:
        parse_ld_cache(old[:15], "cache")
    assert str(caught.value) == "linker cache cache is truncated (old-format header)"
    with pytest.raises(DriverRootError) as caught:
        parse_ld_cache(old, "cache")
    assert str(caught.value) == "linker cache cache is truncated (no complete header)"


def test_messages_of_a_cache_in_another_format_or_with_too_many_entries() -> None:
    with pytest.raises(DriverRootError) as caught:
        parse_ld_cache(b"glibc-ld.so.cache1.0" + bytes(40), "/etc/ld.so.cache")
    assert str(caught.value) == (
        "linker cache /etc/ld.so.cache is not in the glibc-ld.so.cache1.1 format "
        "(starts with b'glibc-ld.so.cache1.0')"
    )
    data = build_ld_cache(ENTRIES)
    with pytest.raises(DriverRootError) as caught:
        parse_ld_cache(data[:100], "/etc/ld.so.cache")
    assert str(caught.value) == (
        "linker cache /etc/ld.so.cache is truncated: 3 entries do not fit in 100 bytes"
    )


def test_a_string_without_its_terminator_is_refused() -> None:
    data = build_ld_cache(ENTRIES[:1])
    with pytest.raises(DriverRootError) as caught:
        parse_ld_cache(data[:-1], "cache")
    assert str(caught.value) == "linker cache cache: entry 0 points outside the file"


def test_names_that_are_not_utf8_are_kept_byte_for_byte() -> None:
    data = build_ld_cache([CacheEntry("libcuda.so.1", "/opt/cafX/libcuda.so.1", FLAG_ELF_LIBC6)])
    (parsed,) = parse_ld_cache(data.replace(b"cafX", b"caf\xe9"), "cache")
    assert parsed.path == "/opt/caf\udce9/libcuda.so.1"


def test_an_unreadable_cache_gives_the_reason(tmp_path: Path) -> None:
    cache = tmp_path / "ld.so.cache"
    cache.mkdir()
    with pytest.raises(DriverRootError) as caught:
        read_ld_cache(cache)
    assert str(caught.value) == f"cannot read the linker cache {cache}: Is a directory"


def test_native_abi_of_this_machine_and_of_names_in_capitals() -> None:
    assert native_abi("AMD64") == FLAG_X8664_LIB64
    assert native_abi() == native_abi(platform.machine())
    assert native_abi("") == native_abi(platform.machine())


def test_a_name_outside_the_file_names_the_cache_and_the_entry() -> None:
    data = bytearray(build_ld_cache(ENTRIES[:2]))
    struct.pack_into("<I", data, 48 + 24 + 4, len(data) + 100)  # the second entry's name
    with pytest.raises(DriverRootError) as caught:
        parse_ld_cache(bytes(data), "/root/etc/ld.so.cache")
    assert str(caught.value) == (
        "linker cache /root/etc/ld.so.cache: entry 1 points outside the file"
    )


def test_an_old_table_too_long_for_the_file_leaves_no_new_header() -> None:
    old = OLD_MAGIC + b"\0" + struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(DriverRootError) as caught:
        parse_ld_cache(old + build_ld_cache(ENTRIES), "cache")
    assert str(caught.value) == "linker cache cache is truncated (no complete header)"
