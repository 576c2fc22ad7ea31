"""Kubelet 1.37 itself, not the node agent stand-in, drives the plugin through a pod's life.

The real control plane schedules a pod with a claim from a template onto a node run by a real
kubelet (on the fake CRI runtime, so no container starts). What only kubelet does is checked
here: it registers the plugin through its plugin watcher, calls NodePrepareResources before it
starts the pod (the plugin's checkpoint and CDI spec, and the CDI IDs in kubelet's own DRA state)
and NodeUnprepareResources once the deleted pod's containers are gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.checkpoint import ClaimRecord, ClaimState, decode_checkpoint
from dra_driver.deviceclasses import class_name, device_classes
from localcluster.upstream.control_plane import UpstreamControlPlane
from localcluster.upstream.kubelet import UpstreamKubelet, running_as_root
from tests.support import objects
from tests.support.polling import wait_until

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("DRA_CONTROL_PLANE") != "upstream",
        reason="runs a real kubelet against the real control plane: upstream tier only "
        "(DRA_CONTROL_PLANE=upstream, binaries from hack/upstream.sh build)",
    ),
    pytest.mark.skipif(
        not running_as_root(), reason="kubelet must be able to create /var/log/containers"
    ),
]

NODE = "kubelet-node"
NAMESPACE = "default"
GROUP, VERSION = "resource.k8s.io", "v1"
#: Scheduling, the claim's creation and kubelet's sync all lie between a pod's creation and its
#: Running phase; on a loaded two-core machine that is well beyond the default deadline.
SLOW_S = 120.0


@dataclass
class Node:
    plane: UpstreamControlPlane
    kubelet: UpstreamKubelet
    plugin_log: Path
    state_dir: Path
    cdi_root: Path

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.plane.api_client())

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.plane.api_client())

    def claims(self) -> dict[str, ClaimRecord]:
        path = self.state_dir / "checkpoint.json"
        if not path.exists():
            return {}
        return dict(decode_checkpoint(path.read_bytes(), str(path)).claims)

    def plugin_events(self) -> list[str]:
        events = []
        for line in self.plugin_log.read_text(errors="replace").splitlines():
            try:
                events.append(str(json.loads(line).get("event", "")))
            except ValueError:
                continue
        return events

    def kubelet_dra_state(self) -> str:
        path = self.kubelet.root_dir / "dra_manager_state"
        return path.read_text() if path.exists() else ""


@pytest.fixture
def node() -> Iterator[Node]:
    # Not tmp_path: the plugin's sockets lie three levels under kubelet's root directory, and a
    # unix socket path must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="dra-kl-", dir="/tmp") as directory:
        workdir = Path(directory)
        with (
            UpstreamControlPlane(workdir / "plane") as plane,
            UpstreamKubelet(workdir / "node", NODE, plane.admin_kubeconfig) as kubelet,
        ):
            state_dir, cdi_root = workdir / "plugin-state", workdir / "cdi"
            plugin_log = workdir / "plugin.log"
            argv = [
                sys.executable,
                "-m",
                "kubeletplugin.cli",
                f"--node-name={NODE}",
                f"--driver-name={DEFAULT_DRIVER_NAME}",
                f"--kubeconfig={plane.admin_kubeconfig}",
                f"--plugin-dir={kubelet.plugin_dir(DEFAULT_DRIVER_NAME)}",
                f"--registry-dir={kubelet.registry_dir}",
                f"--cdi-root={cdi_root}",
                f"--state-dir={state_dir}",
                f"--fake-state-dir={workdir / 'fake-gpus'}",
                "--fake-gpus=H100-SXM5-80GB:2",
                "--log-format=json",
            ]
            with plugin_log.open("ab") as log_file:
                plugin = subprocess.Popen(argv, stdout=log_file, stderr=log_file)
            try:
                yield Node(plane, kubelet, plugin_log, state_dir, cdi_root)
            finally:
                plugin.terminate()
                try:
                    plugin.wait(15)
                except subprocess.TimeoutExpired:
                    plugin.kill()
                    plugin.wait(15)
                # The directory goes with the fixture; pytest shows this only for a failure.
                _print_tail(kubelet.log_path, 60)
                _print_tail(plugin_log, 20)


def _print_tail(path: Path, lines: int) -> None:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    print(f"--- last {lines} lines of {path.name}")
    print("\n".join(text[-lines:]))


def _node_ready(core: client.CoreV1Api) -> bool:
    try:
        found = core.read_node(NODE)
    except client.ApiException:
        return False
    conditions = found.status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _pod(core: client.CoreV1Api, name: str) -> Any:
    try:
        return core.read_namespaced_pod(name, NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _start_pod(node: Node, name: str) -> tuple[str, ClaimRecord]:
    """Create a pod that claims both GPUs, wait until kubelet runs it, and check what only a
    NodePrepareResources call before the start can explain; return its claim's UID and the
    plugin's record of it."""
    core, custom = node.core, node.custom
    container = {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}
    core.create_namespaced_pod(
        NAMESPACE, objects.pod(name, templates={"gpus": "both-gpus"}, containers=[container])
    )
    wait_until(
        lambda: (found := _pod(core, name)) is not None and found.status.phase == "Running",
        f"pod {name} Running on the fake runtime",
        timeout=SLOW_S,
    )
    running = _pod(core, name)
    assert running.spec.node_name == NODE
    claim_name = running.status.resource_claim_statuses[0].resource_claim_name
    claim = custom.get_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "resourceclaims", claim_name
    )
    uid: str = claim["metadata"]["uid"]
    allocated = claim["status"]["allocation"]["devices"]["results"]
    assert {(r["driver"], r["pool"]) for r in allocated} == {(DEFAULT_DRIVER_NAME, NODE)}
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [running.metadata.uid]

    # The plugin saves a prepared claim before it answers kubelet, so the record is on disk.
    record = node.claims()[uid]
    assert record.state is ClaimState.PREPARE_COMPLETED
    assert sorted(d.device_name for d in record.devices) == sorted(r["device"] for r in allocated)
    assert record.cdi_spec is not None and Path(record.cdi_spec).parent == node.cdi_root
    assert Path(record.cdi_spec).exists()
    cdi_ids = [cdi_id for device in record.devices for cdi_id in device.cdi_device_ids]
    assert len(cdi_ids) == 2
    # Kubelet keeps the CDI IDs the plugin answered with, for the container it creates.
    kubelet_state = node.kubelet_dra_state()
    assert uid in kubelet_state and all(cdi_id in kubelet_state for cdi_id in cdi_ids)
    return uid, record


def _delete_pod(node: Node, name: str, uid: str, record: ClaimRecord) -> None:
    """Delete the pod and wait for kubelet's NodeUnprepareResources to show."""
    assert record.cdi_spec is not None
    spec = Path(record.cdi_spec)
    node.core.delete_namespaced_pod(name, NAMESPACE)
    # A whole-GPU claim's CDI spec is its only side effect, so the spec is what unprepare
    # removes at once; the checkpoint drops the record with the plugin's next save.
    wait_until(lambda: not spec.exists(), f"the CDI spec of {name}'s claim removed", timeout=SLOW_S)
    wait_until(lambda: uid not in node.kubelet_dra_state(), f"kubelet forgetting {name}'s claim")
    wait_until(lambda: _pod(node.core, name) is None, f"kubelet finishing {name}'s deletion")


def test_kubelet_prepares_a_claim_before_the_pod_runs_and_unprepares_it_after(
    node: Node,
) -> None:
    core, custom = node.core, node.custom
    wait_until(lambda: _node_ready(core), f"node {NODE} Ready", timeout=SLOW_S)
    # The plugin only answers registration; the event is logged when kubelet reports back.
    wait_until(
        lambda: "kubelet registered the plugin" in node.plugin_events(),
        "kubelet's plugin watcher registering the plugin",
        timeout=SLOW_S,
    )
    for device_class in device_classes():
        custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", device_class)
    template = objects.template("both-gpus", objects.request("gpus", class_name("gpu"), count=2))
    custom.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "resourceclaimtemplates", template
    )

    first_uid, first = _start_pod(node, "first")
    _delete_pod(node, "first", first_uid, first)
    # Both GPUs again: the scheduler allocates them only once the first claim is gone, and the
    # plugin prepares them only if kubelet's unprepare released them (it refuses a device that
    # another prepared claim holds). Its save of the new claim leaves the first one out.
    second_uid, second = _start_pod(node, "second")
    assert first_uid not in node.claims()
    assert sorted(d.device_name for d in second.devices) == sorted(
        d.device_name for d in first.devices
    )
    _delete_pod(node, "second", second_uid, second)
