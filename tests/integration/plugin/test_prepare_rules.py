"""What prepare makes of a claim's allocation, as kubelet and the container see it: devices it
cannot find (and those made after it started), a device held by another claim, configs that
name some requests only, the same shared device twice, and MPS daemons for MIG devices."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from dra_driver.backends.fake.mps_control import read_pid
from dra_driver.backends.mig import create_mig_device
from dra_driver.cdi import CdiSpecDir, container_environment
from dra_driver.checkpoint import decode_checkpoint
from dra_driver.inventory.model import MigPlacement
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef, PreparedDevice, PrepareOutcome
from dra_driver.processes import process_alive
from kubeletplugin.lending.node import refusing
from tests.integration.plugin.harness import (
    DRIVER,
    RunningPlugin,
    admin_namespace,
    allocated,
    create_node,
    opaque,
    result,
)

NODE = "node-rules"
GPU_CONFIG = {"apiVersion": "resource.dra-driver.dev/v1alpha1", "kind": "GpuConfig"}
MIG_CONFIG = {"apiVersion": "resource.dra-driver.dev/v1alpha1", "kind": "MigDeviceConfig"}


def sharing(config: dict[str, str], strategy: str, **settings: Any) -> dict[str, Any]:
    key = "timeSlicingConfig" if strategy == "TimeSlicing" else "mpsConfig"
    return {**config, "sharing": {"strategy": strategy, key: settings}}


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


async def prepare(plugin: RunningPlugin, ref: ClaimRef) -> PrepareOutcome:
    async with DraClient(plugin.dra_socket) as dra:
        return (await dra.prepare([ref]))[ref.uid]


async def unprepare(plugin: RunningPlugin, ref: ClaimRef) -> str:
    async with DraClient(plugin.dra_socket) as dra:
        return (await dra.unprepare([ref]))[ref.uid]


def environment(plugin: RunningPlugin, *devices: PreparedDevice) -> dict[str, str]:
    """What a container given `devices` sees."""
    directory = CdiSpecDir(plugin.daemon.config.cdi_root)
    specs = [directory.read(p) for p in directory.claim_specs(f"{DRIVER}/gpu").values()]
    return container_environment(specs, [i for d in devices for i in d.cdi_device_ids])


def mps_pid(plugin: RunningPlugin, uuid: str) -> int | None:
    pid = read_pid(plugin.daemon.config.state_dir / "mps" / uuid / "pipe")
    return pid if pid is not None and process_alive(pid) else None


async def test_a_device_the_node_does_not_have_is_refused_by_name(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    ref = allocated(api, result("a", "gpu-0", NODE), result("b", "gpu-7", NODE))
    outcome = await prepare(plugin, ref)
    assert outcome.error.startswith(
        f"ResourceClaim default/{ref.name}: status.allocation.devices.results[1].device: "
    ), outcome.error
    assert "gpu-7" in outcome.error
    assert outcome.devices == ()


async def test_a_mig_device_made_after_the_plugin_started_is_found_on_a_second_look(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    assert (await prepare(plugin, allocated(api, result("g", "gpu-0", NODE)))).error == ""
    made = create_mig_device(plugin.backend, 1, "3g.40gb", MigPlacement(4, 4))
    device = f"gpu-1-mig-{made.gi_id}-{made.ci_id}"
    outcome = await prepare(plugin, allocated(api, result("m", device, NODE)))
    assert outcome.error == ""
    assert environment(plugin, *outcome.devices)[
        f"DRA_DEVICE_{device.upper().replace('-', '_')}"
    ] == (made.uuid)


async def test_a_device_held_by_another_claim_is_refused_even_behind_a_shared_one(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    holder = allocated(api, result("g", "gpu-1", NODE))
    assert (await prepare(plugin, holder)).error == ""
    share = result("s", "gpu-0-shared", NODE, share_id="s1", consumed={"compute": "10"})
    late = allocated(api, share, result("g", "gpu-1", NODE))
    outcome = await prepare(plugin, late)
    assert outcome.error == (
        f"ResourceClaim default/{late.name}: status.allocation.devices.results[1].device "
        f"gpu-1 is already prepared for ResourceClaim default/{holder.name} "
        f"(uid {holder.uid}); it can serve one claim at a time"
    )
    # Admin access looks at a device without taking it: it may share a held GPU.
    watcher = allocated(api, result("g", "gpu-1", NODE, admin=True), namespace=admin_namespace(api))
    assert (await prepare(plugin, watcher)).error == ""
    assert plugin.daemon.mps.running() == {}  # and it is given no MPS daemon


async def test_the_same_shared_device_twice_in_a_claim_gets_two_cdi_devices(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    ref = allocated(
        api,
        result("a", "gpu-0-shared", NODE, share_id="s1", consumed={"compute": "20"}),
        result("b", "gpu-0-shared", NODE, share_id="s2", consumed={"compute": "30"}),
    )
    outcome = await prepare(plugin, ref)
    assert outcome.error == ""
    ids = [d.cdi_device_ids for d in outcome.devices]
    assert ids == [
        (f"{DRIVER}/gpu={ref.uid}-gpu-0-shared",),
        (f"{DRIVER}/gpu={ref.uid}-gpu-0-shared-2",),
    ]
    directory = CdiSpecDir(plugin.daemon.config.cdi_root)
    specs = [directory.read(p) for p in directory.claim_specs(f"{DRIVER}/gpu").values()]
    percentages = [
        container_environment(specs, list(i))["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for i in ids
    ]
    assert percentages == ["20", "30"]
    assert await unprepare(plugin, ref) == ""


async def test_a_config_naming_one_request_applies_to_its_device_only(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    config = sharing(GPU_CONFIG, "TimeSlicing", interval="Long")
    ref = allocated(
        api,
        result("a", "gpu-0", NODE),
        result("b", "gpu-1", NODE),
        config=[opaque(config, requests=["a"])],
    )
    outcome = await prepare(plugin, ref)
    assert outcome.error == ""
    env = environment(plugin, *outcome.devices)
    assert env["DRA_DEVICE_GPU_0_SHARING"] == "TimeSlicing:Long"
    assert "DRA_DEVICE_GPU_1_SHARING" not in env
    # Time-slicing goes through no MPS daemon, on a whole GPU or on a time-slice share.
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env
    assert await unprepare(plugin, ref) == ""
    sliced = allocated(api, result("ts", "gpu-0-ts-0", NODE))
    env = environment(plugin, *(await prepare(plugin, sliced)).devices)
    assert env["DRA_DEVICE_GPU_0_TS_0_SHARING"] == "TimeSlicing:Default"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env
    assert plugin.daemon.mps.running() == {}


async def test_a_per_gpu_pinned_memory_limit_is_found_by_uuid_or_by_index(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    by_uuid = {plugin.backend.gpus[0].uuid: "2Gi", "1": "3Gi"}
    config = sharing(
        GPU_CONFIG,
        "MPS",
        defaultPinnedDeviceMemoryLimit="8Gi",
        defaultPerDevicePinnedMemoryLimit=by_uuid,
    )
    for minor, expected in ((0, "0=2048M"), (1, "0=3072M")):
        ref = allocated(api, result("g", f"gpu-{minor}", NODE), config=[opaque(config)])
        outcome = await prepare(plugin, ref)
        assert outcome.error == "", outcome.error
        assert environment(plugin, *outcome.devices)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == expected
        assert await unprepare(plugin, ref) == ""


async def test_a_share_asking_for_more_than_all_compute_is_refused_by_field(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    ref = allocated(
        api, result("s", "gpu-0-shared", NODE, share_id="s1", consumed={"compute": "150"})
    )
    outcome = await prepare(plugin, ref)
    assert outcome.error == (
        f"ResourceClaim default/{ref.name}: status.allocation.devices.results[0]"
        ".consumedCapacity.compute: 150 is not a percentage 1..100"
    )


@pytest.mark.parametrize("made", ["on-demand", "static"])
async def test_mps_on_a_mig_device_runs_one_daemon_for_that_device(
    plugin: RunningPlugin, api: client.ApiClient, made: str
) -> None:
    device = "gpu-1-mig-3g40gb-4"
    if made == "static":
        mig = create_mig_device(plugin.backend, 1, "3g.40gb", MigPlacement(4, 4))
        device = f"gpu-1-mig-{mig.gi_id}-{mig.ci_id}"
    config = sharing(MIG_CONFIG, "MPS", defaultActiveThreadPercentage=50)
    ref = allocated(api, result("m", device, NODE), config=[opaque(config)])
    outcome = await prepare(plugin, ref)
    assert outcome.error == "", outcome.error
    (live,) = plugin.backend.mig_devices(1)
    # The daemon serves the MIG device, known by its own UUID, not its parent GPU.
    assert set(plugin.daemon.mps.running()) == {live.uuid}
    pid = mps_pid(plugin, live.uuid)
    assert pid is not None
    env = environment(plugin, *outcome.devices)
    assert env["CUDA_MPS_PIPE_DIRECTORY"]
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert await unprepare(plugin, ref) == ""
    assert not process_alive(pid)
    assert plugin.daemon.mps.running() == {}


async def test_a_claim_prepared_again_after_its_removal_was_saved_by_another_claim(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # A whole GPU's unprepare drops its record in memory only; the next save (here another
    # claim's MIG device) writes the removal, and the claim then prepares as a new one.
    whole = allocated(api, result("g", "gpu-0", NODE))
    assert (await prepare(plugin, whole)).error == ""
    assert await unprepare(plugin, whole) == ""
    mig = allocated(api, result("m", "gpu-1-mig-1g10gb-0", NODE))
    assert (await prepare(plugin, mig)).error == ""
    again = await prepare(plugin, whole)
    assert again.error == ""
    other = allocated(api, result("g", "gpu-0-ts-1", NODE))
    assert (await prepare(plugin, other)).error == ""
    assert await unprepare(plugin, other) == ""
    for ref in (whole, mig):
        assert await unprepare(plugin, ref) == ""


async def test_a_claim_with_a_share_and_a_whole_gpu_starts_a_daemon_for_the_share_only(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    share = result("s", "gpu-0-shared", NODE, share_id="s1", consumed={"compute": "10"})
    ref = allocated(api, share, result("g", "gpu-1", NODE))
    outcome = await prepare(plugin, ref)
    assert outcome.error == "", outcome.error
    assert set(plugin.daemon.mps.running()) == {plugin.backend.gpus[0].uuid}
    assert plugin.daemon.metrics.prepared_devices._value.get() == 2
    whole = environment(plugin, outcome.devices[1])
    assert "CUDA_MPS_PIPE_DIRECTORY" not in whole
    assert await unprepare(plugin, ref) == ""
    assert plugin.daemon.mps.running() == {}
    assert plugin.daemon.metrics.prepared_devices._value.get() == 0


async def test_configs_that_do_not_fit_their_devices_are_each_named_by_field(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    share = result("s", "gpu-0-shared", NODE, share_id="s1", consumed={"compute": "10"})
    ref = allocated(
        api,
        share,
        result("t", "gpu-1-ts-0", NODE),
        config=[
            opaque(sharing(GPU_CONFIG, "TimeSlicing", interval="Long"), requests=["s"]),
            opaque(sharing(GPU_CONFIG, "MPS", defaultActiveThreadPercentage=50), requests=["t"]),
        ],
    )
    outcome = await prepare(plugin, ref)
    assert outcome.error == (
        f"ResourceClaim default/{ref.name}: invalid opaque config: "
        "status.allocation.devices.config[0].requests: strategy TimeSlicing cannot apply to "
        "shared GPU devices, whose fractional shares are enforced with MPS; use strategy MPS; "
        "status.allocation.devices.config[1].requests: strategy MPS cannot apply to "
        "time-sliced GPU devices; use strategy TimeSlicing"
    )


async def test_an_owner_refusing_to_lend_is_recorded_per_device(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    never = {**GPU_CONFIG, "lending": "Never"}
    ref = allocated(
        api,
        result("a", "gpu-0", NODE),
        result("b", "gpu-1", NODE),
        # Later entries win: the one for all requests is overridden for "a" only.
        config=[opaque({**GPU_CONFIG, "lending": "Allowed"}), opaque(never, requests=["a"])],
    )
    outcome = await prepare(plugin, ref)
    assert outcome.error == "", outcome.error
    # On disk, where the lender's next sample and a restarted plugin read it.
    path = plugin.daemon.config.state_dir / "checkpoint.json"
    record = decode_checkpoint(path.read_bytes(), str(path)).claims[ref.uid]
    lends = [(d.device_name, d.lends) for d in record.devices]
    assert lends == [("gpu-0", False), ("gpu-1", True)]
    assert refusing(plugin.daemon.preparer.checkpoint.claims) == {ref.uid}
    assert await unprepare(plugin, ref) == ""
    assert refusing(plugin.daemon.preparer.checkpoint.claims) == frozenset()


async def test_lending_in_a_borrowers_config_or_a_mig_config_is_refused_by_field(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    borrower = allocated(
        api,
        result("b", "gpu-0-lent", NODE, share_id="b1", consumed={"memory": "1Gi"}),
        config=[opaque({**GPU_CONFIG, "lending": "Never"}, requests=["b"])],
    )
    outcome = await prepare(plugin, borrower)
    assert outcome.error == (
        f"ResourceClaim default/{borrower.name}: invalid opaque config: "
        "status.allocation.devices.config[0].requests: lending Never cannot apply to lent GPU "
        "devices: a borrower holds a share of another owner's GPU and has nothing of its own to "
        "lend or refuse; remove lending, or leave this request out of the entry"
    )
    mig = allocated(
        api,
        result("m", "gpu-1-mig-3g40gb-4", NODE),
        config=[opaque({**MIG_CONFIG, "lending": "Never"})],
    )
    outcome = await prepare(plugin, mig)
    assert outcome.error == (
        f"ResourceClaim default/{mig.name}: invalid opaque config: "
        "status.allocation.devices.config[0].opaque.parameters.lending: lending: MIG devices "
        "cannot be lent (a GPU in MIG mode lends nothing), so lending is not allowed in "
        "MigDeviceConfig; remove it"
    )
    assert plugin.daemon.preparer.checkpoint.claims == {}
