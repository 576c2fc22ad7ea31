"""GPU usage on the whole local cluster: pods "run" fake load from their fake-utilization
annotation (the node agent), the kubelet plugin processes sample it every second, attribute it to
the pods through the fake /proc/PID/cgroup files, export it per pod and write the Idle condition
into the claims' status.

The GPUs have MIG mode off: NVML reports no utilisation for a whole GPU in MIG mode, so such a
GPU is never called idle (docs/telemetry.md).
"""

from __future__ import annotations

import asyncio
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake.load_curve import LoadCurve
from dra_driver.backends.fake.state import FileStateStore
from dra_driver.cli.main import build_parser
from dra_driver.device_status import allocated_devices, idleness
from dra_driver.deviceclasses import class_name, device_classes
from dra_driver.pod_claims import claim_names
from localcluster.cluster import LocalCluster, LocalNode
from localcluster.queue_scenario import _Teams
from localcluster.roles.node_agent import (
    FAKE_UTILIZATION_ANNOTATION,
    INVALID_FAKE_UTILIZATION,
    PREPARED_ANNOTATION,
    fake_utilization,
)
from tests.support import objects
from tests.support.polling import eventually

DRIVER = DEFAULT_DRIVER_NAME
IDLE_AFTER_S = 10
#: The issue's bound for the idle pod's device to say Idle=True, from when the pod runs.
IDLE_WITHIN_S = 30.0
Obj = dict[str, Any]


@pytest.fixture
def gpus_without_mig(tmp_path: Path) -> str:
    spec = tmp_path / "gpus.yaml"
    spec.write_text(
        yaml.safe_dump({"gpus": [{"profile": "H100-SXM5-80GB", "count": 8, "migEnabled": False}]})
    )
    return str(spec)


def _pod(name: str, percent: str | None) -> Obj:
    container = {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
    annotations = {FAKE_UTILIZATION_ANNOTATION: percent} if percent is not None else {}
    return objects.pod(
        name, templates={"gpu": "one-gpu"}, annotations=annotations, containers=[container]
    )


ONE_GPU = objects.template("one-gpu", objects.request("gpu", class_name("gpu", DRIVER)))


def _read_pod(cluster: LocalCluster, name: str) -> Obj | None:
    assert cluster.dyn is not None
    pods = cluster.dyn.resources.get(api_version="v1", kind="Pod")
    found = pods.get(namespace="default").to_dict()["items"]
    return next((p for p in found if p["metadata"]["name"] == name), None)


def _running(cluster: LocalCluster, name: str) -> bool:
    pod = _read_pod(cluster, name)
    return pod is not None and PREPARED_ANNOTATION in (pod["metadata"].get("annotations") or {})


def _claim(cluster: LocalCluster, pod_name: str) -> Obj:
    pod = _read_pod(cluster, pod_name)
    assert pod is not None
    names = claim_names(pod)
    assert names
    found: Obj = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims", names[0]
    )
    return found


def _idle(cluster: LocalCluster, pod_name: str) -> bool | None:
    """The Idle condition of the pod's one device: True, False, or None when there is none."""
    claim = _claim(cluster, pod_name)
    (key,) = allocated_devices(claim, DRIVER)
    state = idleness(claim).get(key)
    return None if state is None else state.idle


def _node_of(cluster: LocalCluster, pod_name: str) -> LocalNode:
    pod = _read_pod(cluster, pod_name)
    assert pod is not None
    return next(n for n in cluster.nodes if n.name == pod["spec"]["nodeName"])


def _series(cluster: LocalCluster, metric: str) -> dict[str, float]:
    """`pods` label -> value of `metric` over every node's plugin."""
    found: dict[str, float] = {}
    for node in cluster.nodes:
        url = f"http://127.0.0.1:{node.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        for line in text.splitlines():
            if line.startswith(metric + "{"):
                labels, value = line[len(metric) + 1 :].rsplit("} ", 1)
                found[_labels(labels)["pods"]] = float(value)
    return found


def _labels(text: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for part in text.split('",'):
        key, _, value = part.partition("=")
        pairs[key.strip()] = value.strip().strip('"')
    return pairs


async def test_the_idle_pods_device_is_reported_idle_and_the_busy_ones_not(
    gpus_without_mig: str,
) -> None:
    async with LocalCluster(
        nodes=2, gpus=gpus_without_mig, idle_after=IDLE_AFTER_S, plugin_metrics=True
    ) as cluster:
        await cluster.wait_registered()
        cluster.apply(
            [
                *device_classes(DRIVER),
                ONE_GPU,
                _pod("idle", "0"),
                _pod("busy", "80"),
                _pod("plain", None),
            ]
        )
        for name in ("idle", "busy", "plain"):
            await eventually(
                lambda n=name: _running(cluster, n), f"pod {name} running", in_thread=True
            )
        # One fake process for the busy pod's GPU; none for the pod at 0 % or without load.
        percents = []
        for node in cluster.nodes:
            with FileStateStore(node.fake_state_dir, node.name).transaction() as state:
                percents += [p.sm_percent for p in state.processes]
        assert percents == [80.0]
        # Idle after its window, within the bound; never the busy one.
        await eventually(
            lambda: _idle(cluster, "idle") is True,
            "Idle=True on the idle pod's device",
            timeout=IDLE_WITHIN_S,
            in_thread=True,
        )
        assert _idle(cluster, "busy") in (False, None)

        # The plugins' metrics carry each device with its pod's name and its load.
        utilisation = _series(cluster, "dra_device_utilization_percent")
        assert utilisation.get("busy") == 80.0, utilisation
        assert utilisation.get("idle") == 0.0, utilisation
        assert utilisation.get("plain") == 0.0, utilisation  # no annotation: no load
        idle_for = _series(cluster, "dra_device_idle_seconds")
        assert idle_for["idle"] >= IDLE_AFTER_S and idle_for["busy"] == 0.0, idle_for

        # Deleting the busy pod ends its fake process before its claim is unprepared.
        node = _node_of(cluster, "busy")
        busy_uid = (_read_pod(cluster, "busy") or {})["metadata"]["uid"]
        with FileStateStore(node.fake_state_dir, node.name).transaction() as state:
            pids = [p.pid for p in state.processes if p.pod_uid == busy_uid]
        assert len(pids) == 1 and (node.proc_root / str(pids[0]) / "cgroup").exists()
        client.CoreV1Api(cluster.api).delete_namespaced_pod("busy", "default")
        await eventually(
            lambda: _read_pod(cluster, "busy") is None, "busy pod released", in_thread=True
        )
        with FileStateStore(node.fake_state_dir, node.name).transaction() as state:
            assert [p for p in state.processes if p.pod_uid == busy_uid] == []
        assert not (node.proc_root / str(pids[0])).exists()


def _events(cluster: LocalCluster, pod_name: str) -> list[Any]:
    """The node agent's Events on the pod (kube-scheduler posts its own on the real one)."""
    found = client.CoreV1Api(cluster.api).list_namespaced_event("default").items
    return [
        e
        for e in found
        if e.involved_object.name == pod_name and e.reporting_component == "node-agent"
    ]


async def test_an_invalid_annotation_keeps_the_pod_from_starting_until_fixed(
    gpus_without_mig: str,
) -> None:
    async with LocalCluster(nodes=1, gpus=gpus_without_mig) as cluster:
        await cluster.wait_registered()
        cluster.apply(
            [
                *device_classes(DRIVER),
                ONE_GPU,
                _pod("wrong", "lots"),
            ]
        )
        await eventually(lambda: bool(_events(cluster, "wrong")), "an Event", in_thread=True)
        (event,) = _events(cluster, "wrong")
        assert event.type == "Warning" and event.reason == INVALID_FAKE_UTILIZATION
        for part in ("default/wrong", FAKE_UTILIZATION_ANNOTATION, "'lots'"):
            assert part in event.message
        # Several passes later: still not running, and the Event not repeated.
        agent = cluster.nodes[0].agent
        seen = agent.passes
        await agent.wait_until(lambda: agent.passes >= seen + 5)
        assert not _running(cluster, "wrong")
        assert len(_events(cluster, "wrong")) == 1
        pod = _read_pod(cluster, "wrong")
        assert pod is not None and pod["status"].get("phase") != "Running"

        client.CoreV1Api(cluster.api).patch_namespaced_pod(
            "wrong", "default", {"metadata": {"annotations": {FAKE_UTILIZATION_ANNOTATION: "12.5"}}}
        )
        await eventually(lambda: _running(cluster, "wrong"), "the fixed pod runs", in_thread=True)
        node = cluster.nodes[0]
        with FileStateStore(node.fake_state_dir, node.name).transaction() as state:
            assert [p.sm_percent for p in state.processes] == [12.5]


@pytest.mark.parametrize("value", ["0", "80", "100", "12.5", "007"])
def test_a_plain_number_from_0_to_100_is_accepted(value: str) -> None:
    assert fake_utilization(_pod("p", value)) == LoadCurve.constant(float(value))


@pytest.mark.parametrize(
    "value", ["", "lots", "-1", "100.5", "101", "1e2", " 80", "nan", "+5", "5%"]
)
def test_anything_else_is_refused_naming_the_pod_annotation_and_value(value: str) -> None:
    with pytest.raises(ValueError) as refused:
        fake_utilization(_pod("p", value))
    for part in ("default/p", FAKE_UTILIZATION_ANNOTATION, repr(value)):
        assert part in str(refused.value)


def test_without_the_annotation_there_is_no_load() -> None:
    assert fake_utilization(_pod("p", None)) is None


def _queue_pod(teams: _Teams, team: str, name: str, percent: str) -> None:
    """A gated one-GPU pod of the team's queue, as `_Teams.create_pods` makes them, with load."""
    teams.core.create_namespaced_pod(
        f"q{team}",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": f"q{team}",
                "annotations": {FAKE_UTILIZATION_ANNOTATION: percent},
            },
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "schedulingGates": [{"name": teams.gate}],
            },
        },
    )


def _queue_claim_idle(teams: _Teams, team: str, pod_name: str) -> bool | None:
    pod = teams.core.read_namespaced_pod(pod_name, f"q{team}")
    statuses = pod.status.resource_claim_statuses or []
    if not statuses or not statuses[0].resource_claim_name:
        return None
    claim = teams.objects.get_namespaced_custom_object(
        "resource.k8s.io", "v1", f"q{team}", "resourceclaims", statuses[0].resource_claim_name
    )
    states = [s.idle for s in idleness(claim).values()]
    return states[0] if states else None


def _names(teams: _Teams, team: str) -> set[str]:
    return {p.metadata.name for p in teams.pods(team)}


async def test_reclaim_evicts_the_idle_borrowed_pod_before_the_busy_newer_one(
    tmp_path: Path,
) -> None:
    """Queues a and b are each guaranteed 2 of the node's 4 GPUs. a runs 4 pods: a-0 and a-1
    (busy, oldest: within its guarantee), then a-2 (idle) and a-3 (busy, newest): borrowed. b's
    one pod needs a GPU back; without idleness reclaim would take the newest borrowed pod, a-3;
    idle-first it takes a-2."""
    spec = tmp_path / "gpus.yaml"
    spec.write_text(
        yaml.safe_dump({"gpus": [{"profile": "H100-SXM5-80GB", "count": 4, "migEnabled": False}]})
    )
    async with LocalCluster(nodes=1, gpus=str(spec), idle_after=2) as cluster:
        await cluster.wait_registered()
        cluster.apply(device_classes(DRIVER))
        teams = _Teams(cluster)
        await asyncio.to_thread(teams.setup, 2)
        for name in ("a-0", "a-1"):
            await asyncio.to_thread(_queue_pod, teams, "a", name, "80")
        await eventually(lambda: teams.running("a") == 2, "a-0 and a-1 running", in_thread=True)
        # Creation times have whole seconds: a-2 must be younger than a-1 to be borrowed.
        first = max(p.metadata.creation_timestamp for p in teams.pods("a"))
        await eventually(lambda: datetime.now(UTC) >= first + timedelta(seconds=1), "a new second")
        await asyncio.to_thread(_queue_pod, teams, "a", "a-2", "0")
        await eventually(
            lambda: _queue_claim_idle(teams, "a", "a-2") is True,
            "Idle=True on a-2's device",
            timeout=IDLE_WITHIN_S,
            in_thread=True,
        )
        await asyncio.to_thread(_queue_pod, teams, "a", "a-3", "80")
        await eventually(lambda: teams.running("a") == 4, "all of a's pods running", in_thread=True)
        assert _queue_claim_idle(teams, "a", "a-3") is not True

        await asyncio.to_thread(teams.create_pods, "b", range(1))
        await eventually(lambda: teams.running("b") == 1, "b's pod running", in_thread=True)
        assert await asyncio.to_thread(_names, teams, "a") == {"a-0", "a-1", "a-3"}
        # The victim's Event goes out once the controller's allocation work pauses.
        await eventually(lambda: teams.reclaimed() >= 1, "the Reclaimed Event", in_thread=True)
        assert await asyncio.to_thread(teams.reclaimed) == 1


def test_idle_after_on_the_command_line_is_seconds_and_not_negative(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["local-cluster", "--idle-after", "10"]).idle_after == 10.0
    assert build_parser().parse_args(["local-cluster"]).idle_after is None
    for bad, said in (("-1", "finite number of seconds >= 0"), ("soon", "number of seconds")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["local-cluster", "--idle-after", bad])
        assert said in capsys.readouterr().err
    with pytest.raises(ValueError, match="idle_after must be at least 0 seconds, got -1"):
        LocalCluster(idle_after=-1)


async def test_load_on_a_mig_device_and_a_share_ends_before_their_claims_are_released() -> None:
    """A MIG device made on demand carries the load under its own UUID (a process on it keeps
    its compute instance in use, so the process must end before unprepare destroys it); a
    time-slice share carries it under its GPU's UUID."""
    # Two GPUs: a GPU with a MIG device has no time-slice share free.
    async with LocalCluster(nodes=1, gpus="H100-SXM5-80GB:2") as cluster:
        await cluster.wait_registered()
        cluster.apply(
            [
                *device_classes(DRIVER),
                objects.template("one-mig", objects.request("gpu", class_name("mig", DRIVER))),
                objects.template("one-ts", objects.request("gpu", class_name("timeslice", DRIVER))),
                objects.pod(
                    "on-mig",
                    templates={"gpu": "one-mig"},
                    annotations={FAKE_UTILIZATION_ANNOTATION: "50"},
                    containers=[_container()],
                ),
                objects.pod(
                    "on-share",
                    templates={"gpu": "one-ts"},
                    annotations={FAKE_UTILIZATION_ANNOTATION: "20"},
                    containers=[_container()],
                ),
            ]
        )
        for name in ("on-mig", "on-share"):
            await eventually(
                lambda n=name: _running(cluster, n), f"pod {name} running", in_thread=True
            )
        node = cluster.nodes[0]
        gpu_uuids = node_gpu_uuids(cluster, node)
        with FileStateStore(node.fake_state_dir, node.name).transaction() as state:
            by_percent = {p.sm_percent: p.uuid for p in state.processes}
            instances = [gi for g in state.gpus.values() for gi in g.instances]
        assert by_percent[20.0] in gpu_uuids
        mig_uuid = by_percent[50.0]
        assert mig_uuid not in gpu_uuids
        assert [ci.uuid for gi in instances for ci in gi.compute_instances] == [mig_uuid]

        core = client.CoreV1Api(cluster.api)
        for name in ("on-mig", "on-share"):
            core.delete_namespaced_pod(name, "default")
        await eventually(
            lambda: _read_pod(cluster, "on-mig") is None and _read_pod(cluster, "on-share") is None,
            "both pods released",
            in_thread=True,
        )
        with FileStateStore(node.fake_state_dir, node.name).transaction() as state:
            assert state.processes == []
            assert [gi for g in state.gpus.values() for gi in g.instances] == []
        assert list(node.proc_root.iterdir()) == []


def _container() -> Obj:
    return {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}


def node_gpu_uuids(cluster: LocalCluster, node: LocalNode) -> list[str]:
    from dra_driver.backends.fake import FakeBackend

    backend = FakeBackend.from_spec(cluster.gpus, node.name, state_dir=node.fake_state_dir)
    try:
        return [gpu.uuid for gpu in backend.inventory().gpus]
    finally:
        backend.close()
