"""A real kubelet for one node, on the fake container runtime Kubernetes' own kubelet tests use.

Test infrastructure only, beside `control_plane.py`. The node agent stand-in of the local cluster
calls the plugin the way this project reads kubelet's code; this class runs kubelet itself, so
that registration through the plugin watcher, NodePrepareResources before a pod's containers and
NodeUnprepareResources after they are gone are done by upstream's DRA manager. `fakecri` answers
the CRI on a unix socket and starts nothing, so no container runs and no image is pulled.

What a sandbox needs, all in the generated KubeletConfiguration: no QoS cgroup tree and no node
allocatable enforcement (`cgroupsPerQOS: false`, `enforceNodeAllocatable: []`), no refusal on swap
(`failSwapOn`) or on a cgroup v1 host (`failCgroupV1`, true by default in 1.37), no hard
eviction thresholds (`evictionHard: {}`: the node's pressure conditions must not depend on how
full the host's disk is), and both of its ports on 127.0.0.1. Its root directory, certificates and
pod logs live under `workdir`. One path is fixed in kubelet and stays on the host: it makes
`/var/log/containers` at start when missing and fails if it cannot, so it runs as root here.

Two things kubelet does to its surroundings that `stop` and `start` contain:

- At start it bind-mounts its root directory onto itself to make it a shared mount (upstream's
  `Kubelet.setupDataDirs`); the mount outlives kubelet and keeps the directory from being
  removed, so `stop` unmounts it.
- When it removes a container it deletes the files that match the container's log path followed
  by `*` (`containerLogManager.Clean`). The fake runtime reports no log path, so the pattern is a
  bare `*`, resolved against kubelet's working directory: kubelet started from a checkout would
  delete its files. Kubelet therefore runs in an empty directory of its own.

It logs in with the kubeconfig it is given (the control plane's administrator in the tests) and
registers its own Node; kube-scheduler then places pods on it like on any node.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from localcluster.upstream.binaries import upstream_binaries
from localcluster.upstream.control_plane import (
    DRA_FEATURE_GATES,
    START_TIMEOUT_S,
    Component,
    ControlPlaneError,
    free_port,
)

KUBELET_CONFIG_API = "kubelet.config.k8s.io/v1beta1"


def feature_gate_map(gates: str) -> dict[str, bool]:
    """`Name=true,Other=false` (the control plane's flag form) as a KubeletConfiguration map."""
    parsed: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in gates.split(","))):
        name, _, value = item.partition("=")
        parsed[name] = value.strip().lower() == "true"
    return parsed


def kubelet_configuration(
    *,
    cri_socket: Path,
    port: int,
    healthz_port: int,
    pod_logs_dir: Path,
    feature_gates: str = DRA_FEATURE_GATES,
) -> dict[str, Any]:
    """The KubeletConfiguration of a sandboxed node (see the module docstring for each choice).

    The kubelet API (exec, logs, metrics) takes anyone on loopback: nothing here calls it, and a
    webhook login would need the control plane's token review for no gain.
    """
    return {
        "apiVersion": KUBELET_CONFIG_API,
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{cri_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,
        "evictionHard": {},
        "podLogsDir": str(pod_logs_dir),
        "featureGates": feature_gate_map(feature_gates),
    }


@dataclass
class _ComponentIn(Component):
    """A component started in working directory `cwd` (see the module docstring for why)."""

    cwd: Path | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log_file,
                stderr=log_file,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
            )


def mount_points() -> set[str]:
    """The mount points this process sees (`/proc/self/mountinfo`, octal escapes undone)."""
    points = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.add(fields[4].encode().decode("unicode_escape"))
    return points


@dataclass
class UpstreamKubelet:
    """`fakecri` and kubelet for node `node_name`, everything they write under `workdir`."""

    workdir: Path
    node_name: str
    kubeconfig: Path
    feature_gates: str = DRA_FEATURE_GATES
    components: dict[str, Component] = field(default_factory=dict)

    @property
    def root_dir(self) -> Path:
        return self.workdir / "root"

    @property
    def registry_dir(self) -> Path:
        """Where kubelet's plugin watcher looks for registration sockets."""
        return self.root_dir / "plugins_registry"

    def plugin_dir(self, driver_name: str) -> Path:
        """Where a DRA driver's own socket goes, as kubelet lays its root directory out."""
        return self.root_dir / "plugins" / driver_name

    @property
    def cri_socket(self) -> Path:
        return self.workdir / "cri.sock"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kubelet.log"

    def start(self) -> UpstreamKubelet:
        """Start the runtime, then kubelet; return once kubelet's health check answers.

        The Node is registered soon after; waiting for it to be Ready is the caller's, through
        the API server it already talks to.
        """
        binaries = upstream_binaries(build=False)
        self.root_dir.mkdir(parents=True, exist_ok=True)
        healthz_port = free_port()
        config_path = self.workdir / "kubelet.yaml"
        config = kubelet_configuration(
            cri_socket=self.cri_socket,
            port=free_port(),
            healthz_port=healthz_port,
            pod_logs_dir=self.workdir / "pod-logs",
            feature_gates=self.feature_gates,
        )
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.components["fakecri"] = Component(
            "fakecri",
            [str(binaries / "fakecri"), f"--listen=unix://{self.cri_socket}"],
            self.workdir / "fakecri.log",
        )
        working_dir = self.workdir / "kubelet-cwd"
        working_dir.mkdir(parents=True, exist_ok=True)
        self.components["kubelet"] = _ComponentIn(
            "kubelet",
            [
                str(binaries / "kubelet"),
                f"--config={config_path}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.root_dir}",
                f"--cert-dir={self.root_dir / 'pki'}",
                f"--hostname-override={self.node_name}",
                "--v=2",
            ],
            self.log_path,
            cwd=working_dir,
        )
        try:
            self.components["fakecri"].start()
            self._wait("fakecri", self.cri_socket.exists, f"socket {self.cri_socket}")
            self.components["kubelet"].start()
            url = f"http://127.0.0.1:{healthz_port}/healthz"
            self._wait("kubelet", lambda: _answers_ok(url), url)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, name: str, ready: Callable[[], bool], what: str) -> None:
        component = self.components[name]
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            component.check_alive()
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name}: no {what} within {START_TIMEOUT_S:g} s; log {component.log_path}"
                )
            time.sleep(0.1)

    def pid(self, name: str) -> int | None:
        process = self.components[name].process
        return process.pid if process is not None else None

    def stop(self) -> None:
        """Kubelet first, so that it does not see its runtime vanish and report the node down;
        then the bind mount it left on its root directory."""
        for name in ("kubelet", "fakecri"):
            component = self.components.get(name)
            if component is not None:
                with contextlib.suppress(OSError):
                    component.stop()
        root = str(self.root_dir.resolve())
        if root in mount_points():
            subprocess.run(["umount", root], check=False, capture_output=True)

    def __enter__(self) -> UpstreamKubelet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def running_as_root() -> bool:
    """Whether kubelet can start here at all (see the module docstring on the fixed log path)."""
    return os.geteuid() == 0


__all__ = ["UpstreamKubelet", "feature_gate_map", "kubelet_configuration", "running_as_root"]
