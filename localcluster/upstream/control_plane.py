"""The real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, each its own process, from the binaries `hack/upstream.sh` builds.

Test and demo infrastructure only. It exists so that what the project claims about Kubernetes is
shown against Kubernetes itself, not only against the embedded server written here: validation
and defaulting, CEL at admission, RBAC, the resourceclaim controller, the garbage collector and
kube-scheduler's DynamicResources plugin all run as upstream wrote them.

Identities: the administrator (`system:masters`), kube-controller-manager and kube-scheduler
authenticate with static bearer tokens (the controller manager's controllers then use their own
ServiceAccounts, as kubeadm sets it up). The driver's daemons get ServiceAccount tokens through
the TokenRequest API (see `identities.py`).

What differs from a production cluster, on purpose: everything listens on 127.0.0.1 only; etcd
skips fsync (its data dies with the directory); the ServiceAccount admission plugin is off, so
pods in a namespace created a moment ago need not wait for its `default` ServiceAccount (the
harness runs no containers, so nothing would use the token volume it adds).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from localcluster.upstream.binaries import upstream_binaries
from localcluster.upstream.pki import Pki, make_pki

#: The feature gates of the resource.k8s.io/v1 features the driver publishes for (partitionable
#: devices with shared counters, consumable capacity for shares, device taints); on by default
#: from 1.36, named so the cluster says what it relies on.
DRA_FEATURE_GATES = "DRAPartitionableDevices=true,DRAConsumableCapacity=true,DRADeviceTaints=true"

#: The issuer of service-account tokens, also their default audience.
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"

#: How long a component may take to answer its health check after it starts (seconds). A cold
#: 2-core machine needs about 15 s for kube-apiserver; the bound keeps a broken start from hanging.
START_TIMEOUT_S = 120.0


class ControlPlaneError(RuntimeError):
    """A component did not start; names it and the end of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                self.argv, stdout=log_file, stderr=log_file, stdin=subprocess.DEVNULL
            )

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.process.returncode}; log {self.log_path}:\n"
                + _tail(self.log_path)
            )

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


PORT_ATTEMPTS = 3
_PORT_TAKEN = re.compile(r"listen tcp 127\.0\.0\.1:(\d+): bind: address already in use")


def _port_taken(log: Path) -> int | None:
    """The port a component could not bind, from its log; None when that is not why it failed."""
    found = _PORT_TAKEN.findall(_tail(log, 50))
    return int(found[-1]) if found else None


def _swap_port(text: str, old: int, new: int) -> str:
    return re.sub(rf"(?<=[:=]){old}\b", str(new), text)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class UpstreamControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler under `workdir`."""

    workdir: Path
    scheduler_config: dict[str, Any] | None = None
    controller_manager_args: tuple[str, ...] = ()
    #: kube-controller-manager's `--controllers`; None runs its defaults (`*`).
    controllers: tuple[str, ...] | None = None
    #: Whether kube-scheduler runs (an API server on its own for API-level tests has none).
    scheduler: bool = True
    #: Whether a new Node gets the `node.kubernetes.io/not-ready` taint (the TaintNodesByCondition
    #: admission plugin); only the node lifecycle controller takes it off again.
    taint_new_nodes: bool = True
    components: dict[str, Component] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    port: int = 0
    pki: Pki | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def kubeconfig(self, token: str | None = None, user: str = "admin") -> dict[str, Any]:
        """A kubeconfig (as a dict) for `token`, the administrator's when None."""
        assert self.pki is not None, "the control plane is not started"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(self.pki.ca_cert),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token or self.tokens["admin"]}}],
            "contexts": [
                {
                    "name": "local",
                    "context": {"cluster": "local", "user": user, "namespace": "default"},
                }
            ],
            "current-context": "local",
        }

    def write_kubeconfig(
        self, path: str | Path, token: str | None = None, user: str = "admin"
    ) -> Path:
        """Write `kubeconfig(token, user)` to `path` (parents created) and return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(self.kubeconfig(token, user), sort_keys=False))
        target.chmod(0o600)
        return target

    def configuration(self) -> client.Configuration:
        """The administrator's client settings (TLS checked against the cluster's CA)."""
        return kubeconfig_configuration(self.admin_kubeconfig)

    def api_client(self) -> client.ApiClient:
        return client.ApiClient(self.configuration())

    def start_blocking(self) -> UpstreamControlPlane:
        """`start` for callers without an event loop (or inside one: it runs in a thread)."""
        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self.start())
            except BaseException as error:  # handed to the caller below
                failure.append(error)

        thread = threading.Thread(target=run, name="control-plane-start")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return self

    def __enter__(self) -> UpstreamControlPlane:
        return self.start_blocking()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def start(self) -> None:
        binaries = await asyncio.to_thread(upstream_binaries, build=False)
        self.port = free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = pki = await asyncio.to_thread(make_pki, self.workdir / "pki")
        users = {
            "admin": ("admin", "system:masters"),
            "kube-controller-manager": ("system:kube-controller-manager", ""),
            "kube-scheduler": ("system:kube-scheduler", ""),
        }
        lines = []
        for key, (user, groups) in users.items():
            token = self.tokens[key] = secrets.token_hex(16)
            lines.append(
                f'{token},{user},{user},"{groups}"' if groups else f"{token},{user},{user}"
            )
        token_file = self.workdir / "tokens.csv"
        token_file.write_text("\n".join(lines) + "\n")
        token_file.chmod(0o600)
        self.write_kubeconfig(self.admin_kubeconfig)
        kcm_config = self.write_kubeconfig(
            self.workdir / "kcm.kubeconfig", self.tokens["kube-controller-manager"], "kcm"
        )
        sched_config = self.write_kubeconfig(
            self.workdir / "scheduler.kubeconfig", self.tokens["kube-scheduler"], "scheduler"
        )

        etcd_port, etcd_peer = free_port(), free_port()
        kcm_port, sched_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{etcd_peer}"
        self._add(
            "etcd",
            [
                str(binaries / "etcd"),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ],
        )
        self._add(
            "kube-apiserver",
            [
                str(binaries / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The `kubernetes` Service's endpoints would name a loopback address, which
                # the reconciler refuses; nothing in the harness reaches the API server that way.
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={token_file}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--disable-admission-plugins="
                + ",".join(
                    (
                        "ServiceAccount",
                        *(() if self.taint_new_nodes else ("TaintNodesByCondition",)),
                    )
                ),
                f"--feature-gates={DRA_FEATURE_GATES}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                "--v=1",
            ],
        )
        self._add(
            "kube-controller-manager",
            [
                str(binaries / "kube-controller-manager"),
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--leader-elect=false",
                f"--feature-gates={DRA_FEATURE_GATES}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--v=1",
                f"--controllers={','.join(self.controllers or ('*',))}",
                *self.controller_manager_args,
            ],
        )
        scheduler_args = [
            str(binaries / "kube-scheduler"),
            f"--authentication-kubeconfig={sched_config}",
            f"--authorization-kubeconfig={sched_config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={sched_port}",
            f"--cert-dir={self.workdir / 'scheduler-certs'}",
            f"--feature-gates={DRA_FEATURE_GATES}",
            "--v=1",
        ]
        config = self.scheduler_config or {}
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            **config,
            "clientConnection": {"kubeconfig": str(sched_config), "qps": 200, "burst": 400},
        }
        config_path = self.workdir / "scheduler.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        scheduler_args.append(f"--config={config_path}")
        self._add("kube-scheduler", scheduler_args)

        try:
            self.components["etcd"].start()
            await self._healthy("etcd", f"{etcd_url}/health", tls=False)
            self.components["kube-apiserver"].start()
            await self._healthy("kube-apiserver", f"{self.url}/readyz", tls=True)
            self.components["kube-controller-manager"].start()
            if self.scheduler:
                self.components["kube-scheduler"].start()
            await self._healthy(
                "kube-controller-manager", f"https://127.0.0.1:{kcm_port}/healthz", tls=None
            )
            if self.scheduler:
                await self._healthy(
                    "kube-scheduler", f"https://127.0.0.1:{sched_port}/readyz", tls=None
                )
        except BaseException:
            self.stop()
            raise

    async def _healthy(self, name: str, url: str, *, tls: bool | None) -> None:
        """`_wait_healthy` for a started component, which is started again on another port
        when the one picked for it was taken before it could bind it: `free_port` only finds
        a port free at that moment, and the tests beside it open connections all the time, one
        of which the kernel may give that very port. Every component naming the port (the API
        server names etcd's) is given the new one."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                await self._wait_healthy(name, url, tls=tls)
                return
            except ControlPlaneError:
                component = self.components[name]
                taken = _port_taken(component.log_path)
                if taken is None or attempt == PORT_ATTEMPTS:
                    raise
                component.stop()
                port = free_port()
                for each in self.components.values():
                    each.argv = [_swap_port(arg, taken, port) for arg in each.argv]
                url = _swap_port(url, taken, port)
                if self.port == taken:  # the API server's: the kubeconfigs written name it
                    self.port = port
                    for written in self.workdir.glob("*.kubeconfig"):
                        written.write_text(_swap_port(written.read_text(), taken, port))
                component.start()

    def _add(self, name: str, argv: list[str]) -> None:
        self.components[name] = Component(name, argv, self.workdir / f"{name}.log")

    async def _wait_healthy(self, name: str, url: str, *, tls: bool | None) -> None:
        """Until `url` answers 200; `tls` True checks the cluster CA and sends the admin token,
        None accepts the component's self-signed certificate (its health paths need no login)."""
        component = self.components[name]
        context: ssl.SSLContext | None = None
        headers = {}
        if tls is True:
            assert self.pki is not None
            context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
            headers["Authorization"] = f"Bearer {self.tokens['admin']}"
        elif tls is None:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + START_TIMEOUT_S
        last = "no answer yet"
        while time.monotonic() < deadline:
            component.check_alive()
            try:
                status = await asyncio.to_thread(_get_status, url, headers, context)
                if status == 200:
                    return
                last = f"HTTP {status}"
            except (OSError, urllib.error.URLError) as error:
                last = str(error)
            await asyncio.sleep(0.2)
        raise ControlPlaneError(
            f"{name} not healthy within {START_TIMEOUT_S:g} s ({url}: {last}); log "
            f"{component.log_path}:\n{_tail(component.log_path)}"
        )

    def pid(self, name: str) -> int | None:
        process = self.components[name].process
        return process.pid if process is not None else None

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            component = self.components.get(name)
            if component is not None:
                with contextlib.suppress(OSError):
                    component.stop()


def _get_status(url: str, headers: dict[str, str], context: ssl.SSLContext | None) -> int:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code


def kubeconfig_configuration(path: Path) -> client.Configuration:
    """Client settings from a kubeconfig file (token and CA included)."""
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), client_configuration=configuration
    )
    return configuration


def kubeconfig_client(path: Path) -> client.ApiClient:
    return client.ApiClient(kubeconfig_configuration(path))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (Linux /proc), for benchmarks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


__all__ = [
    "DRA_FEATURE_GATES",
    "SERVICE_ACCOUNT_ISSUER",
    "ControlPlaneError",
    "UpstreamControlPlane",
    "cpu_seconds",
    "free_port",
    "kubeconfig_client",
]
