"""MPS through the real plugin over gRPC, with the fake `nvidia-cuda-mps-control`: one control
daemon per GPU with MPS clients, its pipe directory in the container, the limits in the
environment, the daemon gone with the last share, a daemon that dies noticed, daemons an
unprepare stopped before it failed started again by the periodic check (whose rounds some tests
make themselves), and a stuck control tool that holds up no other claim."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_driver.backends.fake import mps_control as fake_mps_control
from dra_driver.backends.fake.mps_control import PID_FILE, read_pid
from dra_driver.cdi import CdiSpecDir, Mount, container_environment
from dra_driver.kubeletapi.client import DraClient, HealthClient
from dra_driver.kubeletapi.types import ClaimRef, DeviceHealthStatus, Health
from dra_driver.processes import process_alive
from kubeletplugin.daemon import PluginDaemon
from kubeletplugin.prepare.recovery import recover
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
    stopped_plugin,
)
from tests.support.polling import eventually

NODE = "mps-node"
GPU_CONFIG = {"apiVersion": "resource.dra-driver.dev/v1alpha1", "kind": "GpuConfig"}
MIG_MPS = {
    "apiVersion": "resource.dra-driver.dev/v1alpha1",
    "kind": "MigDeviceConfig",
    "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
}
DEADLINE_S = 20.0


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


def share(api: client.ApiClient, gpu: int, share_id: str, compute: str, memory: str) -> ClaimRef:
    consumed = {"compute": compute, "memory": memory}
    return allocated(
        api, result("s", f"gpu-{gpu}-shared", NODE, share_id=share_id, consumed=consumed)
    )


async def prepare(plugin: RunningPlugin, ref: ClaimRef) -> list[str]:
    async with DraClient(plugin.dra_socket) as dra:
        outcome = (await dra.prepare([ref]))[ref.uid]
    assert outcome.error == "", outcome.error
    return [i for d in outcome.devices for i in d.cdi_device_ids]


async def unprepare(plugin: RunningPlugin, ref: ClaimRef) -> None:
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([ref]) == {ref.uid: ""}


def container(plugin: RunningPlugin, ids: list[str]) -> tuple[dict[str, str], list[Mount]]:
    """The environment and mounts a CDI-aware runtime gives a container with these devices."""
    directory = CdiSpecDir(plugin.daemon.config.cdi_root)
    specs = [directory.read(p) for p in directory.claim_specs(f"{DRIVER}/gpu").values()]
    wanted = {i.split("=", 1)[1] for i in ids}
    mounts = [
        mount
        for spec in specs
        for device in spec.devices
        if device.name in wanted
        for mount in device.edits.mounts
    ]
    return container_environment(specs, ids), mounts


def pipe_dir_of(plugin: RunningPlugin, ids: list[str]) -> Path:
    """The host directory the container sees as its MPS pipe directory; checked to be a
    mount of exactly the path the environment names."""
    env, mounts = container(plugin, ids)
    (mount,) = [m for m in mounts if m.container_path == env["CUDA_MPS_PIPE_DIRECTORY"]]
    # Writable (clients talk to the daemon through it), and nothing to run or open as a device.
    assert mount.options == ("rw", "nosuid", "nodev", "bind")
    return Path(mount.host_path)


def daemon_pid(pipe_dir: Path) -> int:
    assert stat.S_ISFIFO((pipe_dir / "control").stat().st_mode), "no control pipe"
    pid = read_pid(pipe_dir)
    assert pid is not None and process_alive(pid)
    return pid


def ask(pipe_dir: Path, *commands: str) -> subprocess.CompletedProcess[str]:
    """The fake client, as an administrator on the node would run it."""
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir)}
    return subprocess.run(
        [sys.executable, "-m", "dra_driver.backends.fake.mps_control"],
        input="".join(f"{c}\n" for c in commands),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def test_shares_of_one_gpu_use_one_daemon_that_goes_with_the_last(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    first = share(api, 0, "a", "25", "4Gi")
    second = share(api, 0, "b", "10", "2Gi")
    elsewhere = share(api, 1, "c", "50", "8Gi")
    first_ids = await prepare(plugin, first)
    env, _ = container(plugin, first_ids)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    assert env["DRA_DEVICE_GPU_0_SHARED_SHARING"] == "MPS:threads=25%:pinnedMemory=4096Mi"
    pipe = pipe_dir_of(plugin, first_ids)
    uuid = plugin.backend.gpus[0].uuid
    assert pipe == plugin.daemon.config.state_dir / "mps" / uuid / "pipe"
    pid = daemon_pid(pipe)
    # The daemon serves its GPU only, and answers the control client.
    assert f"CUDA_VISIBLE_DEVICES={uuid}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    answer = ask(pipe, "get_default_active_thread_percentage", "get_server_list")
    assert answer.returncode == 0 and answer.stdout.split() == ["100.0"], answer
    assert (pipe.parent / "log" / "control.log").is_file()
    saved = plugin.daemon.preparer.checkpoint.mps_daemons[uuid]
    assert (saved.pid, saved.pipe_dir, saved.minor) == (pid, str(pipe), 0)

    second_ids = await prepare(plugin, second)
    assert pipe_dir_of(plugin, second_ids) == pipe
    assert daemon_pid(pipe) == pid
    other_ids = await prepare(plugin, elsewhere)
    other_pipe = pipe_dir_of(plugin, other_ids)
    assert other_pipe != pipe and daemon_pid(other_pipe) != pid
    assert set(plugin.daemon.mps.running()) == {uuid, plugin.backend.gpus[1].uuid}
    assert plugin.daemon.metrics.mps_daemons._value.get() == 2

    await unprepare(plugin, first)
    assert daemon_pid(pipe) == pid  # the second share still uses it
    await unprepare(plugin, second)
    assert not process_alive(pid)
    assert not (pipe / "control").exists()
    assert uuid not in plugin.daemon.preparer.checkpoint.mps_daemons
    assert ask(pipe, "get_server_list").returncode != 0
    await unprepare(plugin, elsewhere)
    assert plugin.daemon.mps.running() == {}


async def test_mps_config_on_a_whole_gpu_reaches_the_container(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    config = {
        **GPU_CONFIG,
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 40,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
            },
        },
    }
    ref = allocated(api, result("gpu", "gpu-1", NODE), config=[opaque(config)])
    ids = await prepare(plugin, ref)
    env, _ = container(plugin, ids)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
    assert env["DRA_DEVICE_GPU_1_SHARING"] == "MPS:threads=40%:pinnedMemory=10240Mi"
    (device,) = plugin.daemon.preparer.checkpoint.claims[ref.uid].devices
    limits = (device.mps_thread_percentage, device.mps_pinned_memory_bytes, device.mps_uuid)
    assert limits == (40, 10 << 30, plugin.backend.gpus[1].uuid)
    pipe = pipe_dir_of(plugin, ids)
    pid = daemon_pid(pipe)
    await unprepare(plugin, ref)
    assert not process_alive(pid) and not (pipe / "control").exists()


async def test_whole_gpu_without_mps_gets_no_daemon(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    ref = allocated(api, result("gpu", "gpu-1", NODE))
    ids = await prepare(plugin, ref)
    env, mounts = container(plugin, ids)
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env and mounts == []
    assert plugin.daemon.mps.running() == {}
    await unprepare(plugin, ref)


async def test_killed_daemon_is_restarted_and_one_that_keeps_dying_is_reported(
    server: Server, api: client.ApiClient
) -> None:
    ref = share(api, 0, "k", "20", "2Gi")
    with short_dir() as root:
        async with running_plugin(server, root, NODE, mps_max_failures=2) as plugin:
            ids = await prepare(plugin, ref)
            pipe = pipe_dir_of(plugin, ids)
            uuid = plugin.backend.gpus[0].uuid
            async with HealthClient(plugin.dra_socket) as health:
                stream = health.watch()
                initial = await anext(stream)
                assert {d.health for d in initial if d.device_name == "gpu-0-shared"} == {
                    Health.HEALTHY
                }
                pid = daemon_pid(pipe)
                os.kill(pid, signal.SIGKILL)
                await eventually(lambda: (read_pid(pipe) or pid) != pid, "a restarted daemon")
                restarted = daemon_pid(pipe)
                await eventually(
                    lambda: plugin.daemon.preparer.checkpoint.mps_daemons[uuid].pid == restarted,
                    "the new pid in the checkpoint",
                )
                assert plugin.daemon.mps.unhealthy() == {}

                rounds = plugin.daemon.publish_loop.rounds
                os.kill(restarted, signal.SIGKILL)  # the second failure in the window
                update = await next_matching(
                    stream, lambda u: any(d.health is Health.UNHEALTHY for d in u)
                )
                sick = {d.device_name: d for d in update if d.health is Health.UNHEALTHY}
                assert set(sick) == {"gpu-0-shared"}
                assert "MPS control daemon" in sick["gpu-0-shared"].message
                await asyncio.wait_for(plugin.daemon.publish_loop.wait_rounds(rounds + 1), 10)
                taints = {
                    d["name"]: d.get("taints")
                    for s in _slices(api)
                    for d in s["spec"].get("devices") or []
                }
                (taint,) = taints["gpu-0-shared"]
                assert taint.pop("timeAdded")  # stamped by the API server
                assert taint == {
                    "key": f"{DRIVER}/mps-unhealthy",
                    "value": "daemon-failing",
                    "effect": "NoSchedule",
                }
                assert taints["gpu-0"] is None and taints["gpu-1-shared"] is None
                await eventually(lambda: read_pid(pipe) not in (None, restarted), "another restart")
                assert plugin.daemon.metrics.mps_restarts._value.get() == 2

                # No claim needs the daemon any more: it goes, and so does the report.
                await unprepare(plugin, ref)
                await next_matching(stream, lambda u: all(d.health is Health.HEALTHY for d in u))
                await stream.aclose()
            assert plugin.daemon.mps.running() == {}


async def next_matching(
    stream: AsyncIterator[list[DeviceHealthStatus]],
    predicate: Callable[[list[DeviceHealthStatus]], bool],
) -> list[DeviceHealthStatus]:
    async def read() -> list[DeviceHealthStatus]:
        async for update in stream:
            if predicate(update):
                return update
        raise AssertionError("the health stream ended")

    return await asyncio.wait_for(read(), DEADLINE_S)


def _slices(api: client.ApiClient) -> list[dict[str, object]]:
    listed: dict[str, object] = client.CustomObjectsApi(api).list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices"
    )
    items = listed.get("items") or []
    assert isinstance(items, list)
    return [
        s for s in items if s["spec"].get("nodeName") == NODE or s["spec"]["pool"]["name"] == NODE
    ]


async def test_a_claim_with_shares_of_two_gpus_stops_the_daemon_no_other_claim_needs(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # The daemons are walked in UUID order: the GPU another claim still shares comes first,
    # and the one only this claim used must be stopped all the same.
    kept, freed = sorted((0, 1), key=lambda minor: plugin.backend.gpus[minor].uuid)
    consumed = {"compute": "20", "memory": "2Gi"}
    both = allocated(
        api,
        *(
            result(
                f"s{minor}", f"gpu-{minor}-shared", NODE, share_id=f"m{minor}", consumed=consumed
            )
            for minor in (0, 1)
        ),
    )
    other = share(api, kept, "other", "10", "1Gi")
    for ref in (both, other):
        await prepare(plugin, ref)
    uuid = {minor: plugin.backend.gpus[minor].uuid for minor in (0, 1)}
    pid = {m: daemon_pid(plugin.daemon.config.state_dir / "mps" / uuid[m] / "pipe") for m in uuid}
    await unprepare(plugin, both)
    assert process_alive(pid[kept])
    assert not process_alive(pid[freed])
    assert set(plugin.daemon.preparer.checkpoint.mps_daemons) == {uuid[kept]}
    await unprepare(plugin, other)
    assert not process_alive(pid[kept])


async def test_a_daemon_whose_pid_file_is_gone_is_still_stopped_with_its_last_share(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    # Something cleaned the pipe directory's pid file (a tmpfs tidy-up, an administrator): the
    # pid in the checkpoint is what still finds the daemon, which must not outlive its shares.
    ref = share(api, 0, "a", "25", "4Gi")
    pipe = pipe_dir_of(plugin, await prepare(plugin, ref))
    pid = daemon_pid(pipe)
    (pipe / PID_FILE).unlink()
    await unprepare(plugin, ref)
    assert not process_alive(pid)
    assert plugin.daemon.preparer.checkpoint.mps_daemons == {}


async def test_mps_with_a_thread_limit_only_describes_just_that(
    plugin: RunningPlugin, api: client.ApiClient
) -> None:
    config = {
        **GPU_CONFIG,
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 30}},
    }
    ref = allocated(api, result("gpu", "gpu-0", NODE), config=[opaque(config)])
    env, _ = container(plugin, await prepare(plugin, ref))
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env
    assert env["DRA_DEVICE_GPU_0_SHARING"] == "MPS:threads=30%"
    await unprepare(plugin, ref)


@contextlib.asynccontextmanager
async def started_by_hand(
    server: Server, root: Path, gpus: str = "H100-SXM5-80GB:2", **extra: Any
) -> AsyncIterator[PluginDaemon]:
    """A plugin built and recovered but not run: no loop checks the daemons, so a test makes
    each round of the periodic check itself, as the plugin's loop makes it."""
    async with stopped_plugin(server, root, NODE, gpus, **extra) as daemon:
        await recover(daemon.preparer, daemon.store, daemon.claims, daemon.boot_id)
        yield daemon


async def kill_daemon(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: not process_alive(pid), f"daemon {pid} to die")


async def test_daemons_an_unprepare_stopped_before_failing_are_started_by_one_check(
    server: Server, api: client.ApiClient
) -> None:
    # Unprepare stops a claim's daemons before it destroys the claim's MIG devices; a busy
    # device then fails the unprepare, and the claim, still prepared, needs daemons that are
    # gone and no longer recorded. One round of the check starts every one of them, and reports
    # no change of health, since none failed. The whole GPU beside them needs no daemon.
    claim = allocated(
        api,
        *(result(f"m{minor}", f"gpu-{minor}-mig-3g40gb-4", NODE) for minor in (0, 1)),
        config=[opaque(MIG_MPS)],
    )
    whole = allocated(api, result("gpu", "gpu-2", NODE))
    with short_dir() as root:
        async with started_by_hand(server, root, "H100-SXM5-80GB:3", mps_max_failures=1) as daemon:
            preparer = daemon.preparer
            answers = await preparer.prepare([claim, whole])
            assert {u: a.error for u, a in answers.items()} == {claim.uid: "", whole.uid: ""}
            mig = {minor: daemon.backend.mig_devices(minor)[0] for minor in (0, 1)}
            assert set(daemon.mps.running()) == {mig[0].uuid, mig[1].uuid}
            for minor, device in mig.items():
                daemon.backend.mark_busy(minor, device.gi_id)
            failed = (await preparer.unprepare([claim]))[claim.uid]
            assert failed.endswith("(the device is in use; kubelet retries unprepare)"), failed
            assert daemon.mps.running() == {}
            assert preparer.checkpoint.mps_daemons == {}

            assert await preparer.mps.check() is False
            running = daemon.mps.running()
            assert set(running) == {mig[0].uuid, mig[1].uuid}
            recorded = preparer.checkpoint.mps_daemons
            assert {u: (d.minor, d.pid) for u, d in recorded.items()} == {
                mig[minor].uuid: (minor, running[mig[minor].uuid]) for minor in (0, 1)
            }
            assert await preparer.mps.check() is False
            # One failure is one too many here: the daemon's GPU is reported once, by its minor.
            await kill_daemon(running[mig[1].uuid])
            assert await preparer.mps.check() is True
            assert set(daemon.mps.unhealthy()) == {1}
            assert await preparer.mps.check() is False

            for minor, device in mig.items():
                daemon.backend.clear_busy(minor, device.gi_id)
            assert await preparer.unprepare([claim, whole]) == {claim.uid: "", whole.uid: ""}
            assert daemon.mps.running() == {}
            assert daemon.mps.unhealthy() == {}


async def test_an_unprepare_retried_before_any_check_finishes_without_the_stopped_daemon(
    server: Server, api: client.ApiClient
) -> None:
    # The first unprepare stopped and forgot the claim's daemon, then failed on the busy MIG
    # device. kubelet's retry comes before any check has started the daemon again: there is no
    # daemon to stop, and the retry must finish the job.
    claim = allocated(api, result("m", "gpu-0-mig-3g40gb-4", NODE), config=[opaque(MIG_MPS)])
    with short_dir() as root:
        async with started_by_hand(server, root) as daemon:
            preparer = daemon.preparer
            assert (await preparer.prepare([claim]))[claim.uid].error == ""
            (mig,) = daemon.backend.mig_devices(0)
            daemon.backend.mark_busy(0, mig.gi_id)
            failed = (await preparer.unprepare([claim]))[claim.uid]
            assert failed.endswith("(the device is in use; kubelet retries unprepare)"), failed
            assert daemon.mps.running() == {}
            daemon.backend.clear_busy(0, mig.gi_id)
            assert await preparer.unprepare([claim]) == {claim.uid: ""}
            assert daemon.backend.mig_devices(0) == ()
            assert preparer.checkpoint.claims == {}
            assert daemon.mps.running() == {}


async def test_a_check_kept_waiting_by_a_leaving_claim_still_looks_after_the_next_daemon(
    server: Server, api: client.ApiClient
) -> None:
    # The check takes each daemon's GPU lock in turn. kubelet's unprepare of the last share of
    # the first GPU (in UUID order) holds that lock while it stops the daemon, so the check
    # waits, finds no claim needs that daemon any more, and must go on to the next GPU, whose
    # daemon died.
    with short_dir() as root:
        async with started_by_hand(server, root) as daemon:
            preparer = daemon.preparer
            uuid = {minor: daemon.backend.gpus[minor].uuid for minor in (0, 1)}
            leaving_minor, staying_minor = sorted(uuid, key=uuid.__getitem__)
            leaving = share(api, leaving_minor, "l", "20", "2Gi")
            staying = share(api, staying_minor, "s", "20", "2Gi")
            answers = await preparer.prepare([leaving, staying])
            assert {u: a.error for u, a in answers.items()} == {leaving.uid: "", staying.uid: ""}
            died = daemon.mps.running()[uuid[staying_minor]]
            await kill_daemon(died)

            # Started in this order, the unprepare runs first, up to its wait for the daemon.
            unprepared = asyncio.create_task(preparer.unprepare([leaving]))
            checked = asyncio.create_task(preparer.mps.check())
            assert await unprepared == {leaving.uid: ""}
            assert await checked is False
            running = daemon.mps.running()
            assert set(running) == {uuid[staying_minor]}
            assert running[uuid[staying_minor]] != died
            assert daemon.metrics.mps_restarts._value.get() == 1
            assert await preparer.unprepare([staying]) == {staying.uid: ""}


def slow_tool(directory: Path) -> tuple[Path, Path, Path]:
    """The fake `nvidia-cuda-mps-control`, stuck while the file `hold` exists, as the real tool
    can be on a busy node (the plugin gives it 10 s); a stuck call first creates `called`.
    Returns the tool, `hold` and `called`."""
    hold, called = directory / "hold", directory / "called"
    tool = directory / "nvidia-cuda-mps-control"
    tool.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{hold}" ]; then touch "{called}"; fi\n'
        f'while [ -e "{hold}" ]; do sleep 0.01; done\n'
        f'exec "{sys.executable}" -S "{fake_mps_control.__file__}" "$@"\n'
    )
    tool.chmod(0o755)
    return tool, hold, called


async def test_a_claim_whose_daemon_is_slow_to_start_or_stop_holds_up_no_other_claim(
    server: Server, api: client.ApiClient
) -> None:
    # kubelet prepares and unprepares the claims of different pods in calls of their own, at the
    # same time. A claim waiting for a stuck MPS control tool must not hold up another claim:
    # the other's answer comes first, and the stuck one's once the tool is free again.
    slow = share(api, 0, "a", "20", "2Gi")
    quick = allocated(api, result("gpu", "gpu-1", NODE))
    with short_dir() as root:
        tool, hold, called = slow_tool(root)
        async with (
            running_plugin(server, root, NODE, mps_control=tool) as plugin,
            DraClient(plugin.dra_socket) as dra,
        ):
            try:
                hold.touch()
                slow_call = asyncio.create_task(dra.prepare([slow]))
                await eventually(called.exists, "the control tool to start a daemon")
                quick_call = asyncio.create_task(dra.prepare([quick]))
                done, _ = await asyncio.wait(
                    {slow_call, quick_call}, return_when=asyncio.FIRST_COMPLETED
                )
                assert done == {quick_call}
                assert (await quick_call)[quick.uid].error == ""
                hold.unlink()
                assert (await slow_call)[slow.uid].error == ""
                uuid = plugin.backend.gpus[0].uuid
                pid = daemon_pid(plugin.daemon.config.state_dir / "mps" / uuid / "pipe")

                called.unlink()
                hold.touch()
                slow_stop = asyncio.create_task(dra.unprepare([slow]))
                await eventually(called.exists, "the control tool to stop the daemon")
                quick_stop = asyncio.create_task(dra.unprepare([quick]))
                done, _ = await asyncio.wait(
                    {slow_stop, quick_stop}, return_when=asyncio.FIRST_COMPLETED
                )
                assert done == {quick_stop}
                assert await quick_stop == {quick.uid: ""}
                assert process_alive(pid)
                hold.unlink()
                assert await slow_stop == {slow.uid: ""}
                assert not process_alive(pid)
            finally:
                hold.unlink(missing_ok=True)
