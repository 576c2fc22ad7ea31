"""The end-to-end demo: example pods through the whole local cluster, and what each one got.

It is also a check: it exits non-zero unless every example pod got what it asked for and released
it again after deletion (no MIG instance or CDI spec left behind), so the README's first command
proves the driver works, not only that it starts. "Got what it asked for" is judged from the
outside: the claims' allocations must obey every rule of docs/allocation.md (the independent
checker re-evaluates classes, selectors, counts, constraints, counters and capacity against the
published slices), the devices the kubelet plugin prepared must be exactly the allocated ones on
the pod's node, and the container environment must name every one of them.

After the examples it runs a busy pod and an idle pod on whole GPUs with MIG mode off
(:mod:`localcluster.usage_scenario`) and fails unless the driver reports the idle one's GPU idle
in its claim's status and not the busy one's; the plugins' `--idle-after` is two seconds here,
so this adds a few seconds to the run.

The DeviceClasses come from :mod:`dra_driver.deviceclasses`, as the Helm chart's do, so the
examples in deploy/examples/ run unchanged here and on a cluster with the chart installed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from dra_driver.backends.fake import FakeBackend
from dra_driver.checker.rules import check_allocations
from dra_driver.controller_names import default_finalizer
from dra_driver.deviceclasses import device_classes
from dra_driver.pod_claims import claim_names
from kubeletplugin.prepare.container_edits import env_key
from localcluster.cluster import LocalCluster
from localcluster.defaults import DEFAULT_WATCH_HISTORY, DEMO_GPUS, DEMO_IDLE_AFTER_S
from localcluster.queue_scenario import two_teams
from localcluster.roles.node_agent import PREPARE_ERROR_ANNOTATION, PREPARED_ANNOTATION
from localcluster.usage_scenario import busy_and_idle

ENV_PREFIXES = ("DRA_", "CUDA_MPS_", "NVIDIA_", "CUDA_VISIBLE")


@dataclass
class PodReport:
    namespace: str
    name: str
    node: str | None = None
    allocated_by: str | None = None
    prepared: dict[str, Any] | None = None
    error: str | None = None
    released: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.prepared is not None and self.released and not self.problems


def example_files(paths: Sequence[Path]) -> list[Path]:
    """A directory stands for its own *.yaml files, not its subdirectories."""
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    return files


def load_documents(paths: Sequence[Path]) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for file in paths:
        documents.extend(d for d in yaml.safe_load_all(file.read_text()) if d)
    return documents


async def run_demo(
    examples: Sequence[Path],
    *,
    nodes: int,
    gpus: str,
    timeout_s: float,
    out: TextIO,
    watch_history: int = DEFAULT_WATCH_HISTORY,
    queues: bool = True,
    usage: bool = True,
    idle_after: float | None = None,
    control_plane: str | None = None,
) -> int:
    """Run the examples, then (with `usage`) the busy and idle pods, then (with `queues`) the
    two-team queue scenario on the same cluster. `idle_after` is the plugins' `--idle-after` in
    seconds (default `DEMO_IDLE_AFTER_S`)."""
    files = example_files(examples)
    documents = load_documents(files)
    pods = [
        (d.get("metadata", {}).get("namespace") or "default", d["metadata"]["name"])
        for d in documents
        if d.get("kind") == "Pod"
    ]
    if not pods:
        print("no Pod in the examples: nothing to show", file=out)
        return 1
    async with LocalCluster(
        nodes=nodes,
        gpus=gpus,
        watch_history=watch_history,
        idle_after=DEMO_IDLE_AFTER_S if idle_after is None else idle_after,
        plugin_metrics=usage,
        control_plane=control_plane,
    ) as cluster:
        shown = "eight H100, two with MIG mode off" if gpus == DEMO_GPUS else gpus
        print(
            f"local cluster: {nodes} node(s) x {shown}, {cluster.control_plane} control plane, "
            f"API server {cluster.url}",
            file=out,
        )
        await cluster.wait_registered()
        cluster.apply(device_classes(cluster.driver_name))
        cluster.apply(documents)
        reports = {key: PodReport(*key) for key in pods}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(
            r.prepared is not None for r in reports.values()
        ):
            await asyncio.to_thread(_read_pods, cluster, reports)
            await asyncio.sleep(0.2)  # polling what the roles write, with a deadline
        await asyncio.to_thread(_read_pods, cluster, reports)
        await asyncio.to_thread(_judge, cluster, reports)
        for report in reports.values():
            _print_pod(report, out)
        await _delete_and_check_release(cluster, reports, deadline=time.monotonic() + 30)
        await asyncio.to_thread(_delete_claims, cluster, documents)
        usage_problems = await busy_and_idle(cluster, out) if usage else None
        queue_problems = await two_teams(cluster, out) if queues else []
    failed = [r for r in reports.values() if not r.ok]
    print(file=out)
    for problem in usage_problems or []:
        print(f"FAILED usage: {problem}", file=out)
    for problem in queue_problems:
        print(f"FAILED queues: {problem}", file=out)
    if failed:
        for report in failed:
            why = "; ".join(report.problems) or report.error or "not prepared"
            print(f"FAILED {report.namespace}/{report.name}: {why}", file=out)
    if failed or queue_problems or usage_problems:
        return 1
    print(
        f"all {len(reports)} example pods got what they asked for and released it "
        f"({len(files)} example files)"
        + ("; the idle GPU was reported idle, the busy one not" if usage_problems == [] else "")
        + ("; the queues behaved" if queues else ""),
        file=out,
    )
    return 0


def _read_pods(cluster: LocalCluster, reports: dict[tuple[str, str], PodReport]) -> None:
    assert cluster.dyn is not None
    resource = cluster.dyn.resources.get(api_version="v1", kind="Pod")
    finalizer = default_finalizer(cluster.driver_name)
    by_controller = {
        (c["metadata"]["namespace"], c["metadata"]["name"])
        for c in _items(cluster, "resource.k8s.io/v1", "ResourceClaim")
        if finalizer in (c["metadata"].get("finalizers") or [])
    }
    for (namespace, name), report in reports.items():
        pod = resource.get(name=name, namespace=namespace).to_dict()
        names = claim_names(pod) or []
        if names and report.allocated_by is None and (pod.get("spec") or {}).get("nodeName"):
            ours = any((namespace, n) in by_controller for n in names)
            report.allocated_by = "controller (gated pod)" if ours else "scheduler"
        annotations = pod["metadata"].get("annotations") or {}
        report.node = (pod.get("spec") or {}).get("nodeName")
        if PREPARED_ANNOTATION in annotations:
            report.prepared = json.loads(annotations[PREPARED_ANNOTATION])
        report.error = annotations.get(PREPARE_ERROR_ANNOTATION)
        if report.node is None:
            report.error = report.error or "not scheduled: no node has the devices it asks for"


def _delete_claims(cluster: LocalCluster, documents: list[dict[str, Any]]) -> None:
    """The examples' own ResourceClaims go too, as `kubectl delete -f` would remove them: the
    scheduler's stand-in does not clear the allocation of a claim nobody reserves any more (the
    upstream claim controller does), so a shared claim would keep its GPU from the queues."""
    assert cluster.dyn is not None
    resource = cluster.dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
    for doc in documents:
        if doc.get("kind") == "ResourceClaim":
            meta = doc["metadata"]
            resource.delete(name=meta["name"], namespace=meta.get("namespace") or "default")


def _items(cluster: LocalCluster, api_version: str, kind: str) -> list[dict[str, Any]]:
    assert cluster.dyn is not None
    resource = cluster.dyn.resources.get(api_version=api_version, kind=kind)
    return list(resource.get().to_dict().get("items") or [])


def _judge(cluster: LocalCluster, reports: dict[tuple[str, str], PodReport]) -> None:
    """Whether each prepared pod got what its claims ask for; see the module docstring."""
    resource_api = "resource.k8s.io/v1"
    claims = _items(cluster, resource_api, "ResourceClaim")
    by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    violations = check_allocations(
        _items(cluster, resource_api, "ResourceSlice"),
        _items(cluster, resource_api, "DeviceClass"),
        claims,
        _items(cluster, "v1", "Node"),
    )
    broken: dict[str, list[str]] = {}
    for violation in violations:
        broken.setdefault(violation.claim or "", []).append(violation.message)
    pods = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p for p in _items(cluster, "v1", "Pod")
    }
    for key, report in reports.items():
        if report.prepared is None or key not in pods:
            continue
        env = report.prepared.get("env", {})
        for name in claim_names(pods[key]) or []:
            claim = by_key.get((report.namespace, name))
            allocation = ((claim or {}).get("status") or {}).get("allocation")
            if not allocation:
                report.problems.append(f"claim {name} is not allocated")
                continue
            report.problems.extend(broken.get(f"{report.namespace}/{name}", []))
            results = [
                r
                for r in (allocation.get("devices") or {}).get("results") or []
                if r.get("driver") == cluster.driver_name
            ]
            allocated = sorted((r["pool"], r["device"]) for r in results)
            devices = report.prepared.get("claims", {}).get(name, {}).get("devices", [])
            prepared = sorted((d["pool"], d["device"]) for d in devices)
            if prepared != allocated:
                report.problems.append(
                    f"claim {name}: prepared {prepared}, but the allocation is {allocated}"
                )
            if any(pool != report.node for pool, _ in allocated):
                report.problems.append(f"claim {name} is allocated on another node")
            missing = sorted({env_key(d) for _, d in allocated} - set(env))
            if missing:
                report.problems.append(f"the container environment lacks {', '.join(missing)}")
        if "CUDA_MPS_PIPE_DIRECTORY" in env and not _mps_daemon_runs(cluster, report.node):
            report.problems.append("its MPS clients have no control daemon on the node")


def _mps_daemon_runs(cluster: LocalCluster, node_name: str | None) -> bool:
    """Whether some MPS control daemon listens on the node (its `control` pipe exists)."""
    for node in cluster.nodes:
        if node.name == node_name:
            return any(node.state_dir.glob("mps/*/pipe/control"))
    return False


def _print_pod(report: PodReport, out: TextIO) -> None:
    print(f"\npod {report.namespace}/{report.name}", file=out)
    print(f"  node: {report.node or '-'}", file=out)
    if report.allocated_by:
        print(f"  allocated by: {report.allocated_by}", file=out)
    if report.prepared is None:
        print(f"  not prepared: {report.error or 'timed out'}", file=out)
        return
    for claim, entry in sorted(report.prepared.get("claims", {}).items()):
        for device in entry.get("devices", []):
            requests = ",".join(device.get("requests") or []) or "*"
            share = f" share {device['shareId']}" if device.get("shareId") else ""
            print(f"  claim {claim}: {requests} -> {device['device']}{share}", file=out)
    env = report.prepared.get("env", {})
    print("  environment:", file=out)
    for key in sorted(env):
        if key.startswith(ENV_PREFIXES):
            print(f"    {key}={env[key]}", file=out)


async def _delete_and_check_release(
    cluster: LocalCluster, reports: dict[tuple[str, str], PodReport], *, deadline: float
) -> None:
    """Delete the pods and wait until kubelet's stand-in has released them; then the node must
    be back to nothing: no MIG instances, no CDI specs, an empty checkpoint."""
    assert cluster.dyn is not None
    resource = cluster.dyn.resources.get(api_version="v1", kind="Pod")
    for namespace, name in reports:
        await asyncio.to_thread(resource.delete, name=name, namespace=namespace)
    remaining = set(reports)
    while remaining and time.monotonic() < deadline:
        listed = await asyncio.to_thread(resource.get)
        present = {
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in listed.to_dict().get("items") or []
        }
        remaining &= present
        if remaining:
            await asyncio.sleep(0.2)
    for key, report in reports.items():
        report.released = key not in remaining
        if not report.released:
            report.problems.append("its devices were not released within 30 s of deletion")
    # The controller must let go of what it allocated: its claims from templates then go with
    # their pods (garbage collection waits for its finalizer).
    finalizer = default_finalizer(cluster.driver_name)

    def held() -> list[str]:
        return [
            f"{c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in _items(cluster, "resource.k8s.io/v1", "ResourceClaim")
            if finalizer in (c["metadata"].get("finalizers") or [])
        ]

    still = await asyncio.to_thread(held)
    while still and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        still = await asyncio.to_thread(held)
    for report in reports.values():
        if report.allocated_by and report.allocated_by.startswith("controller") and still:
            report.problems.append(
                f"the controller still holds claim(s) {', '.join(still)} after the pods left"
            )
    for node in cluster.nodes:
        gpus = FakeBackend.from_spec(cluster.gpus, node.name, state_dir=node.fake_state_dir)
        left = [gi for gpu in gpus.gpus for gi in gpus.gpu_instances(gpu.minor)]
        specs = sorted(p.name for p in node.cdi_root.glob("*.yaml"))
        daemons = sorted(p.parent.parent.name for p in node.state_dir.glob("mps/*/pipe/control"))
        if left or specs or daemons:
            for report in reports.values():
                if report.node == node.name:
                    report.problems.append(
                        f"{node.name} still has {len(left)} MIG instance(s), "
                        f"{len(specs)} CDI spec(s) and {len(daemons)} MPS daemon(s) after every "
                        "pod was released"
                    )
