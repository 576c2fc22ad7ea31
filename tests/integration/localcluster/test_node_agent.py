"""The kubelet stand-in against real plugin servers on unix sockets and the embedded API server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.cdi import CdiDevice, CdiSpec, CdiSpecDir, ContainerEdits
from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1, PLUGIN_TYPE
from dra_driver.kubeletapi.types import ClaimRef, PluginInfo, PreparedDevice, PrepareOutcome
from kubeletplugin.server import PluginServers
from localcluster import ApiServer
from localcluster.roles.node_agent import (
    FAKE_UTILIZATION_ANNOTATION,
    FINALIZER,
    INVALID_FAKE_UTILIZATION,
    PREPARE_ERROR_ANNOTATION,
    PREPARED_ANNOTATION,
    PREPARED_CONDITION,
    NodeAgent,
)
from tests.support import objects

# The stand-ins (scheduler, claims from templates, kubelet) themselves, on the embedded server;
# the upstream tier runs the real control plane instead.
pytestmark = pytest.mark.embedded_only

Obj = dict[str, Any]
DRIVER = DEFAULT_DRIVER_NAME
NODE = "node-a"
CDI_KIND = "k8s.gpu.dra-driver.dev/claim"
MERGE = "application/merge-patch+json"
WAIT = 5.0


class DictDriver:
    """Prepares each claim as one device, writing a CDI spec that names the claim."""

    def __init__(self, cdi_root: Path, dyn: dynamic.DynamicClient) -> None:
        self.cdi = CdiSpecDir(cdi_root)
        self.dyn = dyn
        self.prepared: dict[str, ClaimRef] = {}
        self.errors: dict[str, str] = {}  # claim uid -> error to answer with
        self.calls: list[tuple[str, list[ClaimRef]]] = []
        self.pod_existed_at_unprepare: list[bool] = []
        self.watch_pod: str | None = None

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareOutcome]:
        self.calls.append(("prepare", list(claims)))
        result: dict[str, PrepareOutcome] = {}
        for claim in claims:
            if claim.uid in self.errors:
                result[claim.uid] = PrepareOutcome(error=self.errors[claim.uid])
                continue
            edits = ContainerEdits(env=(f"CLAIM_{claim.name.upper()}={claim.uid}",))
            spec = CdiSpec(kind=CDI_KIND, devices=(CdiDevice(name=claim.uid, edits=edits),))
            self.cdi.write_claim_spec(claim.uid, spec)
            self.prepared[claim.uid] = claim
            device = PreparedDevice(
                request_names=("gpu",),
                pool_name=NODE,
                device_name=f"gpu-{claim.name}",
                cdi_device_ids=(f"{CDI_KIND}={claim.uid}",),
                share_id=f"share-{claim.name}",
            )
            result[claim.uid] = PrepareOutcome(devices=(device,))
        return result

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        self.calls.append(("unprepare", list(claims)))
        if self.watch_pod is not None:
            self.pod_existed_at_unprepare.append(_exists(self.dyn, self.watch_pod))
        for claim in claims:
            self.prepared.pop(claim.uid, None)
            self.cdi.delete_claim_spec(CDI_KIND, claim.uid)
        return {c.uid: "" for c in claims}

    def prepare_calls(self) -> list[list[ClaimRef]]:
        return [refs for method, refs in self.calls if method == "prepare"]


def _exists(dyn: dynamic.DynamicClient, pod_name: str) -> bool:
    try:
        kind(dyn, "v1", "Pod").get(name=pod_name, namespace="default")
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """Short on purpose: unix socket paths must stay under 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="na-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    with ApiServer(port=0) as server:
        api_client = client.ApiClient(client.Configuration(host=server.url))
        yield api_client
        api_client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def dyn(api: client.ApiClient) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]


@pytest.fixture
def driver(sockdir: Path, dyn: dynamic.DynamicClient) -> DictDriver:
    return DictDriver(sockdir / "cdi", dyn)


def make_servers(sockdir: Path, driver: DictDriver, pod_uid: str | None = None) -> PluginServers:
    return PluginServers(DRIVER, sockdir / "p", sockdir / "reg", driver, pod_uid=pod_uid)


@pytest.fixture
async def servers(sockdir: Path, driver: DictDriver) -> AsyncIterator[PluginServers]:
    s = make_servers(sockdir, driver)
    await s.start()
    try:
        yield s
    finally:
        await s.stop(grace=0)


def make_agent(api: client.ApiClient, sockdir: Path, **options: Any) -> NodeAgent:
    return NodeAgent(api, NODE, sockdir / "reg", sockdir / "cdi", poll_s=0.02, **options)


@contextlib.asynccontextmanager
async def running(agent: NodeAgent) -> AsyncIterator[NodeAgent]:
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT)


@pytest.fixture
async def agent(api: client.ApiClient, sockdir: Path) -> AsyncIterator[NodeAgent]:
    async with running(make_agent(api, sockdir)) as a:
        yield a


async def more_passes(agent: NodeAgent, n: int = 3) -> None:
    """Let the agent finish a few more full passes (to show something did not happen)."""
    target = agent.passes + n
    await agent.wait_until(lambda: agent.passes >= target, WAIT)


# ---- cluster objects ------------------------------------------------------------------------


def kind(dyn: dynamic.DynamicClient, api_version: str, name: str) -> Any:
    return dyn.resources.get(api_version=api_version, kind=name)


def make_pod(dyn: dynamic.DynamicClient, name: str, claims: Sequence[str], node: str = NODE) -> Obj:
    references = {f"e-{c}": c for c in claims}
    body = objects.pod(name, references, status={"phase": "Pending"}, nodeName=node)
    made: Obj = kind(dyn, "v1", "Pod").create(body=body, namespace="default").to_dict()
    return made


def make_claim(dyn: dynamic.DynamicClient, name: str, pod: Obj | None) -> Obj:
    """A claim allocated on NODE and, with a pod, reserved for it, as the scheduler leaves it."""
    claims = kind(dyn, "resource.k8s.io/v1", "ResourceClaim")
    claims.create(namespace="default", body=objects.claim(name, objects.request("gpu", "gpu")))
    status: Obj = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
            }
        }
    }
    if pod is not None:
        meta = pod["metadata"]
        status["reservedFor"] = [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]
    written: Obj = claims.status.patch(
        body={"status": status}, name=name, namespace="default", content_type=MERGE
    ).to_dict()
    return written


def get(dyn: dynamic.DynamicClient, api_version: str, name: str, obj: str) -> Obj:
    found: Obj = kind(dyn, api_version, name).get(name=obj, namespace="default").to_dict()
    return found


def ref(claim: Obj) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(meta["namespace"], meta["uid"], meta["name"])


def condition(pod: Obj) -> Obj:
    conditions = (pod.get("status") or {}).get("conditions") or []
    found: Obj = next(c for c in conditions if c["type"] == PREPARED_CONDITION)
    return found


# ---- registration ---------------------------------------------------------------------------


async def test_registration_prefers_v1(servers: PluginServers, agent: NodeAgent) -> None:
    await agent.wait_until(lambda: DRIVER in agent.plugins, WAIT)
    plugin = agent.plugins[DRIVER]
    assert plugin.version == DRA_V1
    assert plugin.endpoint == servers.dra_socket
    assert plugin.registration_socket == servers.registration_socket
    await asyncio.wait_for(servers.registered.wait(), WAIT)
    assert servers.registration.last_status is not None
    assert servers.registration.last_status.registered


async def test_forced_v1beta1_is_chosen_and_spoken(
    servers: PluginServers, api: client.ApiClient, sockdir: Path, dyn: dynamic.DynamicClient
) -> None:
    async with running(make_agent(api, sockdir, versions=(DRA_V1BETA1,))) as agent:
        await agent.wait_until(lambda: DRIVER in agent.plugins, WAIT)
        assert agent.plugins[DRIVER].version == DRA_V1BETA1
        pod = make_pod(dyn, "p", ["c1"])
        make_claim(dyn, "c1", pod)
        await agent.wait_until(lambda: "default/p" in agent.prepared, WAIT)
    (device,) = agent.prepared["default/p"]["c1"].devices
    # share_id exists only in v1 messages: its absence shows the v1beta1 service answered.
    assert device.share_id is None
    assert device.device_name == "gpu-c1"


@pytest.mark.parametrize(
    ("info", "words"),
    [
        (PluginInfo("CSIPlugin", DRIVER, "", (DRA_V1,)), "CSIPlugin"),
        (PluginInfo(PLUGIN_TYPE, DRIVER, "", ("v9.DRAPlugin",)), "v9.DRAPlugin"),
    ],
    ids=["wrong-type", "no-common-version"],
)
async def test_unusable_plugin_is_refused(
    sockdir: Path, driver: DictDriver, agent: NodeAgent, info: PluginInfo, words: str
) -> None:
    servers = make_servers(sockdir, driver)
    servers.registration.info = info
    async with servers:
        await agent.wait_until(lambda: servers.registration.last_status is not None, WAIT)
        status = servers.registration.last_status
        assert status is not None
        assert not status.registered
        assert words in status.error
        assert DRIVER not in agent.plugins
        assert agent.registry.refused[servers.registration_socket] == status.error
        # Told once: later passes do not repeat the handshake for the same socket.
        servers.registration.last_status = None
        await more_passes(agent)
        assert servers.registration.last_status is None


async def test_dot_files_and_plain_files_are_ignored(sockdir: Path, agent: NodeAgent) -> None:
    (sockdir / "reg").mkdir(parents=True, exist_ok=True)
    (sockdir / "reg" / "not-a-socket.sock").write_text("")
    await more_passes(agent)
    assert dict(agent.plugins) == {}
    assert agent.registry.refused == {}


async def test_socket_removal_deregisters(servers: PluginServers, agent: NodeAgent) -> None:
    await agent.wait_until(lambda: DRIVER in agent.plugins, WAIT)
    await servers.stop(grace=0)
    assert not servers.registration_socket.exists()
    await agent.wait_until(lambda: DRIVER not in agent.plugins, WAIT)


async def test_newest_instance_serves_and_older_takes_over(
    sockdir: Path, driver: DictDriver, agent: NodeAgent
) -> None:
    old = make_servers(sockdir, driver, pod_uid="old")
    new = make_servers(sockdir, driver, pod_uid="new")
    async with old:
        await agent.wait_until(lambda: DRIVER in agent.plugins, WAIT)
        assert agent.plugins[DRIVER].endpoint == old.dra_socket
        async with new:
            await agent.wait_until(lambda: agent.plugins[DRIVER].endpoint == new.dra_socket, WAIT)
        await agent.wait_until(
            lambda: DRIVER in agent.plugins and agent.plugins[DRIVER].endpoint == old.dra_socket,
            WAIT,
        )
    await agent.wait_until(lambda: DRIVER not in agent.plugins, WAIT)


# ---- pods -----------------------------------------------------------------------------------


async def test_pod_is_prepared_once_with_devices_and_environment(
    servers: PluginServers, agent: NodeAgent, driver: DictDriver, dyn: dynamic.DynamicClient
) -> None:
    pod = make_pod(dyn, "p", ["c1", "c2"])
    c1 = make_claim(dyn, "c1", pod)
    c2 = make_claim(dyn, "c2", pod)
    await agent.wait_until(lambda: "default/p" in agent.prepared, WAIT)

    assert driver.prepare_calls() == [[ref(c1), ref(c2)]]
    outcomes = agent.prepared["default/p"]
    assert outcomes["c1"].devices[0].share_id == "share-c1"  # v1 carries it
    written = get(dyn, "v1", "Pod", "p")
    assert written["status"]["phase"] == "Running"
    assert condition(written)["status"] == "True"
    assert FINALIZER in written["metadata"]["finalizers"]
    annotations = written["metadata"]["annotations"]
    assert PREPARE_ERROR_ANNOTATION not in annotations
    document = json.loads(annotations[PREPARED_ANNOTATION])
    assert document["claims"]["c1"]["devices"] == [
        {
            "requests": ["gpu"],
            "pool": NODE,
            "device": "gpu-c1",
            "cdiDeviceIds": [f"{CDI_KIND}={c1['metadata']['uid']}"],
            "shareId": "share-c1",
        }
    ]
    assert document["env"] == {
        "CLAIM_C1": c1["metadata"]["uid"],
        "CLAIM_C2": c2["metadata"]["uid"],
    }

    await more_passes(agent)
    assert len(driver.prepare_calls()) == 1


async def test_pod_waits_for_its_driver_and_all_its_claims(
    sockdir: Path, agent: NodeAgent, driver: DictDriver, dyn: dynamic.DynamicClient
) -> None:
    pod = make_pod(dyn, "p", ["c1", "c2", "c3"])
    make_claim(dyn, "c1", pod)
    make_claim(dyn, "c2", pod)
    make_claim(dyn, "c3", pod)
    await more_passes(agent)  # every claim ready, but no plugin for the driver yet
    assert "default/p" not in agent.prepared
    assert agent.errors == {}
    assert not get(dyn, "v1", "Pod", "p")["metadata"].get("finalizers")

    claims = kind(dyn, "resource.k8s.io/v1", "ResourceClaim")
    claims.status.patch(
        body={"status": {"reservedFor": None}}, name="c2", namespace="default", content_type=MERGE
    )
    claims.delete(name="c3", namespace="default")
    async with make_servers(sockdir, driver):
        await agent.wait_until(lambda: DRIVER in agent.plugins, WAIT)
        await more_passes(agent)  # c2 not reserved for the pod, c3 missing
        assert driver.prepare_calls() == []
        assert not get(dyn, "v1", "Pod", "p")["metadata"].get("finalizers")

        make_claim(dyn, "c3", pod)
        reserved = [{"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}]
        claims.status.patch(
            body={"status": {"reservedFor": reserved}},
            name="c2",
            namespace="default",
            content_type=MERGE,
        )
        await agent.wait_until(lambda: "default/p" in agent.prepared, WAIT)
    (call,) = driver.prepare_calls()
    assert [r.name for r in call] == ["c1", "c2", "c3"]


async def test_prepare_error_is_recorded_and_retried(
    servers: PluginServers, agent: NodeAgent, driver: DictDriver, dyn: dynamic.DynamicClient
) -> None:
    pod = make_pod(dyn, "p", ["c1"])
    c1 = make_claim(dyn, "c1", pod)
    # Set before the test yields to the loop, so the agent's first attempt already fails.
    driver.errors[c1["metadata"]["uid"]] = "no GPU left"

    await agent.wait_until(lambda: "default/p" in agent.errors, WAIT)
    assert "no GPU left" in agent.errors["default/p"]
    failed = get(dyn, "v1", "Pod", "p")
    assert "no GPU left" in failed["metadata"]["annotations"][PREPARE_ERROR_ANNOTATION]
    assert PREPARED_ANNOTATION not in failed["metadata"]["annotations"]
    assert failed["status"]["phase"] == "Pending"
    assert condition(failed)["status"] == "False"
    calls = len(driver.prepare_calls())

    await agent.wait_until(lambda: len(driver.prepare_calls()) > calls, WAIT)  # retried
    driver.errors.clear()
    await agent.wait_until(lambda: "default/p" in agent.prepared, WAIT)
    assert "default/p" not in agent.errors
    done = get(dyn, "v1", "Pod", "p")
    assert PREPARE_ERROR_ANNOTATION not in done["metadata"]["annotations"]
    assert done["status"]["phase"] == "Running"
    assert condition(done)["status"] == "True"


async def test_deletion_unprepares_then_releases_pod_and_reservation(
    servers: PluginServers, agent: NodeAgent, driver: DictDriver, dyn: dynamic.DynamicClient
) -> None:
    pod = make_pod(dyn, "p", ["c1"])
    other = {"resource": "pods", "name": "q", "uid": "uid-of-q"}
    c1 = make_claim(dyn, "c1", pod)
    claims = kind(dyn, "resource.k8s.io/v1", "ResourceClaim")
    claims.status.patch(
        body={"status": {"reservedFor": [*c1["status"]["reservedFor"], other]}},
        name="c1",
        namespace="default",
        content_type=MERGE,
    )
    await agent.wait_until(lambda: "default/p" in agent.prepared, WAIT)
    assert c1["metadata"]["uid"] in driver.prepared
    driver.watch_pod = "p"

    kind(dyn, "v1", "Pod").delete(name="p", namespace="default")
    await agent.wait_until(lambda: "default/p" not in agent.prepared, WAIT)

    assert driver.calls[-1] == ("unprepare", [ref(c1)])
    assert driver.pod_existed_at_unprepare == [True]  # the finalizer held the pod until then
    assert driver.prepared == {}
    assert not _exists(dyn, "p")
    assert get(dyn, "resource.k8s.io/v1", "ResourceClaim", "c1")["status"]["reservedFor"] == [other]
    await more_passes(agent)
    assert [m for m, _ in driver.calls].count("unprepare") == 1


async def test_pod_on_another_node_is_ignored(
    servers: PluginServers, agent: NodeAgent, driver: DictDriver, dyn: dynamic.DynamicClient
) -> None:
    elsewhere = make_pod(dyn, "far", ["c-far"], node="node-b")
    make_claim(dyn, "c-far", elsewhere)
    here = make_pod(dyn, "near", ["c-near"])
    c_near = make_claim(dyn, "c-near", here)
    await agent.wait_until(lambda: "default/near" in agent.prepared, WAIT)
    await more_passes(agent)

    assert driver.prepare_calls() == [[ref(c_near)]]
    assert "default/far" not in agent.prepared
    far = get(dyn, "v1", "Pod", "far")
    assert not far["metadata"].get("finalizers")
    assert not far["metadata"].get("annotations")
    assert far["status"]["phase"] == "Pending"


async def test_restarted_agent_releases_a_pod_it_did_not_prepare(
    servers: PluginServers,
    api: client.ApiClient,
    sockdir: Path,
    driver: DictDriver,
    dyn: dynamic.DynamicClient,
) -> None:
    pod = make_pod(dyn, "p", ["c1"])
    c1 = make_claim(dyn, "c1", pod)
    async with running(make_agent(api, sockdir)) as first:
        await first.wait_until(lambda: "default/p" in first.prepared, WAIT)
    kind(dyn, "v1", "Pod").delete(name="p", namespace="default")
    assert _exists(dyn, "p")  # held by the finalizer while no agent runs

    async with running(make_agent(api, sockdir)) as second:
        await second.wait_until(lambda: not _exists(dyn, "p"), WAIT)
    assert driver.calls[-1] == ("unprepare", [ref(c1)])
    assert not get(dyn, "resource.k8s.io/v1", "ResourceClaim", "c1")["status"].get("reservedFor")


async def test_pod_that_vanished_is_still_unprepared(
    servers: PluginServers,
    api: client.ApiClient,
    sockdir: Path,
    driver: DictDriver,
    dyn: dynamic.DynamicClient,
) -> None:
    agent = make_agent(api, sockdir)  # driven pass by pass, no background loop
    pod = make_pod(dyn, "p", ["c1"])
    c1 = make_claim(dyn, "c1", pod)
    await agent.reconcile_once()  # registers the plugin, then prepares the pod
    assert "default/p" in agent.prepared

    # Someone strips the finalizer: the pod disappears without the agent seeing it terminate.
    pods = kind(dyn, "v1", "Pod")
    pods.patch(
        body={"metadata": {"finalizers": None}},
        name="p",
        namespace="default",
        content_type=MERGE,
    )
    pods.delete(name="p", namespace="default")
    assert not _exists(dyn, "p")
    await agent.reconcile_once()

    assert driver.calls[-1] == ("unprepare", [ref(c1)])
    assert agent.prepared == {}
    assert not get(dyn, "resource.k8s.io/v1", "ResourceClaim", "c1")["status"].get("reservedFor")


async def test_the_fake_utilization_annotation_means_nothing_without_fake_gpus(
    servers: PluginServers, agent: NodeAgent, dyn: dynamic.DynamicClient
) -> None:
    # The agent has no fake load (a node without fake GPUs): it neither reads nor refuses it.
    body = objects.pod(
        "p",
        {"e-c1": "c1"},
        annotations={FAKE_UTILIZATION_ANNOTATION: "lots"},
        status={"phase": "Pending"},
        nodeName=NODE,
    )
    pod = kind(dyn, "v1", "Pod").create(body=body, namespace="default").to_dict()
    make_claim(dyn, "c1", pod)
    await agent.wait_until(lambda: "default/p" in agent.prepared, WAIT)
    assert get(dyn, "v1", "Pod", "p")["status"]["phase"] == "Running"
    events = kind(dyn, "v1", "Event").get(namespace="default").to_dict()["items"]
    assert [e for e in events if e["reason"] == INVALID_FAKE_UTILIZATION] == []
