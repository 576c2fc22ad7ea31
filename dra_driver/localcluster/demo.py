"""The end-to-end demo: example pods through the whole local cluster, and what each one got.

It is also a check: it exits non-zero unless every example pod was scheduled, prepared by the
kubelet plugin and released again after deletion (no MIG instance, CDI spec or checkpoint entry
left behind), so the README's first command proves the driver works, not only that it starts.
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
from dra_driver.localcluster.cluster import LocalCluster
from dra_driver.localcluster.roles.node_agent import PREPARE_ERROR_ANNOTATION, PREPARED_ANNOTATION

ENV_PREFIXES = ("DRA_", "CUDA_MPS_", "NVIDIA_", "CUDA_VISIBLE")


@dataclass
class PodReport:
    namespace: str
    name: str
    node: str | None = None
    prepared: dict[str, Any] | None = None
    error: str | None = None
    released: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.prepared is not None and self.released and not self.problems


def load_documents(paths: Sequence[Path]) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            documents.extend(d for d in yaml.safe_load_all(file.read_text()) if d)
    return documents


async def run_demo(
    examples: Sequence[Path],
    *,
    nodes: int,
    gpus: str,
    timeout_s: float,
    out: TextIO,
) -> int:
    documents = load_documents(examples)
    pods = [
        (d.get("metadata", {}).get("namespace") or "default", d["metadata"]["name"])
        for d in documents
        if d.get("kind") == "Pod"
    ]
    if not pods:
        print("no Pod in the examples: nothing to show", file=out)
        return 1
    async with LocalCluster(nodes=nodes, gpus=gpus) as cluster:
        print(f"local cluster: {nodes} node(s) x {gpus}, API server {cluster.server.url}", file=out)
        await cluster.wait_registered()
        cluster.apply(documents)
        reports = {key: PodReport(*key) for key in pods}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(
            r.prepared is not None for r in reports.values()
        ):
            await asyncio.to_thread(_read_pods, cluster, reports)
            await asyncio.sleep(0.2)  # polling what the roles write, with a deadline
        await asyncio.to_thread(_read_pods, cluster, reports)
        for report in reports.values():
            _print_pod(report, out)
        await _delete_and_check_release(cluster, reports, deadline=time.monotonic() + 30)
    failed = [r for r in reports.values() if not r.ok]
    print(file=out)
    if failed:
        for report in failed:
            why = "; ".join(report.problems) or report.error or "not prepared"
            print(f"FAILED {report.namespace}/{report.name}: {why}", file=out)
        return 1
    print(f"all {len(reports)} example pods got their devices and released them", file=out)
    return 0


def _read_pods(cluster: LocalCluster, reports: dict[tuple[str, str], PodReport]) -> None:
    assert cluster.dyn is not None
    resource = cluster.dyn.resources.get(api_version="v1", kind="Pod")
    for (namespace, name), report in reports.items():
        pod = resource.get(name=name, namespace=namespace).to_dict()
        annotations = pod["metadata"].get("annotations") or {}
        report.node = (pod.get("spec") or {}).get("nodeName")
        if PREPARED_ANNOTATION in annotations:
            report.prepared = json.loads(annotations[PREPARED_ANNOTATION])
        report.error = annotations.get(PREPARE_ERROR_ANNOTATION)
        if report.node is None:
            report.error = report.error or "not scheduled: no node has the devices it asks for"


def _print_pod(report: PodReport, out: TextIO) -> None:
    print(f"\npod {report.namespace}/{report.name}", file=out)
    print(f"  node: {report.node or '-'}", file=out)
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
    for node in cluster.nodes:
        gpus = FakeBackend.from_spec(cluster.gpus, node.name, state_dir=node.fake_state_dir)
        left = [gi for gpu in gpus.gpus for gi in gpus.gpu_instances(gpu.minor)]
        specs = sorted(p.name for p in node.cdi_root.glob("*.yaml"))
        if left or specs:
            for report in reports.values():
                if report.node == node.name:
                    report.problems.append(
                        f"{node.name} still has {len(left)} MIG instance(s) and "
                        f"{len(specs)} CDI spec(s) after every pod was released"
                    )
