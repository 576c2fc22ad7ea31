"""Links inside a driver root are followed as if the root were `/`."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from dra_driver.driverroot.paths import in_root, resolve_in_root


def _tree(root: Path) -> None:
    (root / "usr/lib64").mkdir(parents=True)
    (root / "usr/lib64/libcuda.so.1").write_bytes(b"")


def test_a_plain_path_resolves_to_itself(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert resolve_in_root(tmp_path, "/usr/lib64/libcuda.so.1") == PurePosixPath(
        "/usr/lib64/libcuda.so.1"
    )
    assert resolve_in_root(tmp_path, "/") == PurePosixPath("/")
    assert resolve_in_root(tmp_path, "/usr/lib64/missing") is None
    assert resolve_in_root(tmp_path, "/nothing/here") is None


def test_relative_links_climb_with_dot_dot_but_never_above_the_root(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "opt").mkdir()
    os.symlink("../usr/lib64/libcuda.so.1", tmp_path / "opt/up")
    os.symlink("../../../../usr/lib64", tmp_path / "opt/far")
    os.symlink("./libcuda.so.1", tmp_path / "usr/lib64/here")
    assert resolve_in_root(tmp_path, "/opt/up") == PurePosixPath("/usr/lib64/libcuda.so.1")
    # Climbing past the root stops at it, as `/..` is `/`.
    assert resolve_in_root(tmp_path, "/opt/far/libcuda.so.1") == PurePosixPath(
        "/usr/lib64/libcuda.so.1"
    )
    assert resolve_in_root(tmp_path, "/usr/lib64/here") == PurePosixPath("/usr/lib64/libcuda.so.1")


def test_an_absolute_link_in_the_middle_of_a_path_restarts_at_the_root(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "a/b").mkdir(parents=True)
    os.symlink("/usr", tmp_path / "a/b/c")
    found = resolve_in_root(tmp_path, PurePosixPath("/a/b/c/lib64/libcuda.so.1"))
    assert found == PurePosixPath("/usr/lib64/libcuda.so.1")


def test_a_link_to_nowhere_resolves_to_none(tmp_path: Path) -> None:
    _tree(tmp_path)
    os.symlink("/usr/lib64/libcuda.so.2", tmp_path / "dangling")
    assert resolve_in_root(tmp_path, "/dangling") is None


def test_links_are_followed_forty_deep_as_the_kernel_does_and_no_further(
    tmp_path: Path,
) -> None:
    _tree(tmp_path)
    previous = "/usr/lib64/libcuda.so.1"
    for depth in range(1, 42):
        os.symlink(previous, tmp_path / f"link{depth}")
        previous = f"/link{depth}"
    assert resolve_in_root(tmp_path, "/link40") == PurePosixPath("/usr/lib64/libcuda.so.1")
    assert resolve_in_root(tmp_path, "/link41") is None


def test_a_loop_of_links_resolves_to_none(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    assert resolve_in_root(tmp_path, "/a") is None


def test_in_root_places_a_root_path_under_the_root(tmp_path: Path) -> None:
    assert in_root(tmp_path, PurePosixPath("/usr/lib64")) == tmp_path / "usr/lib64"
    assert in_root(tmp_path, PurePosixPath("/")) == tmp_path
