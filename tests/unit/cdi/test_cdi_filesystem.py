"""Telling a spec directory in memory from one on a disk, through the mount table."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cdi import CdiSpecDir
from dra_driver.cdi.filesystem import MOUNT_TABLE, filesystem_type, in_memory

TABLE = """\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:22 / /proc rw,relatime - proc proc rw
24 22 0:23 / /run rw,nosuid shared:5 - tmpfs tmpfs rw,size=1024k
25 24 0:24 / /run/user/0 rw,relatime shared:9 - ext4 /dev/vdb rw
26 22 0:25 / /var/lib/with\\040space rw - tmpfs tmpfs rw
27 22 0:26 / /data rw - ext4 /dev/vdc rw
28 22 0:27 / /data rw - tmpfs tmpfs rw
29 22 0:28 / /runtime rw - xfs /dev/vdd rw
"""


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text(TABLE)
    return path


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/run/cdi", "tmpfs"),  # need not exist
        ("/run", "tmpfs"),
        ("/run/user/0/cdi", "ext4"),  # a disk mounted inside the tmpfs
        ("/runtime/cdi", "xfs"),  # "/run" is a prefix of the text, not of the path
        ("/var/lib/with space/cdi", "tmpfs"),  # escaped mount point
        ("/data/cdi", "tmpfs"),  # the later of two mounts on one point hides the first
        ("/etc/cdi", "ext4"),
    ],
)
def test_the_deepest_mount_decides(table: Path, path: str, expected: str) -> None:
    assert filesystem_type(Path(path), table) == expected
    assert in_memory(Path(path), table) == (expected == "tmpfs")


def test_an_unreadable_table_means_not_in_memory(tmp_path: Path) -> None:
    assert filesystem_type(Path("/run/cdi"), tmp_path / "absent") is None
    assert not in_memory(Path("/run/cdi"), tmp_path / "absent")


def test_a_malformed_line_is_skipped(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text("garbage\n24 22 0:23 / /run rw - tmpfs tmpfs rw\n")
    assert filesystem_type(Path("/run/cdi"), table) == "tmpfs"


def test_this_machines_table() -> None:
    assert filesystem_type(Path("/proc/self"), MOUNT_TABLE) == "proc"
    assert not CdiSpecDir(Path("/proc/cdi")).in_memory
    if Path("/dev/shm").is_dir():  # a tmpfs wherever it exists
        assert CdiSpecDir(Path("/dev/shm/cdi")).in_memory
