"""The controller places gated pods where `dra-driver simulate --mode scored` puts them.

Both run the shared pod placer (`dra_driver.simulation.replay.Cluster`): the controller over its
watch-fed view, `simulate` over a file of the same objects. Pods are created one at a time, each
after the last was decided, which is the order `simulate` replays them in. Both weigh by the same
workload: a configured profile (the controller's `--workload-profile`, simulate's `--workload
FILE`), or the one the controller learns by default, which `simulate --workload learned` replays
pod by pod.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.reconciler import condition_type
from dra_driver.allocator.result import allocation_node
from dra_driver.cli.main import main
from dra_driver.workload_profile import PROFILE_KEY, ProfileEntry, dump_profile, entry_of
from tests.integration.allocation.harness import (
    DRIVER,
    GROUP,
    VERSION,
    Cluster,
    eventually,
    pod,
    start_controller,
)
from tests.support import objects

ALLOCATABLE = {"cpu": "64", "memory": "512Gi", "pods": "110"}

SHARE = "shared.dra-driver.dev"
WHOLE = "gpu.dra-driver.dev"


def _request(kind: str) -> dict[str, Any]:
    if kind.startswith("share"):
        compute = kind.removeprefix("share")
        memory = "8Gi" if compute == "25" else "16Gi"
        return objects.request(
            "gpu", SHARE, capacity={"requests": {"compute": compute, "memory": memory}}
        )
    return objects.request("gpu", WHOLE, int(kind.removeprefix("gpu")))


def workload(
    seed: int, counts: tuple[int, int, int, int] = (10, 8, 9, 7)
) -> list[tuple[str, str, str]]:
    """(name, device shape, CPU) of the pods, in creation order: `counts` of shares of 25 and 50
    compute, one and two whole GPUs, 1 to 32 CPUs; more than the 24 GPUs hold, so the last
    wait."""
    rng = random.Random(seed)
    kinds = [
        kind
        for kind, count in zip(("share25", "share50", "gpu1", "gpu2"), counts, strict=True)
        for _ in range(count)
    ]
    rng.shuffle(kinds)
    cpus = ["1", "2", "4", "8", "16", "32"]
    return [(f"p{i:02d}", kind, rng.choice(cpus)) for i, kind in enumerate(kinds)]


def _pod(name: str, cpu: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {"requests": {"cpu": cpu, "memory": f"{int(cpu) * 4}Gi"}},
    }
    return pod(name, [f"{name}-gpu"], containers=[container])


def _decided(cluster: Cluster, name: str) -> bool:
    """The gate is off, or the pod says why it waits."""
    body = cluster.get_pod(name)
    gates = body["spec"].get("schedulingGates") or []
    if not gates:
        return True
    return any(
        c["type"] == condition_type(DRIVER) and c["status"] == "False"
        for c in (body.get("status") or {}).get("conditions") or []
    )


def _profile(pods: list[dict[str, Any]], claims: dict[str, dict[str, Any]]) -> list[ProfileEntry]:
    counts: Counter[str] = Counter()
    first: dict[str, ProfileEntry] = {}
    for body in pods:
        entry = entry_of(body, [claims[body["metadata"]["name"]]])
        counts[entry.key] += 1
        first.setdefault(entry.key, entry)
    return [ProfileEntry(e.requests, e.claims, counts[k]) for k, e in first.items()]


def _plain(obj: Any) -> dict[str, Any]:
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k in ("name", "namespace", "labels", "annotations")
    }
    return {**{k: v for k, v in obj.items() if k not in ("metadata", "status")}, "metadata": meta}


def _simulate(
    capsys: pytest.CaptureFixture[str], path: Path, mode: str, *extra: str
) -> dict[str, str | None]:
    capsys.readouterr()  # what the controller logged
    assert main(["simulate", "--output", "json", "--mode", mode, "--input", str(path), *extra]) == 0
    out = json.loads(capsys.readouterr().out)
    return {p["name"]: p["node"] for p in out["pods"]}


def _mixed(
    seed: int, counts: tuple[int, int, int, int] = (10, 8, 9, 7)
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The pods of `workload`, in creation order, and pod name → its claim."""
    pods: list[dict[str, Any]] = []
    claims: dict[str, dict[str, Any]] = {}
    for name, kind, cpu in workload(seed, counts):
        claims[name] = objects.claim(f"{name}-gpu", _request(kind))
        pods.append(_pod(name, cpu))
    return pods, claims


async def _place_one_at_a_time(
    cluster: Cluster,
    api: client.ApiClient,
    pods: list[dict[str, Any]],
    claims: dict[str, dict[str, Any]],
    **settings: Any,
) -> dict[str, str | None]:
    """Start a controller with `settings`, create the pods one at a time, each once the last
    was decided, and stop it: pod name → the node its claim was allocated on (None: waits)."""
    running = await start_controller(api, settle_s=0.05, **settings)
    try:
        for body in pods:
            name = body["metadata"]["name"]
            cluster.create_claim(claims[name])
            cluster.create_pod(body)
            await eventually(lambda n=name: _decided(cluster, n), what=f"pod {name} decided")
    finally:
        await running.shutdown()
    placed: dict[str, str | None] = {}
    for body in pods:
        name = body["metadata"]["name"]
        allocation = (cluster.get_claim(f"{name}-gpu").get("status") or {}).get("allocation")
        placed[name] = None if allocation is None else allocation_node(allocation)
    return placed


def _cluster_docs(cluster: Cluster) -> list[dict[str, Any]]:
    """The classes, slices and nodes as the API server holds them, ready for `simulate`."""
    docs: list[dict[str, Any]] = []
    for plural in ("deviceclasses", "resourceslices"):
        found: Any = cluster.objects.list_cluster_custom_object(GROUP, VERSION, plural)
        docs += [{"kind": found["kind"].removesuffix("List"), **_plain(o)} for o in found["items"]]
    for node in cluster.core.list_node().items:
        body = cluster.api.sanitize_for_serialization(node)
        docs.append({"kind": "Node", **_plain(body), "status": body["status"]})
    return docs


async def test_gated_pods_land_where_simulate_scored_puts_them(
    cluster: Cluster, api: client.ApiClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.add_nodes(3, allocatable=ALLOCATABLE)
    pods, claims = _mixed(seed=7)
    profile = _profile(pods, claims)
    placed = await _place_one_at_a_time(cluster, api, pods, claims, workload_profile=tuple(profile))

    docs = _cluster_docs(cluster)
    docs += [claims[b["metadata"]["name"]] for b in pods] + pods
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "profile.yaml").write_text(dump_profile(profile))

    predicted = _simulate(
        capsys, tmp_path / "cluster.yaml", "scored", "--workload", str(tmp_path / "profile.yaml")
    )
    assert placed == predicted
    waiting = [name for name, node in placed.items() if node is None]
    assert waiting, "the workload must overflow the cluster so that some pods wait"
    # Without --workload simulate weighs by the input's pods: the same profile here.
    assert _simulate(capsys, tmp_path / "cluster.yaml", "scored") == predicted
    # The workload tells placements apart: first fit puts pods elsewhere.
    first_fit = _simulate(capsys, tmp_path / "cluster.yaml", "first-fit")
    assert sum(first_fit[n] != predicted[n] for n in predicted) >= 5


STORE = "dra-workload"
"""The ConfigMap the controller keeps its learned profile in (the CLI's default is
`<lease name>-workload`; any name does here)."""


@pytest.mark.parametrize("kept", [False, True], ids=["learning-from-nothing", "kept-profile"])
async def test_the_default_controller_places_pods_where_simulate_learned_puts_them(
    cluster: Cluster,
    api: client.ApiClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kept: bool,
) -> None:
    """No profile configured: the controller learns the workload from the pods it decides, and
    weighs each pod by the counts of its last refresh. `--workload learned` replays that from
    the objects alone, the pods in creation order (listed here newest first), starting from the
    counts of the controller's ConfigMap when the input holds it (as it was before the pods)."""
    cluster.add_nodes(3, allocatable=ALLOCATABLE)
    pods, claims = _mixed(seed=1, counts=(8, 7, 9, 6))
    before: list[dict[str, Any]] = []
    if kept:
        # What an earlier leader learned and kept.
        earlier = [
            entry_of(_pod("k1", "2"), [objects.claim("k1-gpu", _request("share25"))], 24),
            entry_of(_pod("k2", "32"), [objects.claim("k2-gpu", _request("gpu1"))], 8),
        ]
        cluster.core.create_namespaced_config_map(
            "default",
            {"metadata": {"name": STORE}, "data": {PROFILE_KEY: dump_profile(earlier)}},
        )
        stored = cluster.api.sanitize_for_serialization(
            cluster.core.read_namespaced_config_map(STORE, "default")
        )
        before = [{"kind": "ConfigMap", **_plain(stored)}]
    placed = await _place_one_at_a_time(cluster, api, pods, claims, workload_configmap=STORE)
    assert any(node is None for node in placed.values()), "some pods must wait"

    # The pods as created, with the creation time the API server gave each (to the second).
    listed = []
    for body in pods:
        stamp = cluster.get_pod(body["metadata"]["name"])["metadata"]["creationTimestamp"]
        listed.append({**body, "metadata": {**body["metadata"], "creationTimestamp": stamp}})
    docs = _cluster_docs(cluster) + before + [claims[b["metadata"]["name"]] for b in pods]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(docs + listed[::-1]))

    predicted = _simulate(capsys, tmp_path / "cluster.yaml", "scored", "--workload", "learned")
    assert predicted == placed

    if kept:
        # Learning from nothing instead, some pods go elsewhere: the kept counts mattered.
        rest = [d for d in docs if d["kind"] != "ConfigMap"]
        (tmp_path / "fresh.yaml").write_text(yaml.safe_dump_all(rest + listed[::-1]))
        assert (
            _simulate(capsys, tmp_path / "fresh.yaml", "scored", "--workload", "learned") != placed
        )
    else:
        # Weighed by every pod of the input at once, as simulate does without --workload, some
        # pods go elsewhere: what --workload learned is for.
        (tmp_path / "in-order.yaml").write_text(yaml.safe_dump_all(docs + listed))
        whole = _simulate(capsys, tmp_path / "in-order.yaml", "scored")
        assert whole != placed
