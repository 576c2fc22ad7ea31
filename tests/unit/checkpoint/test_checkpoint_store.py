"""The checkpoint file: saving atomically, loading across restarts, reboots and damage."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.device_type import DeviceType
from dra_driver.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
    MigInstanceRecord,
    NewerCheckpointError,
    encode_checkpoint,
)

BOOT = "boot-1"


def _claim(uid: str, state: ClaimState = ClaimState.PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="ns",
        name=f"claim-{uid}",
        state=state,
        devices=(
            DeviceRecord(
                ("r",), "node", "gpu-0-mig-1g.10gb-0", ("v/c=x",), device_type=DeviceType.MIG
            ),
        ),
        mig_instances=(MigInstanceRecord(0, "1g.10gb", 7, 0, "MIG-x", 0, 1),),
    )


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "plugin" / "checkpoint.json"


def _saved(path: Path, *uids: str, boot_id: str = BOOT) -> Checkpoint:
    checkpoint = Checkpoint(boot_id=boot_id)
    for uid in uids:
        checkpoint = checkpoint.with_claim(_claim(uid))
    CheckpointStore(path).save(checkpoint)
    return checkpoint


def test_missing_file_gives_an_empty_checkpoint(path: Path) -> None:
    result = CheckpointStore(path).load(BOOT)
    assert result.checkpoint == Checkpoint(boot_id=BOOT)
    assert result.problem is None
    assert result.previous_boot_claims == {}
    assert not path.exists()


def test_save_then_load_in_a_new_store(path: Path) -> None:
    saved = _saved(path, "a", "b")
    result = CheckpointStore(path).load(BOOT)
    assert result.checkpoint == saved
    assert result.problem is None
    assert os.listdir(path.parent) == [path.name]


def test_saving_twice_replaces(path: Path) -> None:
    store = CheckpointStore(path)
    first = Checkpoint(boot_id=BOOT).with_claim(_claim("a", ClaimState.PREPARE_STARTED))
    store.save(first)
    second = first.with_claim(_claim("a")).with_claim(_claim("b"))
    store.save(second)
    assert store.load(BOOT).checkpoint == second
    assert store.load(BOOT).checkpoint.claims["a"].state is ClaimState.PREPARE_COMPLETED


def test_interrupted_save_keeps_the_old_file(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = _saved(path, "a")
    before = path.read_bytes()

    def fail(*_: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: cannot save: Input/output"):
        CheckpointStore(path).save(saved.with_claim(_claim("b")))
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]


def test_many_saves_leave_only_the_checkpoint(path: Path) -> None:
    store = CheckpointStore(path)
    checkpoint = Checkpoint(boot_id=BOOT)
    for uid in ("a", "b", "c"):
        checkpoint = checkpoint.with_claim(_claim(uid))
        store.save(checkpoint)
    store.save(checkpoint.without_claim("a"))
    assert os.listdir(path.parent) == [path.name]
    assert set(CheckpointStore(path).load(BOOT).checkpoint.claims) == {"b", "c"}
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_taken_temporary_name_falls_back_to_a_fresh_one(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two stores that drew the same name (two processes): a file left under that name by one
    # must not stop the other from saving, nor be renamed into place.
    monkeypatch.setattr("secrets.token_hex", lambda _: "same")
    first, second = CheckpointStore(path), CheckpointStore(path)
    first.save(Checkpoint(boot_id=BOOT).with_claim(_claim("a")))
    squatter = path.parent / f".{path.name}.same.tmp"
    squatter.write_text("half-written by someone else")
    second.save(Checkpoint(boot_id=BOOT).with_claim(_claim("b")))
    assert squatter.read_text() == "half-written by someone else"
    assert set(CheckpointStore(path).load(BOOT).checkpoint.claims) == {"b"}
    assert os.listdir(path.parent) == [path.name]  # the load removed the leftover


def test_leftover_temp_files_are_removed_at_load(path: Path) -> None:
    _saved(path, "a")
    leftover = path.parent / f".{path.name}.x1y2.tmp"
    leftover.write_text('{"version":1,')
    unrelated = path.parent / ".other.json.x.tmp"
    unrelated.write_text("")
    assert set(CheckpointStore(path).load(BOOT).checkpoint.claims) == {"a"}
    assert not leftover.exists()
    assert unrelated.exists()


def test_another_boot_voids_the_claims_but_hands_them_back(path: Path) -> None:
    saved = _saved(path, "a", "b", boot_id="old-boot")
    before = path.read_bytes()
    result = CheckpointStore(path).load("new-boot")
    assert result.checkpoint == Checkpoint(boot_id="new-boot")
    assert result.previous_boot_claims == saved.claims
    assert result.previous_boot_id == "old-boot"
    assert result.problem is None
    # Not rewritten: a crash before the caller cleans up must not lose the stale records.
    assert path.read_bytes() == before


def _corrupt_variants(path: Path) -> dict[str, tuple[bytes, str]]:
    good = json.loads(encode_checkpoint(Checkpoint(BOOT).with_claim(_claim("a"))))
    tampered = json.loads(json.dumps(good))
    tampered["data"]["claims"]["a"]["name"] = "edited"
    wrong_shape = {"version": 1, "checksum": "", "data": {"bootId": 1}}
    from dra_driver.checkpoint.codec import canonical_json, checksum

    wrong_shape["checksum"] = checksum(canonical_json(wrong_shape["data"]))
    return {
        "empty": (b"", "not valid JSON"),
        "truncated": (encode_checkpoint(Checkpoint(BOOT)).encode()[:20], "not valid JSON"),
        "binary": (b"\x00\xff\x13garbage", "not valid JSON"),
        "checksum": (json.dumps(tampered).encode(), "checksum mismatch"),
        "shape": (json.dumps(wrong_shape).encode(), "data.bootId: expected a string"),
        "not-object": (b'"text"', "top level is not a JSON object"),
    }


@pytest.mark.parametrize(
    "variant", ["empty", "truncated", "binary", "checksum", "shape", "not-object"]
)
def test_corrupt_files_are_moved_aside_and_reset(path: Path, variant: str) -> None:
    content, fragment = _corrupt_variants(path)[variant]
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    result = CheckpointStore(path).load(BOOT)
    assert result.checkpoint == Checkpoint(boot_id=BOOT)
    assert result.problem is not None
    assert fragment in result.problem
    assert str(path) in result.problem
    aside = result.moved_aside_to
    assert aside is not None
    assert aside.name.startswith(f"{path.name}.corrupt-")
    assert str(aside) in result.problem
    assert aside.read_bytes() == content
    # A fresh, valid checkpoint now sits in its place.
    again = CheckpointStore(path).load(BOOT)
    assert again.problem is None
    assert again.checkpoint == Checkpoint(boot_id=BOOT)


def test_repeated_corruption_keeps_every_moved_aside_copy(path: Path) -> None:
    path.parent.mkdir(parents=True)
    asides = set()
    for content in (b"one", b"two"):
        path.write_bytes(content)
        aside = CheckpointStore(path).load(BOOT).moved_aside_to
        assert aside is not None
        asides.add(aside)
    assert {aside.read_bytes() for aside in asides} == {b"one", b"two"}


def test_newer_version_raises_and_leaves_the_file(path: Path) -> None:
    path.parent.mkdir(parents=True)
    content = b'{"version": 99, "checksum": "x", "data": {"bootId": "b", "claims": {}}}'
    path.write_bytes(content)
    with pytest.raises(NewerCheckpointError, match=str(path)):
        CheckpointStore(path).load(BOOT)
    assert path.read_bytes() == content
    assert os.listdir(path.parent) == [path.name]


def test_unreadable_file_raises(path: Path) -> None:
    path.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: cannot read"):
        CheckpointStore(path).load(BOOT)


def test_a_file_that_cannot_be_moved_aside_is_an_error_naming_both_paths(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage")

    def fail(*_: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "rename", fail)
    with pytest.raises(CheckpointError) as caught:
        CheckpointStore(path).load(BOOT)
    message = str(caught.value)
    assert message.startswith(f"checkpoint {path}: not valid JSON")
    assert f"; moving it aside to {path}.corrupt-" in message
    assert message.endswith(" failed: Read-only file system")
    assert path.read_bytes() == b"garbage"


class _FrozenClock:
    """`datetime` with a `now` that never moves: corruptions within one clock tick."""

    @staticmethod
    def now(tz: object) -> datetime:
        assert tz is UTC
        return datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def test_moved_aside_copies_are_named_by_utc_time_and_numbered_within_one_tick(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dra_driver.checkpoint.store.datetime", _FrozenClock)
    path.parent.mkdir(parents=True)
    names = []
    for content in (b"one", b"two", b"three"):
        path.write_bytes(content)
        aside = CheckpointStore(path).load(BOOT).moved_aside_to
        assert aside is not None and aside.read_bytes() == content
        names.append(aside.name)
    stamp = f"{path.name}.corrupt-20240102T030405.000006Z"
    assert names == [stamp, f"{stamp}-1", f"{stamp}-2"]


def _replaced_from(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records which file each save renames over the checkpoint."""
    sources: list[Path] = []
    replace = os.replace

    def recording(source: str, target: Path) -> None:
        sources.append(Path(source))
        replace(source, target)

    monkeypatch.setattr(os, "replace", recording)
    return sources


def test_saves_write_a_hidden_temporary_file_next_to_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "two" / "levels" / "checkpoint.json"
    sources = _replaced_from(monkeypatch)
    first = CheckpointStore(path)
    first.save(Checkpoint(boot_id=BOOT).with_claim(_claim("a")))
    # Another store on the same file finds that name taken and falls back to a random one.
    monkeypatch.setattr("secrets.token_hex", lambda _: "taken")
    squatter = path.parent / f".{path.name}.taken.tmp"
    squatter.write_text("")
    CheckpointStore(path).save(Checkpoint(boot_id=BOOT).with_claim(_claim("b")))
    fixed, fallback = sources
    assert fixed.parent == fallback.parent == path.parent
    assert re.fullmatch(r"\.checkpoint\.json\.[0-9a-f]{12}\.tmp", fixed.name)
    assert fallback.name.startswith(".checkpoint.json.") and fallback.name.endswith(".tmp")
    assert fallback != squatter
    assert set(CheckpointStore(path).load(BOOT).checkpoint.claims) == {"b"}


def test_a_save_whose_temporary_file_vanished_reports_the_save_error(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(source: str, _: Path) -> None:
        os.unlink(source)
        raise OSError(116, "Stale file handle")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(CheckpointError, match="cannot save: Stale file handle"):
        CheckpointStore(path).save(Checkpoint(boot_id=BOOT))


def test_a_leftover_that_cannot_be_removed_does_not_stop_the_load(path: Path) -> None:
    _saved(path, "a")
    stuck = path.parent / f".{path.name}.x.tmp"
    stuck.mkdir()  # unlink refuses a directory
    assert set(CheckpointStore(path).load(BOOT).checkpoint.claims) == {"a"}
    assert stuck.is_dir()


def test_an_unreadable_file_is_named_with_the_reason(path: Path) -> None:
    path.mkdir(parents=True)
    with pytest.raises(CheckpointError) as caught:
        CheckpointStore(path).load(BOOT)
    assert str(caught.value) == f"checkpoint {path}: cannot read: Is a directory"
