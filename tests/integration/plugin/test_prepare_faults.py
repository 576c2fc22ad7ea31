"""Prepare when the GPUs misbehave, and what a MIG device's container is given.

The fake GPUs fail the create the test asks for, as NVML would (insufficient resources); kubelet
must get an error and the node must be left exactly as before the call: no GPU instance, no CDI
spec, no record of the claim on disk. The device-node test lays out a /dev and a /proc as a host
with MIG devices has them, so the claim's CDI spec on disk can be checked node by node.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_driver.backends.mig import create_mig_device, destroy_mig_device
from dra_driver.cdi import CdiSpecDir
from dra_driver.checkpoint import decode_checkpoint
from dra_driver.inventory.model import MigPlacement
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    DRIVER,
    RunningPlugin,
    allocated,
    create_node,
    opaque,
    result,
    running_plugin,
    short_dir,
)

NODE = "node-faults"
KIND = f"{DRIVER}/gpu"


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


def saved_claims(plugin: RunningPlugin) -> set[str]:
    path = plugin.daemon.config.state_dir / "checkpoint.json"
    if not path.exists():
        return set()
    return set(decode_checkpoint(path.read_bytes(), str(path)).claims)


def specs(plugin: RunningPlugin) -> set[str]:
    return set(CdiSpecDir(plugin.daemon.config.cdi_root).claim_specs(KIND))


def instances(plugin: RunningPlugin) -> set[tuple[int, str, int]]:
    return {
        (gi.parent_minor, gi.profile, gi.placement.start)
        for minor in (0, 1)
        for gi in plugin.backend.gpu_instances(minor)
    }


def cannot_save(claim: ClaimRef, state: Path, doing: str = "preparing") -> str:
    """The start of kubelet's answer for a claim whose checkpoint save failed."""
    return (
        f"ResourceClaim default/{claim.name}: internal error while {doing}: "
        f"checkpoint {state / 'checkpoint.json'}: cannot save"
    )


@contextlib.contextmanager
def unusable(state: Path) -> Iterator[None]:
    """The plugin's state directory cannot be written for a while (as after a read-only
    remount): a file stands in its place."""
    aside = state.with_name(state.name + ".aside")
    existed = state.exists()
    state.parent.mkdir(parents=True, exist_ok=True)
    if existed:
        state.rename(aside)
    state.write_text("")
    try:
        yield
    finally:
        state.unlink()
        if existed:
            aside.rename(state)


@pytest.mark.parametrize("compute_instance", [False, True], ids=["gpu-instance", "compute"])
async def test_a_failed_mig_create_rolls_back_the_whole_claim(
    plugin: RunningPlugin, api: client.ApiClient, compute_instance: bool
) -> None:
    # The first MIG device (on GPU 0) is made completely; the second create (on GPU 1) fails.
    claim = allocated(
        api,
        result("a", "gpu-0-mig-1g10gb-0", NODE),
        result("b", "gpu-1-mig-2g20gb-2", NODE),
    )
    plugin.backend.fail_next_creates(1, compute_instance=compute_instance)
    async with DraClient(plugin.dra_socket) as dra:
        failed = (await dra.prepare([claim]))[claim.uid]
        assert "injected fault InsufficientResources" in failed.error
        assert failed.devices == ()
        # Nothing of the attempt is left: not the MIG device made before the failure, not the
        # GPU instance whose compute instance failed, no spec, no record.
        assert instances(plugin) == set()
        assert specs(plugin) == set()
        assert saved_claims(plugin) == set()
        assert plugin.daemon.preparer.dynamic_instances() == frozenset()
        # kubelet retries; the fault is used up and the claim is prepared whole.
        retried = (await dra.prepare([claim]))[claim.uid]
        assert retried.error == ""
        assert instances(plugin) == {(0, "1g.10gb", 0), (1, "2g.20gb", 2)}
        assert (await dra.unprepare([claim])) == {claim.uid: ""}
    assert instances(plugin) == set()


def _host_tree(base: Path, minor: int) -> tuple[Path, Path]:
    """/dev with the GPU nodes and capability nodes, /proc with the capability files of every
    GPU instance id (gi<G>: minor 100+10G) and compute instance (gi<G>/ci<C>: 101+10G+C)."""
    dev, proc = base / "dev", base / "proc"
    (dev / "nvidia-caps").mkdir(parents=True)
    for gpu in (0, 1):
        (dev / f"nvidia{gpu}").write_bytes(b"")
    caps = proc / "driver/nvidia/capabilities" / f"gpu{minor}" / "mig"
    for gi in range(1, 15):
        entries = {f"gi{gi}": 100 + 10 * gi} | {
            f"gi{gi}/ci{ci}": 101 + 10 * gi + ci for ci in range(8)
        }
        for relative, cap in entries.items():
            (caps / relative).mkdir(parents=True, exist_ok=True)
            (caps / relative / "access").write_text(
                f"DeviceFileMinor: {cap}\nDeviceFileMode: 292\n"
            )
            (dev / "nvidia-caps" / f"nvidia-cap{cap}").write_bytes(b"")
    return dev, proc


@pytest.mark.parametrize("made", ["on-demand", "pre-created"])
async def test_a_mig_device_gets_its_capability_nodes_and_a_gpu_its_own_node(
    server: Server, api: client.ApiClient, made: str
) -> None:
    with short_dir() as root:
        dev, proc = _host_tree(root / "host", 0)
        async with running_plugin(
            server, root, NODE, dev_root=dev, proc_root=proc, fake_device_nodes=True
        ) as plugin:
            mig_name = "gpu-0-mig-3g40gb-4"
            if made == "pre-created":
                # Made by an administrator after the plugin started; it gets the same nodes.
                static = create_mig_device(plugin.backend, 0, "3g.40gb", MigPlacement(4, 4))
                mig_name = f"gpu-0-mig-{static.gi_id}-{static.ci_id}"
            claim = allocated(api, result("mig", mig_name, NODE), result("gpu", "gpu-1", NODE))
            async with DraClient(plugin.dra_socket) as dra:
                outcome = (await dra.prepare([claim]))[claim.uid]
                assert outcome.error == ""
                (mig,) = plugin.backend.mig_devices(0)
                directory = CdiSpecDir(plugin.daemon.config.cdi_root)
                spec = directory.read(directory.claim_specs(KIND)[claim.uid])
                nodes = {
                    device.name: [node.path for node in device.edits.device_nodes]
                    for device in spec.devices
                }
                assert nodes == {
                    f"{claim.uid}-{mig_name}": [
                        "/dev/nvidia0",
                        f"/dev/nvidia-caps/nvidia-cap{100 + 10 * mig.gi_id}",
                        f"/dev/nvidia-caps/nvidia-cap{101 + 10 * mig.gi_id + mig.ci_id}",
                    ],
                    f"{claim.uid}-gpu-1": ["/dev/nvidia1"],
                }
                assert (await dra.unprepare([claim])) == {claim.uid: ""}


async def test_a_mig_device_destroyed_by_someone_else_as_it_is_made_fails_the_claim_cleanly(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    claim = allocated(api, result("a", "gpu-0-mig-2g20gb-4", NODE))
    plugin.backend.tear_down_next_mig_devices(0)
    gpu = plugin.backend.gpus[0]
    async with DraClient(plugin.dra_socket) as dra:
        failed = (await dra.prepare([claim]))[claim.uid]
        # The claim's message says which GPU, what was being made and what happened to it.
        assert re.fullmatch(
            rf"ResourceClaim default/{claim.name}: GPU 0 \({gpu.uuid}\): "
            r"create MIG device 2g\.20gb at 4: "
            r"GPU instance \d+ / compute instance \d+ vanished right after creation",
            failed.error,
        ), failed.error
        assert failed.devices == ()
        assert instances(plugin) == set()
        assert specs(plugin) == set()
        assert saved_claims(plugin) == set()
        retried = (await dra.prepare([claim]))[claim.uid]
        assert retried.error == ""
        assert instances(plugin) == {(0, "2g.20gb", 4)}
        assert (await dra.unprepare([claim])) == {claim.uid: ""}


async def test_a_mig_device_an_administrator_destroyed_is_unprepared_without_error(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    claim = allocated(api, result("a", "gpu-1-mig-3g40gb-4", NODE))
    async with DraClient(plugin.dra_socket) as dra:
        assert (await dra.prepare([claim]))[claim.uid].error == ""
        (made,) = plugin.backend.mig_devices(1)
        destroy_mig_device(plugin.backend, 1, made.gi_id, made.ci_id)
        # What unprepare would destroy is gone already: that is done, not a failure.
        assert (await dra.unprepare([claim])) == {claim.uid: ""}
    assert saved_claims(plugin) == set()
    assert specs(plugin) == set()


async def test_unprepare_on_a_lost_gpu_fails_with_the_gpus_error_until_it_is_back(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    sliced = {
        "apiVersion": "resource.dra-driver.dev/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    }
    claim = allocated(api, result("ts", "gpu-0-ts-0", NODE), config=[opaque(sliced)])
    gpu = plugin.backend.gpus[0]
    async with DraClient(plugin.dra_socket) as dra:
        assert (await dra.prepare([claim]))[claim.uid].error == ""
        plugin.backend.inject_unhealthy(0, xid=79)
        # Putting the GPU's time-slice setting back fails: kubelet gets the GPU's own error,
        # named with the claim, and the claim stays prepared for the retry.
        failed = (await dra.unprepare([claim]))[claim.uid]
        assert failed.startswith(
            f"ResourceClaim default/{claim.name}: GPU 0 ({gpu.uuid}): set time-slice interval"
        ), failed
        assert "XID 79" in failed
        assert saved_claims(plugin) == {claim.uid}
        plugin.backend.clear_unhealthy(0)
        assert (await dra.unprepare([claim])) == {claim.uid: ""}
    assert saved_claims(plugin) == set()


async def test_unprepare_that_cannot_save_the_checkpoint_fails_and_is_retried(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    claim = allocated(api, result("a", "gpu-0-mig-1g10gb-0", NODE))
    state = plugin.daemon.config.state_dir
    async with DraClient(plugin.dra_socket) as dra:
        assert (await dra.prepare([claim]))[claim.uid].error == ""
        with unusable(state):
            failed = (await dra.unprepare([claim]))[claim.uid]
        assert failed.startswith(cannot_save(claim, state, "unpreparing")), failed
        assert saved_claims(plugin) == {claim.uid}
        assert (await dra.unprepare([claim])) == {claim.uid: ""}
    assert saved_claims(plugin) == set()
    assert instances(plugin) == set()


async def test_prepare_that_cannot_save_the_checkpoint_fails_and_its_retry_saves_it(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # A whole GPU's first save is the one that completes the claim.
    claim = allocated(api, result("gpu", "gpu-1", NODE))
    state = plugin.daemon.config.state_dir
    async with DraClient(plugin.dra_socket) as dra:
        with unusable(state):
            failed = (await dra.prepare([claim]))[claim.uid]
        assert failed.error.startswith(cannot_save(claim, state)), failed.error
        retried = (await dra.prepare([claim]))[claim.uid]
        assert retried.error == ""
        # Answered only once it is on disk: a restart must find the claim prepared.
        assert saved_claims(plugin) == {claim.uid}
        assert (await dra.unprepare([claim])) == {claim.uid: ""}


async def test_a_mig_claim_whose_started_record_cannot_be_saved_is_prepared_by_the_retry(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # A MIG device changes a GPU, so its claim is saved as started before anything is made.
    # When that save fails, the claim is left started in memory with nothing made yet; kubelet's
    # retry must roll that attempt back and prepare the claim afresh.
    claim = allocated(api, result("a", "gpu-1-mig-2g20gb-2", NODE))
    state = plugin.daemon.config.state_dir
    async with DraClient(plugin.dra_socket) as dra:
        with unusable(state):
            failed = (await dra.prepare([claim]))[claim.uid]
        assert failed.error.startswith(cannot_save(claim, state)), failed.error
        assert instances(plugin) == set()
        assert specs(plugin) == set()
        retried = (await dra.prepare([claim]))[claim.uid]
        assert retried.error == ""
        assert instances(plugin) == {(1, "2g.20gb", 2)}
        assert specs(plugin) == {claim.uid}
        assert saved_claims(plugin) == {claim.uid}
        assert (await dra.unprepare([claim])) == {claim.uid: ""}
    assert instances(plugin) == set()
    assert saved_claims(plugin) == set()


async def test_calls_that_change_nothing_succeed_while_the_checkpoint_cannot_be_saved(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # kubelet asks again for a claim it has prepared, and unprepares again one it has unprepared
    # (after its own restart, say). The checkpoint on disk already says so: nothing is to be
    # written, so a state directory that cannot be written is no reason to fail either call.
    prepared = allocated(api, result("a", "gpu-0-mig-1g10gb-0", NODE))
    unprepared = allocated(api, result("b", "gpu-1-mig-1g10gb-0", NODE))
    state = plugin.daemon.config.state_dir
    async with DraClient(plugin.dra_socket) as dra:
        answers = await dra.prepare([prepared, unprepared])
        assert {uid: outcome.error for uid, outcome in answers.items()} == {
            prepared.uid: "",
            unprepared.uid: "",
        }
        assert (await dra.unprepare([unprepared])) == {unprepared.uid: ""}
        with unusable(state):
            again = (await dra.prepare([prepared]))[prepared.uid]
            assert again == answers[prepared.uid]
            assert (await dra.unprepare([unprepared])) == {unprepared.uid: ""}
        assert saved_claims(plugin) == {prepared.uid}
        assert (await dra.unprepare([prepared])) == {prepared.uid: ""}
    assert instances(plugin) == set()
