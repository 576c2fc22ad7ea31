"""Start-up recovery in-process: the plugin is stopped, the node or the API server changes while
it is down, and the next start must put the checkpoint, the GPUs and the CDI directory right.

The crash tests cover the same ground by killing a plugin process at each step; these restart it
cleanly and change things by hand, which is quicker and lets each rule be checked on its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import urllib3
from kubernetes import client

from dra_driver.backends.base import TimeSliceInterval
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.mps_control import PID_FILE
from dra_driver.backends.mig import create_mig_device, destroy_mig_device
from dra_driver.cdi import CdiSpecDir
from dra_driver.checkpoint import Checkpoint, CheckpointStore, ClaimState, decode_checkpoint
from dra_driver.inventory.model import MigPlacement
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from dra_driver.processes import process_alive
from kubeletplugin.daemon import PluginDaemon
from kubeletplugin.prepare.claims import ClaimSource, KubernetesClaimSource
from kubeletplugin.prepare.recovery import recover
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    DRIVER,
    RunningPlugin,
    create_claim,
    create_node,
    delete_claim,
    opaque,
    result,
    running_plugin,
    short_dir,
    stopped_plugin,
)
from tests.support.polling import eventually

NODE = "recovery-node"
GPUS = "H100-SXM5-80GB:2"
KIND = f"{DRIVER}/gpu"
SLICED = {
    "apiVersion": "resource.dra-driver.dev/v1alpha1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
}


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


@pytest.fixture
def root() -> Iterator[Path]:
    with short_dir() as directory:
        yield directory


def plugin(
    server: Server, root: Path, *, leave_daemons: bool = False
) -> contextlib.AbstractAsyncContextManager[RunningPlugin]:
    """The plugin of one node; its fake GPUs keep their state in `root`, across restarts."""
    return running_plugin(
        server, root, NODE, GPUS, fake_state_dir=root / "fake", leave_daemons=leave_daemons
    )


def parts(server: Server, root: Path) -> contextlib.AbstractAsyncContextManager[PluginDaemon]:
    """The same plugin built but not started: a test runs its start-up recovery itself."""
    return stopped_plugin(server, root, NODE, GPUS, fake_state_dir=root / "fake")


def gpus(root: Path) -> FakeBackend:
    """The same fake GPUs as the plugin sees them, for changes made while it is down."""
    return FakeBackend.from_spec(GPUS, NODE, state_dir=root / "fake")


def checkpoint_path(root: Path) -> Path:
    return root / "state" / NODE / "checkpoint.json"


def on_disk(root: Path) -> tuple[CheckpointStore, Checkpoint]:
    """The plugin's checkpoint store under `root`, and what it holds (as the plugin loads it)."""
    store = CheckpointStore(checkpoint_path(root))
    boot_id = decode_checkpoint(checkpoint_path(root).read_bytes(), "checkpoint").boot_id
    return store, store.load(boot_id).checkpoint


def specs(root: Path) -> set[str]:
    return set(CdiSpecDir(root / "cdi" / NODE).claim_specs(KIND))


async def prepare(running: RunningPlugin, *claims: tuple[str, str]) -> None:
    async with DraClient(running.dra_socket) as dra:
        answer = await dra.prepare([ClaimRef("default", uid, name) for name, uid in claims])
    assert {uid: outcome.error for uid, outcome in answer.items()} == {uid: "" for _, uid in claims}


def leave_started(root: Path, of: str, **changes: object) -> None:
    """What a crash between creating a GPU instance and saving it leaves: the record of claim
    `of` started, without the instance; `changes` sets other fields (under another uid, the
    started record is saved beside the one it was copied from)."""
    store, loaded = on_disk(root)
    record = loaded.claims[of]
    fields: dict[str, object] = {"mig_instances": ()} | changes
    started = replace(record, state=ClaimState.PREPARE_STARTED, **fields)  # type: ignore[arg-type]
    store.save(loaded.with_claim(started))


async def test_claims_deleted_while_down_are_unprepared_and_the_rest_put_back(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    kept = create_claim(api, [result("ts", "gpu-0-ts-0", NODE)], [opaque(SLICED)])
    gone = create_claim(api, [result("mig", "gpu-1-mig-1g10gb-0", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, kept, gone)
    assert len(gpus(root).gpu_instances(1)) == 1
    # While the plugin is down: one claim is deleted, someone resets the time-slice setting and
    # a spec appears that no claim owns.
    delete_claim(api, gone[0])
    gpus(root).set_timeslice(0, TimeSliceInterval.DEFAULT)
    cdi = CdiSpecDir(root / "cdi" / NODE)
    orphan = "00000000-0000-4000-8000-000000000000"
    cdi.write_claim_spec(orphan, cdi.read(cdi.claim_specs(KIND)[kept[1]]))
    assert specs(root) == {kept[1], gone[1], orphan}
    async with plugin(server, root) as running:
        assert set(running.daemon.preparer.checkpoint.claims) == {kept[1]}
        assert running.backend.gpu_instances(1) == ()
        assert running.backend.timeslice(0) is TimeSliceInterval.LONG
    assert specs(root) == {kept[1]}
    saved = decode_checkpoint(checkpoint_path(root).read_bytes(), "checkpoint")
    assert set(saved.claims) == {kept[1]}


async def test_a_claim_left_half_prepared_is_rolled_back_even_though_it_exists(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    claim = create_claim(api, [result("mig", "gpu-0-mig-2g20gb-4", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, claim)
    # What a crash before `PrepareCompleted` leaves: the started record, its instance and spec.
    store, loaded = on_disk(root)
    record = loaded.claims[claim[1]]
    store.save(loaded.with_claim(replace(record, state=ClaimState.PREPARE_STARTED)))
    assert len(gpus(root).gpu_instances(0)) == 1
    async with plugin(server, root) as running:
        assert running.daemon.preparer.checkpoint.claims == {}
        assert running.backend.gpu_instances(0) == ()
    assert specs(root) == set()


async def test_a_claim_that_changed_no_gpu_and_lost_its_spec_is_dropped(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    whole, other = (create_claim(api, [result("gpu", f"gpu-{i}", NODE)]) for i in (0, 1))
    async with plugin(server, root) as running:
        await prepare(running, whole, other)
    # An unprepare that deleted the spec and stopped before the removal was saved.
    CdiSpecDir(root / "cdi" / NODE).claim_specs(KIND)[whole[1]].unlink()
    async with plugin(server, root) as running:
        assert set(running.daemon.preparer.checkpoint.claims) == {other[1]}
    assert specs(root) == {other[1]}


async def test_a_corrupt_checkpoint_is_reset_with_a_warning_event(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    path = checkpoint_path(root)
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "checksum": "nope", "data": {}}')
    async with plugin(server, root) as running:
        assert running.daemon.preparer.checkpoint.claims == {}
    (aside,) = path.parent.glob("checkpoint.json.corrupt-*")
    assert "nope" in aside.read_text()
    events = client.CoreV1Api(api).list_namespaced_event("default").items or []
    warnings = [
        e.message
        for e in events
        if e.reason == "CheckpointReset" and e.involved_object.name == NODE
    ]
    assert len(warnings) == 1
    assert "checksum mismatch" in warnings[0] and str(aside) in warnings[0]


async def test_every_record_is_checked_after_one_whose_spec_is_gone(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    claim = create_claim(api, [result("gpu", "gpu-0", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, claim)
    # Records are checked in the file's (sorted) order: one whose spec is gone comes first,
    # then one whose claim no longer exists.
    store, loaded = on_disk(root)
    boot_id = loaded.boot_id
    (record,) = loaded.claims.values()
    CdiSpecDir(root / "cdi" / NODE).claim_specs(KIND)[record.uid].unlink()
    first = replace(record, uid="00000000-0000-4000-8000-000000000001", cdi_spec=None)
    gone = replace(record, uid="ffffffff-ffff-4fff-8fff-ffffffffffff", name="gone", cdi_spec=None)
    store.save(Checkpoint(boot_id=boot_id).with_claim(first).with_claim(gone))
    async with plugin(server, root) as running:
        assert running.daemon.preparer.checkpoint.claims == {}


@pytest.mark.parametrize(
    ("state", "busy"),
    [
        (ClaimState.PREPARE_STARTED, False),
        (ClaimState.PREPARE_STARTED, True),
        (ClaimState.PREPARE_COMPLETED, True),
    ],
    ids=["rolled-back", "rollback-fails", "unprepare-fails"],
)
async def test_a_claim_undone_or_kept_at_start_does_not_stop_the_check_of_the_next(
    server: Server, api: client.ApiClient, root: Path, state: ClaimState, busy: bool
) -> None:
    claim = create_claim(api, [result("mig", "gpu-1-mig-1g10gb-0", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, claim)
    store, loaded = on_disk(root)
    boot_id = loaded.boot_id
    (record,) = loaded.claims.values()
    (instance,) = gpus(root).gpu_instances(1)
    if busy:  # destroying its MIG device fails: the claim is kept for kubelet to retry
        gpus(root).mark_busy(1, instance.gi_id)
    # A record under another UID (its claim is gone, or it was being prepared), sorted before
    # one that must be dropped too.
    first = replace(record, uid="00000000-0000-4000-8000-000000000001", state=state)
    last = replace(record, uid="ffffffff-ffff-4fff-8fff-ffffffffffff", devices=(), mig_instances=())
    store.save(Checkpoint(boot_id=boot_id).with_claim(first).with_claim(last))
    async with plugin(server, root) as running:
        kept = set(running.daemon.preparer.checkpoint.claims)
        assert kept == ({first.uid} if busy else set())
        assert len(running.backend.gpu_instances(1)) == (1 if busy else 0)
        if busy:
            running.backend.clear_busy(1, instance.gi_id)


async def test_a_gpu_instance_made_but_not_recorded_is_found_and_destroyed(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    made, other = (
        create_claim(api, [result("mig", device, NODE)])
        for device in ("gpu-0-mig-2g20gb-4", "gpu-0-mig-1g10gb-0")
    )
    async with plugin(server, root) as running:
        await prepare(running, made, other)
    # What a crash between creating the GPU instance and saving it leaves: a started record
    # without the instance. Recovery looks for it at the claim's placement.
    leave_started(root, made[1])
    # And a MIG device of the same profile that an administrator made, elsewhere on the GPU: no
    # claim owns it, and it is not the claim's either.
    static = create_mig_device(gpus(root), 0, "2g.20gb", MigPlacement(2, 2))
    assert len(gpus(root).gpu_instances(0)) == 3
    async with plugin(server, root) as running:
        assert set(running.daemon.preparer.checkpoint.claims) == {other[1]}
        left = running.backend.gpu_instances(0)
        assert sorted((i.profile, i.placement.start) for i in left) == [
            ("1g.10gb", 0),
            ("2g.20gb", 2),
        ]
        assert static.uuid in {d.uuid for d in running.backend.mig_devices(0)}


@pytest.mark.parametrize("first", ["whole-gpu", "static-mig"])
async def test_an_unrecorded_gpu_instance_is_found_behind_the_claims_other_devices(
    server: Server, api: client.ApiClient, root: Path, first: str
) -> None:
    # The claim's first device makes nothing on a GPU (a whole GPU, or a MIG device an
    # administrator made); its second is an on-demand MIG device, made but not recorded.
    static = None
    device = "gpu-1"
    if first == "static-mig":
        static = create_mig_device(gpus(root), 1, "3g.40gb", MigPlacement(4, 4))
        device = f"gpu-1-mig-{static.gi_id}-{static.ci_id}"
    made = create_claim(
        api, [result("first", device, NODE), result("mig", "gpu-0-mig-2g20gb-4", NODE)]
    )
    async with plugin(server, root) as running:
        await prepare(running, made)
    leave_started(root, made[1])
    async with plugin(server, root) as running:
        assert running.daemon.preparer.checkpoint.claims == {}
        assert running.backend.gpu_instances(0) == ()
        kept = [d.uuid for d in running.backend.mig_devices(1)]
        assert kept == ([] if static is None else [static.uuid])


async def test_a_half_prepared_claim_leaves_alone_what_another_claim_made_at_its_placement(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    # The device was handed to a second claim while the first still held it (an allocation
    # gone stale), and the plugin went down while preparing the second, before it made
    # anything: the MIG device at that placement is the first claim's, and rolling back the
    # second must not destroy it.
    owner = create_claim(api, [result("mig", "gpu-0-mig-2g20gb-4", NODE)])
    late = create_claim(api, [result("mig", "gpu-0-mig-2g20gb-4", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, owner)
        (owned,) = running.backend.mig_devices(0)
    leave_started(root, owner[1], uid=late[1], name=late[0])
    async with plugin(server, root) as running:
        assert set(running.daemon.preparer.checkpoint.claims) == {owner[1]}
        assert [d.uuid for d in running.backend.mig_devices(0)] == [owned.uuid]


@pytest.mark.parametrize("left", ["compute-instance-unrecorded", "already-destroyed"])
async def test_a_gpu_instance_recorded_without_its_compute_instance_is_rolled_back(
    server: Server, api: client.ApiClient, root: Path, left: str
) -> None:
    # A crash after the compute instance was made but before it was saved leaves the GPU
    # instance recorded without it; a second crash, after the next start's rollback destroyed
    # both but before the record went, leaves that record with nothing live behind it.
    made = create_claim(api, [result("mig", "gpu-0-mig-2g20gb-4", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, made)
    _, loaded = on_disk(root)
    (instance,) = loaded.claims[made[1]].mig_instances
    assert instance.ci_id is not None
    if left == "already-destroyed":
        destroy_mig_device(gpus(root), 0, instance.gi_id, instance.ci_id)
    unrecorded = replace(instance, ci_id=None, uuid=None)
    leave_started(root, made[1], mig_instances=(unrecorded,))
    async with plugin(server, root) as running:
        assert running.daemon.preparer.checkpoint.claims == {}
        assert running.backend.gpu_instances(0) == ()


async def test_mps_daemons_at_start_are_started_for_their_claims_and_stopped_for_none(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    # Two shares, each with its GPU's daemon. While the plugin is down, the daemon of one dies,
    # and the other's claim and daemon are lost from the checkpoint (a crash before the first
    # save): the first is started again for its claim, the second serves none and must go.
    consumed = {"compute": "20", "memory": "2Gi"}
    kept, lost = (
        create_claim(
            api, [result("s", f"gpu-{minor}-shared", NODE, share_id="a", consumed=consumed)]
        )
        for minor in (0, 1)
    )
    async with plugin(server, root, leave_daemons=True) as running:
        await prepare(running, kept, lost)
        uuid = [running.backend.gpus[minor].uuid for minor in (0, 1)]
        pid = [running.daemon.mps.running()[u] for u in uuid]
    os.kill(pid[0], signal.SIGKILL)
    await eventually(lambda: not process_alive(pid[0]), "the killed daemon to go")
    store, loaded = on_disk(root)
    store.save(loaded.without_claim(lost[1]).without_mps_daemon(uuid[1]))
    async with plugin(server, root) as running:
        assert not process_alive(pid[1])
        (restarted,) = running.daemon.mps.running().values()
        assert restarted != pid[0] and process_alive(restarted)
        assert running.daemon.mps.running() == {uuid[0]: restarted}
        # Recorded with its GPU, which a report of the daemon's failures names.
        (record,) = running.daemon.preparer.checkpoint.mps_daemons.values()
        assert (record.uuid, record.minor, record.pid) == (uuid[0], 0, restarted)
        async with DraClient(running.dra_socket) as dra:
            assert await dra.unprepare([ClaimRef("default", kept[1], kept[0])]) == {kept[1]: ""}
        assert not process_alive(restarted)


async def test_a_recorded_daemon_no_claim_needs_is_stopped_at_start_without_its_pid_file(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    # The checkpoint records a daemon that no claim names, and the daemon's pid file is gone (a
    # tidy-up of the directory, an administrator): the recorded pid is all that still finds it.
    # Start-up stops it and forgets it, and counts only the daemon a claim needs, which
    # survived the restart and keeps serving its clients (adopted, not started again).
    consumed = {"compute": "20", "memory": "2Gi"}
    kept, dropped = (
        create_claim(
            api, [result("s", f"gpu-{minor}-shared", NODE, share_id="a", consumed=consumed)]
        )
        for minor in (0, 1)
    )
    async with plugin(server, root, leave_daemons=True) as running:
        await prepare(running, kept, dropped)
        uuid = [running.backend.gpus[minor].uuid for minor in (0, 1)]
        pid = [running.daemon.mps.running()[u] for u in uuid]
    try:
        store, loaded = on_disk(root)
        assert set(loaded.mps_daemons) == set(uuid)
        store.save(loaded.without_claim(dropped[1]))
        (root / "state" / NODE / "mps" / uuid[1] / "pipe" / PID_FILE).unlink()
        async with plugin(server, root) as running:
            assert not process_alive(pid[1])
            assert running.daemon.mps.running() == {uuid[0]: pid[0]}
            assert set(running.daemon.preparer.checkpoint.mps_daemons) == {uuid[0]}
            assert running.daemon.metrics.mps_daemons._value.get() == 1
    finally:
        # Without its pid file, a daemon left running is found by nothing else.
        if process_alive(pid[1]):
            os.kill(pid[1], signal.SIGKILL)


async def test_a_recorded_daemon_whose_pid_another_process_has_now_is_left_alone_at_start(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    # The checkpoint records a daemon that no claim needs and that is gone, pid file and all;
    # the kernel has since given its pid to another process. Start-up has nothing to stop, and
    # must not signal that process.
    consumed = {"compute": "20", "memory": "2Gi"}
    share = create_claim(api, [result("s", "gpu-0-shared", NODE, share_id="a", consumed=consumed)])
    async with plugin(server, root) as running:
        await prepare(running, share)
    # The harness stopped the daemon with the plugin.
    store, loaded = on_disk(root)
    (record,) = loaded.mps_daemons.values()
    assert not process_alive(record.pid)
    other = subprocess.Popen(["sleep", "600"])
    try:
        stale = replace(record, pid=other.pid)
        store.save(loaded.without_claim(share[1]).with_mps_daemon(stale))
        async with plugin(server, root) as running:
            assert running.daemon.preparer.checkpoint.mps_daemons == {}
            assert other.poll() is None
    finally:
        other.kill()
        other.wait()


async def test_claims_are_kept_when_the_api_server_cannot_be_reached_during_recovery(
    server: Server,
    api: client.ApiClient,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = create_claim(api, [result("mig", "gpu-1-mig-1g10gb-0", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, gone)
    delete_claim(api, gone[0])

    def unreachable(self: KubernetesClaimSource, namespace: str, name: str) -> None:
        raise urllib3.exceptions.MaxRetryError(None, f"/{namespace}/{name}")  # type: ignore[arg-type]

    # The claim is gone, but the plugin cannot know: it must keep it, not crash at start-up.
    monkeypatch.setattr(KubernetesClaimSource, "get", unreachable)
    async with plugin(server, root) as running:
        assert set(running.daemon.preparer.checkpoint.claims) == {gone[1]}
        assert len(running.backend.gpu_instances(1)) == 1


class FlakyClaims:
    """The API server as recovery reads it, failing for the claims named `failing` only."""

    def __init__(self, claims: ClaimSource, failing: set[str]) -> None:
        self.claims = claims
        self.failing = failing

    def get(self, namespace: str, name: str) -> dict[str, object] | None:
        if name in self.failing:
            raise urllib3.exceptions.MaxRetryError(None, f"/{namespace}/{name}")  # type: ignore[arg-type]
        return self.claims.get(namespace, name)


async def test_recovery_reports_what_it_did_with_each_claim_and_spec(
    server: Server, api: client.ApiClient, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("kept", "gone", "started", "stuck", "stuck-gone")
    made = {
        name: create_claim(api, [result("mig", f"gpu-1-mig-1g10gb-{i}", NODE)])
        for i, name in enumerate(names)
    }
    specless = create_claim(api, [result("gpu", "gpu-0", NODE)])
    async with plugin(server, root) as running:
        await prepare(running, *made.values(), specless)
    uid = {name: claim[1] for name, claim in made.items()}
    # While the plugin is down: two claims are deleted, two were being prepared, the spec of a
    # claim that changed no GPU is gone (an unprepare that stopped half-way), a spec appears that
    # no claim owns, and the MIG devices of two claims are busy, so undoing them fails.
    for name in ("gone", "stuck-gone"):
        delete_claim(api, made[name][0])
    cdi = CdiSpecDir(root / "cdi" / NODE)
    cdi.claim_specs(KIND)[specless[1]].unlink()
    orphan = "00000000-0000-4000-8000-0000000000aa"
    cdi.write_claim_spec(orphan, cdi.read(cdi.claim_specs(KIND)[uid["kept"]]))
    store, loaded = on_disk(root)
    records = dict(loaded.claims)
    for name in ("started", "stuck"):
        records[uid[name]] = replace(records[uid[name]], state=ClaimState.PREPARE_STARTED)
    busy = [records[uid[name]].mig_instances[0].gi_id for name in ("stuck", "stuck-gone")]
    for gi_id in busy:
        gpus(root).mark_busy(1, gi_id)
    # A claim the API server fails to return (a copy of one kept), checked first: the rest are
    # still checked.
    flaky = replace(records[uid["kept"]], uid="00000000-0000-4000-8000-000000000001", name="flaky")
    checkpoint = Checkpoint(boot_id=loaded.boot_id)
    for record in [flaky, *records.values()]:
        checkpoint = checkpoint.with_claim(record)
    store.save(checkpoint)
    async with parts(server, root) as daemon:
        # And a spec that someone else deletes between recovery's listing and its own delete.
        listed = daemon.preparer.cdi_specs
        vanished = "00000000-0000-4000-8000-0000000000bb"
        vanished_path = root / "cdi" / NODE / f"{vanished}.json"
        monkeypatch.setattr(
            daemon.preparer, "cdi_specs", lambda: listed() | {vanished: vanished_path}
        )
        claims = FlakyClaims(daemon.claims, {"flaky"})
        report = await recover(daemon.preparer, daemon.store, claims, daemon.boot_id)
        for gi_id in busy:
            daemon.backend.clear_busy(1, gi_id)
    assert report.rolled_back == [uid["started"]]
    assert sorted(report.unprepared) == sorted([uid["gone"], specless[1]])
    assert sorted(report.kept) == sorted([flaky.uid, uid["kept"], uid["stuck"], uid["stuck-gone"]])
    assert sorted(report.orphan_specs) == [orphan, vanished]
    assert report.problems == []
    saved = decode_checkpoint(checkpoint_path(root).read_bytes(), "checkpoint")
    assert set(saved.claims) == set(report.kept)
    assert specs(root) == {uid["kept"], uid["stuck"], uid["stuck-gone"]}
    left = {i.placement.start for i in gpus(root).gpu_instances(1)}
    assert left == {names.index(name) for name in ("kept", "stuck", "stuck-gone")}


async def test_recovery_reports_and_warns_about_a_reset_checkpoint(
    server: Server, root: Path
) -> None:
    path = checkpoint_path(root)
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "checksum": "nope", "data": {}}')
    warnings: list[str] = []
    async with parts(server, root) as daemon:
        report = await recover(
            daemon.preparer, daemon.store, daemon.claims, daemon.boot_id, warn=warnings.append
        )
    assert len(warnings) == 1 and "checksum mismatch" in warnings[0]
    assert report.problems == warnings
    assert report.rolled_back == report.unprepared == report.kept == report.orphan_specs == []
