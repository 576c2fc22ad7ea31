"""Kubelet's view of the plugin: real sockets, claims allocated in the embedded API server."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from kubernetes import client

from dra_driver.backends.base import TimeSliceInterval
from dra_driver.cdi import CdiSpecDir, container_environment
from dra_driver.checkpoint import decode_checkpoint
from dra_driver.inventory.model import MigPlacement
from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1, PLUGIN_TYPE
from dra_driver.kubeletapi.client import DraClient, RegistrationClient
from dra_driver.kubeletapi.types import ClaimRef
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
    share_uuid,
    short_dir,
)

NODE = "node-a"
VERSIONS = [DRA_V1, DRA_V1BETA1]
GPU_CONFIG = {"apiVersion": "resource.dra-driver.dev/v1alpha1", "kind": "GpuConfig"}


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


def ref(api: client.ApiClient, name: str, uid: str) -> ClaimRef:
    return ClaimRef("default", uid, name)


def environment(plugin: RunningPlugin, cdi_ids: list[str]) -> dict[str, str]:
    directory = CdiSpecDir(plugin.daemon.config.cdi_root)
    specs = [directory.read(p) for p in directory.claim_specs(f"{DRIVER}/gpu").values()]
    return container_environment(specs, cdi_ids)


async def test_registration_offers_both_versions_and_health(plugin: RunningPlugin) -> None:
    async with RegistrationClient(plugin.registration_socket) as reg:
        info = await reg.get_info()
        await reg.notify(True)
    assert info.type == PLUGIN_TYPE
    assert info.name == DRIVER
    assert info.endpoint == str(plugin.dra_socket)
    assert info.supported_versions == (DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1)
    assert plugin.daemon.servers.registered.is_set()


@pytest.mark.parametrize("version", VERSIONS)
async def test_whole_gpu(plugin: RunningPlugin, api: client.ApiClient, version: str) -> None:
    name, uid = create_claim(api, [result("gpu", "gpu-1", NODE)])
    async with DraClient(plugin.dra_socket, version) as dra:
        answer = await dra.prepare([ref(api, name, uid)])
        outcome = answer[uid]
        assert outcome.error == ""
        (device,) = outcome.devices
        assert (device.device_name, device.pool_name, device.request_names) == (
            "gpu-1",
            NODE,
            ("gpu",),
        )
        assert device.cdi_device_ids == (f"{DRIVER}/gpu={uid}-gpu-1",)
        env = environment(plugin, list(device.cdi_device_ids))
        assert env["DRA_DEVICE_GPU_1"] == plugin.backend.gpus[1].uuid
        assert env["DRA_DEVICE_GPU_1_TYPE"] == "gpu"
        again = await dra.prepare([ref(api, name, uid)])
        assert again[uid] == outcome
        assert (await dra.unprepare([ref(api, name, uid)])) == {uid: ""}
    assert plugin.daemon.preparer.checkpoint.claims == {}
    assert CdiSpecDir(plugin.daemon.config.cdi_root).claim_specs(f"{DRIVER}/gpu") == {}


@pytest.mark.parametrize("version", VERSIONS)
async def test_on_demand_mig_is_created_at_the_placement_and_destroyed(
    plugin: RunningPlugin, api: client.ApiClient, version: str
) -> None:
    name, uid = create_claim(api, [result("mig", "gpu-0-mig-2g20gb-4", NODE)])
    backend = plugin.backend
    async with DraClient(plugin.dra_socket, version) as dra:
        outcome = (await dra.prepare([ref(api, name, uid)]))[uid]
        assert outcome.error == ""
        (instance,) = backend.gpu_instances(0)
        assert instance.profile == "2g.20gb"
        assert instance.placement == MigPlacement(4, 2)
        (mig,) = backend.mig_devices(0)
        env = environment(plugin, list(outcome.devices[0].cdi_device_ids))
        assert env["DRA_DEVICE_GPU_0_MIG_2G20GB_4"] == mig.uuid
        # A repeated call answers the same and touches nothing: the same MIG device, not a
        # new one made in its place under a running container.
        assert (await dra.prepare([ref(api, name, uid)]))[uid] == outcome
        assert backend.mig_devices(0) == (mig,)
        assert plugin.daemon.preparer.dynamic_instances() == {(0, instance.gi_id)}
        assert (await dra.unprepare([ref(api, name, uid)]))[uid] == ""
    assert backend.gpu_instances(0) == ()


async def test_mig_in_use_fails_unprepare_until_released(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    name, uid = create_claim(api, [result("mig", "gpu-1-mig-1g10gb-0", NODE)])
    backend = plugin.backend
    async with DraClient(plugin.dra_socket) as dra:
        assert (await dra.prepare([ref(api, name, uid)]))[uid].error == ""
        (instance,) = backend.gpu_instances(1)
        backend.mark_busy(1, instance.gi_id)
        error = (await dra.unprepare([ref(api, name, uid)]))[uid]
        assert "in use" in error.lower() or "busy" in error.lower()
        assert f"default/{name}" in error
        assert len(backend.gpu_instances(1)) == 1
        backend.clear_busy(1, instance.gi_id)
        assert (await dra.unprepare([ref(api, name, uid)]))[uid] == ""
    assert backend.gpu_instances(1) == ()


@pytest.mark.parametrize("version", VERSIONS)
async def test_static_mig_device_is_handed_out_and_kept(
    plugin: RunningPlugin, api: client.ApiClient, version: str
) -> None:
    from dra_driver.backends.mig import create_mig_device

    backend = plugin.backend
    made = create_mig_device(backend, 1, "3g.40gb", MigPlacement(4, 4))
    device = f"gpu-1-mig-{made.gi_id}-{made.ci_id}"
    name, uid = create_claim(api, [result("mig", device, NODE)])
    async with DraClient(plugin.dra_socket, version) as dra:
        outcome = (await dra.prepare([ref(api, name, uid)]))[uid]
        assert outcome.error == ""
        env = environment(plugin, list(outcome.devices[0].cdi_device_ids))
        assert env[f"DRA_DEVICE_GPU_1_MIG_{made.gi_id}_{made.ci_id}"] == made.uuid
        # Recorded as pre-created: a restarted plugin must not take it for a device of the
        # claim's own making (nor keep a record whose spec is gone for the GPU it changed).
        path = plugin.daemon.config.state_dir / "checkpoint.json"
        (saved,) = decode_checkpoint(path.read_bytes(), str(path)).claims[uid].devices
        assert saved.pre_created
        assert (await dra.unprepare([ref(api, name, uid)]))[uid] == ""
    # Pre-created devices belong to the administrator: unprepare leaves them.
    assert [d.uuid for d in backend.mig_devices(1)] == [made.uuid]


@pytest.mark.parametrize("version", VERSIONS)
async def test_timeslice_strictest_interval_wins_and_default_returns(
    plugin: RunningPlugin, api: client.ApiClient, version: str
) -> None:
    def sliced(interval: str) -> dict[str, object]:
        return {
            **GPU_CONFIG,
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
        }

    long_name, long_uid = create_claim(
        api, [result("ts", "gpu-0-ts-0", NODE)], [opaque(sliced("Long"))]
    )
    short_name, short_uid = create_claim(
        api, [result("ts", "gpu-0-ts-1", NODE)], [opaque(sliced("Short"))]
    )
    backend = plugin.backend
    async with DraClient(plugin.dra_socket, version) as dra:
        first = (await dra.prepare([ref(api, long_name, long_uid)]))[long_uid]
        assert first.error == ""
        assert backend.timeslice(0) is TimeSliceInterval.LONG
        assert (await dra.prepare([ref(api, short_name, short_uid)]))[short_uid].error == ""
        assert backend.timeslice(0) is TimeSliceInterval.SHORT
        env = environment(plugin, list(first.devices[0].cdi_device_ids))
        assert env["DRA_DEVICE_GPU_0_TS_0_SHARING"] == "TimeSlicing:Long"
        await dra.unprepare([ref(api, short_name, short_uid)])
        assert backend.timeslice(0) is TimeSliceInterval.LONG
        await dra.unprepare([ref(api, long_name, long_uid)])
        assert backend.timeslice(0) is TimeSliceInterval.DEFAULT


@pytest.mark.parametrize("version", VERSIONS)
async def test_fractional_share_gets_mps_limits_from_consumed_capacity(
    plugin: RunningPlugin, api: client.ApiClient, version: str
) -> None:
    shared = [
        result(
            "s", "gpu-0-shared", NODE, share_id="a1", consumed={"compute": "25", "memory": "4Gi"}
        )
    ]
    name, uid = create_claim(api, shared)
    other = [
        result(
            "s", "gpu-0-shared", NODE, share_id="b2", consumed={"compute": "10", "memory": "2Gi"}
        )
    ]
    other_name, other_uid = create_claim(api, other)
    async with DraClient(plugin.dra_socket, version) as dra:
        answer = await dra.prepare([ref(api, name, uid), ref(api, other_name, other_uid)])
        assert answer[uid].error == "" and answer[other_uid].error == ""
        device = answer[uid].devices[0]
        assert device.share_id == (share_uuid("a1") if version == DRA_V1 else None)
        env = environment(plugin, list(device.cdi_device_ids))
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
        assert env["DRA_DEVICE_GPU_0_SHARED_TYPE"] == "shared"
        result_map = await dra.unprepare([ref(api, name, uid), ref(api, other_name, other_uid)])
        assert result_map == {uid: "", other_uid: ""}


async def test_claim_without_allocation_is_refused(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    name, uid = create_claim(api, None)
    async with DraClient(plugin.dra_socket) as dra:
        error = (await dra.prepare([ref(api, name, uid)]))[uid].error
    assert f"ResourceClaim default/{name}" in error
    assert "status.allocation" in error


async def test_replaced_claim_is_refused(plugin: RunningPlugin, api: client.ApiClient) -> None:
    name, uid = create_claim(api, [result("gpu", "gpu-0", NODE)])
    delete_claim(api, name)
    _, new_uid = create_claim(api, [result("gpu", "gpu-0", NODE)], name=name)
    async with DraClient(plugin.dra_socket) as dra:
        error = (await dra.prepare([ref(api, name, uid)]))[uid].error
    assert "metadata.uid" in error and new_uid in error


async def test_missing_claim_is_refused_and_unknown_unprepare_succeeds(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    async with DraClient(plugin.dra_socket) as dra:
        missing = ClaimRef("default", "0000-uid", "nowhere")
        error = (await dra.prepare([missing]))["0000-uid"].error
        assert error == "ResourceClaim default/nowhere: not found in the API server"
        assert (await dra.unprepare([missing])) == {"0000-uid": ""}


async def test_bad_opaque_config_names_the_field_and_the_plugin_keeps_serving(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    bad = {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing", "bogus": 1}}
    name, uid = create_claim(api, [result("gpu", "gpu-0", NODE)], [opaque(bad)])
    good_name, good_uid = create_claim(api, [result("gpu", "gpu-1", NODE)])
    async with DraClient(plugin.dra_socket) as dra:
        answer = await dra.prepare([ref(api, name, uid), ref(api, good_name, good_uid)])
        assert "config[0].opaque.parameters.sharing.bogus" in answer[uid].error
        assert f"ResourceClaim default/{name}" in answer[uid].error
        assert answer[good_uid].error == ""
        await dra.unprepare([ref(api, good_name, good_uid)])
    assert uid not in plugin.daemon.preparer.checkpoint.claims


async def test_device_held_by_another_claim_is_refused(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    first_name, first_uid = create_claim(api, [result("gpu", "gpu-1", NODE)])
    name, uid = create_claim(api, [result("gpu", "gpu-1", NODE)])
    async with DraClient(plugin.dra_socket) as dra:
        assert (await dra.prepare([ref(api, first_name, first_uid)]))[first_uid].error == ""
        error = (await dra.prepare([ref(api, name, uid)]))[uid].error
        assert "gpu-1" in error and f"default/{first_name}" in error
        await dra.unprepare([ref(api, first_name, first_uid)])


async def test_two_claims_for_one_gpu_in_one_call_get_it_once(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # Prepared concurrently: one gets the GPU, and only its record and spec exist.
    first = ref(api, *create_claim(api, [result("gpu", "gpu-0", NODE)]))
    second = ref(api, *create_claim(api, [result("gpu", "gpu-0", NODE)]))
    async with DraClient(plugin.dra_socket) as dra:
        answer = await dra.prepare([first, second])
        errors = sorted(answer[c.uid].error for c in (first, second))
        assert errors[0] == "" and "gpu-0" in errors[1] and "already prepared" in errors[1]
        winner = first if answer[first.uid].error == "" else second
        assert set(plugin.daemon.preparer.checkpoint.claims) == {winner.uid}
        assert set(CdiSpecDir(plugin.daemon.config.cdi_root).claim_specs(f"{DRIVER}/gpu")) == {
            winner.uid
        }
        assert (await dra.unprepare([first, second])) == {first.uid: "", second.uid: ""}


async def test_specs_in_a_memory_directory(server: Server, api: client.ApiClient) -> None:
    # /var/run/cdi is a tmpfs on a node, so specs are written on the event loop there; the other
    # tests keep them on a disk, where a worker thread writes them.
    memory = Path("/dev/shm")
    if not memory.is_dir() or not CdiSpecDir(memory).in_memory:
        pytest.skip("no tmpfs at /dev/shm")
    gpu = ref(api, *create_claim(api, [result("gpu", "gpu-1", NODE)]))
    consumed = {"compute": "20", "memory": "2Gi"}
    share = ref(
        api,
        *create_claim(api, [result("s", "gpu-0-shared", NODE, share_id="m", consumed=consumed)]),
    )
    with short_dir() as root, tempfile.TemporaryDirectory(dir=memory) as cdi:
        async with running_plugin(server, root, NODE, cdi_root=Path(cdi)) as running:
            assert running.daemon.preparer.cdi_in_memory
            async with DraClient(running.dra_socket) as dra:
                answer = await dra.prepare([gpu, share])
                assert answer[gpu.uid].error == "" and answer[share.uid].error == ""
                ids = [i for c in (gpu, share) for i in answer[c.uid].devices[0].cdi_device_ids]
                env = environment(running, ids)
                assert env["DRA_DEVICE_GPU_1"] == running.backend.gpus[1].uuid
                assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
                assert (await dra.unprepare([gpu, share])) == {gpu.uid: "", share.uid: ""}
            assert os.listdir(cdi) == []


async def test_claim_allocated_to_another_node_is_refused(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    name, uid = create_claim(api, [result("gpu", "gpu-0", "node-z")])
    async with DraClient(plugin.dra_socket) as dra:
        error = (await dra.prepare([ref(api, name, uid)]))[uid].error
    assert "results[0].pool" in error and "node-z" in error


async def test_results_of_other_drivers_are_left_alone(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    results = [
        result("nic", "eth0", NODE, driver="net.example.com"),
        result("gpu", "gpu-0", NODE),
    ]
    name, uid = create_claim(api, results)
    async with DraClient(plugin.dra_socket) as dra:
        outcome = (await dra.prepare([ref(api, name, uid)]))[uid]
        assert [d.device_name for d in outcome.devices] == ["gpu-0"]
        await dra.unprepare([ref(api, name, uid)])


def test_plugin_dir_fixture_is_short(tmp_path: Path) -> None:
    with short_dir() as root:
        assert len(str(root / "plugins" / NODE / "dra.sock")) < 108


async def test_concurrent_calls_for_one_claim_prepare_it_once(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    import asyncio

    name, uid = create_claim(api, [result("mig", "gpu-1-mig-3g40gb-0", NODE)])
    async with DraClient(plugin.dra_socket) as one, DraClient(plugin.dra_socket) as two:
        first, second = await asyncio.gather(
            one.prepare([ref(api, name, uid)]), two.prepare([ref(api, name, uid)])
        )
        assert first[uid].error == "" and first == second
        assert len(plugin.backend.gpu_instances(1)) == 1
        assert (await one.unprepare([ref(api, name, uid)]))[uid] == ""
    assert plugin.backend.gpu_instances(1) == ()
    assert len(plugin.daemon.preparer._claim_locks) == 0


async def test_mig_devices_made_on_one_gpu_each_get_their_own_uuid_and_are_recorded(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # Every MIG device of a GPU has compute instance 0: only the GPU instance tells them apart.
    name, uid = create_claim(
        api,
        [result("a", "gpu-0-mig-1g10gb-0", NODE), result("b", "gpu-0-mig-1g10gb-1", NODE)],
    )
    backend = plugin.backend
    async with DraClient(plugin.dra_socket) as dra:
        outcome = (await dra.prepare([ref(api, name, uid)]))[uid]
        assert outcome.error == ""
        live = {d.placement.start: d for d in backend.mig_devices(0)}
        assert sorted(live) == [0, 1]
        ids = [i for device in outcome.devices for i in device.cdi_device_ids]
        env = environment(plugin, ids)
        assert env["DRA_DEVICE_GPU_0_MIG_1G10GB_0"] == live[0].uuid
        assert env["DRA_DEVICE_GPU_0_MIG_1G10GB_1"] == live[1].uuid
        # The checkpoint on disk names exactly the instances made, compute instance included.
        path = plugin.daemon.config.state_dir / "checkpoint.json"
        record = decode_checkpoint(path.read_bytes(), str(path)).claims[uid]
        assert {(i.placement_start, i.gi_id, i.ci_id, i.uuid) for i in record.mig_instances} == {
            (d.placement.start, d.gi_id, d.ci_id, d.uuid) for d in live.values()
        }
        specs = CdiSpecDir(plugin.daemon.config.cdi_root).claim_specs(f"{DRIVER}/gpu")
        assert record.cdi_spec == str(specs[uid])
        assert (await dra.unprepare([ref(api, name, uid)]))[uid] == ""
    assert backend.gpu_instances(0) == ()
