"""Persistence: MIG state outlives backend objects and processes, until a reboot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_driver.backends.base import TimeSliceInterval
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.spec import FakeGpuSpec
from dra_driver.backends.fake.state import (
    FALLBACK_BOOT_ID,
    CorruptStateError,
    read_boot_id,
    state_file_name,
)
from dra_driver.backends.mig import create_mig_device
from dra_driver.inventory.model import MigPlacement

MakeBackend = Callable[..., FakeBackend]
SPEC = "H100-SXM5-80GB:2"
REPO_ROOT = Path(__file__).resolve().parents[3]


def test_two_objects_share_devices(make_backend: MakeBackend, state_dir: Path) -> None:
    first = make_backend(SPEC, state_dir=state_dir)
    second = make_backend(SPEC, state_dir=state_dir)
    device = create_mig_device(first, 1, "2g.20gb", MigPlacement(2, 2))
    assert second.mig_devices(1) == (device,)
    with pytest.raises(Exception, match="overlaps GPU instance 1"):
        second.create_gpu_instance(1, "1g.10gb", MigPlacement(3, 1))
    second.destroy_compute_instance(1, device.gi_id, device.ci_id)
    second.destroy_gpu_instance(1, device.gi_id)
    assert first.gpu_instances(1) == ()


def test_restart_sees_live_devices_and_settings(make_backend: MakeBackend, state_dir: Path) -> None:
    before = make_backend(SPEC, state_dir=state_dir)
    device = create_mig_device(before, 0, "3g.40gb", MigPlacement(0, 4))
    half_made = before.create_gpu_instance(0, "1g.10gb", MigPlacement(5, 1))
    before.set_timeslice(1, TimeSliceInterval.LONG)
    before.close()
    after = make_backend(SPEC, state_dir=state_dir)
    assert after.mig_devices(0) == (device,)
    assert [(g.gi_id, g.ci_ids) for g in after.gpu_instances(0)] == [
        (device.gi_id, (0,)),
        (half_made, ()),
    ]
    assert after.timeslice(1) is TimeSliceInterval.LONG
    # The creation counter persisted too: a new device does not reuse a UUID.
    after.destroy_gpu_instance(0, half_made)
    again = create_mig_device(after, 0, "1g.10gb", MigPlacement(5, 1))
    assert again.uuid != device.uuid


def test_other_process_sees_the_same_devices(make_backend: MakeBackend, state_dir: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dra_driver.backends.fake import FakeBackend\n"
        "from dra_driver.backends.mig import create_mig_device\n"
        "from dra_driver.inventory.model import MigPlacement\n"
        f"b = FakeBackend.from_spec({SPEC!r}, 'node-a', state_dir=Path(sys.argv[1]),"
        " boot_id='boot-1')\n"
        "print(create_mig_device(b, 0, '1g.20gb', MigPlacement(6, 2)).uuid)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, "-c", script, str(state_dir)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    here = make_backend(SPEC, state_dir=state_dir)
    (device,) = here.mig_devices(0)
    assert device.uuid == result.stdout.strip()
    assert device.placement == MigPlacement(6, 2)


def test_new_boot_drops_instances_only(make_backend: MakeBackend, state_dir: Path) -> None:
    before = make_backend(SPEC, state_dir=state_dir, boot_id="boot-1")
    device = create_mig_device(before, 0, "7g.80gb", MigPlacement(0, 8))
    before.set_timeslice(0, TimeSliceInterval.SHORT)
    before.inject_unhealthy(1, xid=48)
    before.fail_next_creates(0, count=1, error="Unknown")
    after = make_backend(SPEC, state_dir=state_dir, boot_id="boot-2")
    assert after.inventory().mig_devices == ()
    assert after.gpu_instances(0) == ()
    assert after.timeslice(0) is TimeSliceInterval.DEFAULT
    # Faults were put there by a test, not by the hardware: they stay.
    assert after.healthy(1) is False
    with pytest.raises(Exception, match="injected fault Unknown"):
        after.create_gpu_instance(0, "7g.80gb", MigPlacement(0, 8))
    fresh = create_mig_device(after, 0, "7g.80gb", MigPlacement(0, 8))
    assert fresh.uuid != device.uuid
    # The old object keeps working against the shared state.
    assert before.mig_devices(0) == (fresh,)


def test_state_is_one_json_file_named_after_node(
    make_backend: MakeBackend, state_dir: Path
) -> None:
    backend = make_backend(SPEC, node_name="worker-7", state_dir=state_dir)
    create_mig_device(backend, 0, "1g.10gb", MigPlacement(0, 1))
    path = state_dir / "worker-7.fake-gpus.json"
    assert backend.state_path == path
    document = json.loads(path.read_text())
    assert document["bootId"] == "boot-1"
    instances = document["gpus"][backend.gpus[0].uuid]["instances"]
    assert [(i["giId"], i["start"], i["size"]) for i in instances] == [(1, 0, 1)]
    # Only the state file and its lock: no temp files left behind by atomic writes.
    assert sorted(p.name for p in state_dir.iterdir()) == [
        ".worker-7.fake-gpus.json.lock",
        "worker-7.fake-gpus.json",
    ]


def test_nodes_sharing_a_directory_do_not_mix(make_backend: MakeBackend, state_dir: Path) -> None:
    a = make_backend(SPEC, node_name="a", state_dir=state_dir)
    b = make_backend(SPEC, node_name="b", state_dir=state_dir)
    a.create_gpu_instance(0, "7g.80gb", MigPlacement(0, 8))
    assert b.gpu_instances(0) == ()


def test_state_file_name_is_one_path_part() -> None:
    assert state_file_name("../evil/node") == ".._evil_node.fake-gpus.json"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not JSON"),
        ("[]", "$: expected an object"),
        ('{"version": 99}', "unsupported version 99"),
        (
            '{"version": 1, "bootId": 5, "nextEventSeq": 0, "events": [], "gpus": {}}',
            "$.bootId: expected a string, got 5",
        ),
        (
            '{"version": 1, "bootId": "b", "nextEventSeq": 0, "events": [], "gpus": {"GPU-x": {}}}',
            "$.gpus.GPU-x: missing",
        ),
        ("", "not JSON"),
    ],
)
def test_corrupt_state_is_an_error_naming_the_file(
    make_backend: MakeBackend, state_dir: Path, content: str, fragment: str
) -> None:
    state_dir.mkdir(parents=True)
    path = state_dir / state_file_name("node-a")
    path.write_text(content)
    with pytest.raises(CorruptStateError) as caught:
        make_backend(SPEC, state_dir=state_dir)
    assert str(path) in str(caught.value)
    assert fragment in str(caught.value)
    assert path.read_text() == content


def test_corruption_after_start_fails_operations(
    make_backend: MakeBackend, state_dir: Path
) -> None:
    backend = make_backend(SPEC, state_dir=state_dir)
    assert backend.state_path is not None
    backend.state_path.write_text("garbage")
    with pytest.raises(CorruptStateError, match="unreadable"):
        backend.inventory()


def test_state_of_removed_gpu_is_ignored_and_kept(
    make_backend: MakeBackend, state_dir: Path
) -> None:
    two = make_backend(SPEC, state_dir=state_dir)
    create_mig_device(two, 1, "7g.80gb", MigPlacement(0, 8))
    one = make_backend("H100-SXM5-80GB:1", state_dir=state_dir)
    assert one.inventory().mig_devices == ()
    again = make_backend(SPEC, state_dir=state_dir)
    assert len(again.mig_devices(1)) == 1


def test_product_swap_under_same_minor_drops_instances(
    make_backend: MakeBackend, state_dir: Path
) -> None:
    h100 = make_backend("H100-SXM5-80GB:1", state_dir=state_dir)
    h100.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    a100 = make_backend("A100-SXM4-40GB:1", state_dir=state_dir)
    assert a100.gpus[0].uuid == h100.gpus[0].uuid
    assert a100.gpu_instances(0) == ()
    assert a100.create_gpu_instance(0, "7g.40gb", MigPlacement(0, 8)) == 1


def test_concurrent_objects_never_lose_updates(state_dir: Path) -> None:
    backends = [
        FakeBackend("node-a", [FakeGpuSpec.of("A100-SXM4-40GB")], state_dir=state_dir, boot_id="b")
        for _ in range(7)
    ]
    start = threading.Barrier(len(backends))
    errors: list[BaseException] = []

    def create(backend: FakeBackend, slot: int) -> None:
        try:
            start.wait()
            create_mig_device(backend, 0, "1g.5gb", MigPlacement(slot, 1))
        except BaseException as error:  # reported below; a thread cannot raise into the test
            errors.append(error)

    threads = [
        threading.Thread(target=create, args=(backend, slot))
        for slot, backend in enumerate(backends)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    devices = backends[0].mig_devices(0)
    assert sorted(d.gi_id for d in devices) == list(range(1, 8))
    assert sorted(d.placement.start for d in devices) == list(range(7))
    assert len({d.uuid for d in devices}) == 7


def test_boot_id_read_from_file_or_fallback(tmp_path: Path) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("1234-abcd\n")
    assert read_boot_id(boot) == "1234-abcd"
    assert read_boot_id(tmp_path / "missing") == FALLBACK_BOOT_ID
    default = FakeBackend("n", [FakeGpuSpec.of("A30-24GB")], state_dir=tmp_path / "s")
    assert default.state_path is not None
    assert json.loads(default.state_path.read_text())["bootId"] == read_boot_id()


def test_memory_state_is_private(make_backend: MakeBackend) -> None:
    first = make_backend(SPEC)
    second = make_backend(SPEC)
    assert first.state_path is None
    first.create_gpu_instance(0, "7g.80gb", MigPlacement(0, 8))
    assert second.gpu_instances(0) == ()
    assert len(first.gpu_instances(0)) == 1
