"""Per-claim spec files: naming, atomic replacement, idempotent deletion, listing for recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from dra_driver.cdi import CdiDevice, CdiError, CdiSpec, CdiSpecDir, ContainerEdits

KIND = "k8s.gpu.dra-driver.dev/claim"
UID = "7f1b2c3d-aaaa-4bbb-8ccc-0123456789ab"


def _spec(*names: str, kind: str = KIND) -> CdiSpec:
    return CdiSpec(
        kind=kind,
        devices=tuple(
            CdiDevice(name=name, edits=ContainerEdits(env=(f"DEVICE_{index}={name}",)))
            for index, name in enumerate(names)
        ),
    )


def test_claim_spec_path_follows_the_naming_convention(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path)
    assert store.claim_spec_path(KIND, UID) == tmp_path / f"k8s.gpu.dra-driver.dev-claim_{UID}.yaml"
    with pytest.raises(CdiError, match="claim UID"):
        store.claim_spec_path(KIND, "../../etc/passwd")
    with pytest.raises(CdiError, match="CDI kind"):
        store.claim_spec_path("nokind", UID)


def test_write_creates_the_directory_and_round_trips(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path / "run" / "cdi")
    spec = _spec(f"{UID}-gpu-0", f"{UID}-gpu-1")
    path = store.write_claim_spec(UID, spec)
    assert path == store.claim_spec_path(KIND, UID)
    assert store.read(path) == spec
    on_disk = yaml.safe_load(path.read_text())
    # The device names start with a digit, which needs 0.5.0.
    assert on_disk["cdiVersion"] == "0.5.0"
    assert os.listdir(path.parent) == [path.name]
    assert path.stat().st_mode & 0o777 == 0o644


def test_specs_are_world_readable_whatever_the_umask(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path)
    previous = os.umask(0o077)
    try:
        path = store.write_claim_spec(UID, _spec("gpu-0"))
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_removed_directory_is_made_again(tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    store = CdiSpecDir(root)
    store.write_claim_spec(UID, _spec("gpu-0"))
    assert store.delete_claim_spec(KIND, UID) is True
    root.rmdir()
    path = store.write_claim_spec(UID, _spec("gpu-1"))
    assert [device.name for device in store.read(path).devices] == ["gpu-1"]


def test_a_taken_temporary_name_falls_back_to_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("secrets.token_hex", lambda _: "same")
    store = CdiSpecDir(tmp_path)
    path = store.claim_spec_path(KIND, UID)
    squatter = tmp_path / f".{path.name}.same.tmp"
    squatter.write_text("partial")
    store.write_claim_spec(UID, _spec("gpu-0"))
    assert [device.name for device in store.read(path).devices] == ["gpu-0"]
    assert squatter.read_text() == "partial"
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, squatter.name])


def test_rewrite_replaces_content_without_leftovers(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path)
    store.write_claim_spec(UID, _spec("gpu-0"))
    path = store.write_claim_spec(UID, _spec("gpu-1", "gpu-2"))
    assert [device.name for device in store.read(path).devices] == ["gpu-1", "gpu-2"]
    assert os.listdir(tmp_path) == [path.name]


def test_interrupted_write_leaves_old_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CdiSpecDir(tmp_path)
    path = store.write_claim_spec(UID, _spec("gpu-0"))
    before = path.read_bytes()

    def fail(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        store.write_claim_spec(UID, _spec("gpu-1"))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]


def test_invalid_spec_is_not_written(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path)
    with pytest.raises(CdiError):
        store.write_claim_spec(UID, _spec("gpu-"))
    assert os.listdir(tmp_path) == []


def test_delete_is_idempotent(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path)
    path = store.write_claim_spec(UID, _spec("gpu-0"))
    assert store.delete_claim_spec(KIND, UID) is True
    assert not path.exists()
    assert store.delete_claim_spec(KIND, UID) is False


def test_claim_specs_lists_only_this_kinds_claim_files(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path)
    first = store.write_claim_spec(UID, _spec("gpu-0"))
    second = store.write_claim_spec("0123", _spec("gpu-1"))
    store.write_claim_spec(UID, _spec("gpu-0", kind="nvidia.com/gpu"))
    # A kind whose class extends ours, a temporary file, static specs and unrelated files.
    store.write_claim_spec(UID, _spec("gpu-0", kind="k8s.gpu.dra-driver.dev/claim_x"))
    (tmp_path / f".k8s.gpu.dra-driver.dev-claim_{UID}.yaml.abc.tmp").write_text("partial")
    (tmp_path / "k8s.gpu.dra-driver.dev-claim_.yaml").write_text("")
    (tmp_path / "k8s.gpu.dra-driver.dev-claim_abc.json").write_text("{}")
    (tmp_path / "README").write_text("")
    assert store.claim_specs(KIND) == {UID: first, "0123": second}


def test_claim_specs_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert CdiSpecDir(tmp_path / "absent").claim_specs(KIND) == {}


def test_read_reports_bad_files_by_path(tmp_path: Path) -> None:
    store = CdiSpecDir(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    with pytest.raises(CdiError, match=f"{broken}: not valid YAML"):
        store.read(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    with pytest.raises(CdiError, match=f"{scalar}: expected a mapping"):
        store.read(scalar)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"cdiVersion": "0.3.0", "kind": "a/b", "devices": [{"name": "x"}]}')
    with pytest.raises(CdiError, match=rf"{wrong}: devices\[0\]\.containerEdits: is required"):
        store.read(wrong)
    with pytest.raises(FileNotFoundError):
        store.read(tmp_path / "absent.yaml")
