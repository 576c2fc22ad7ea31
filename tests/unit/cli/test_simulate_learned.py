"""`simulate --workload learned`: each pod weighed by what the controller had learned before it.

A controller without `--workload-profile` counts every pod it decides and weighs by the counts
of its last refresh (dra_driver/simulation/workload_source.py), while `simulate` without
`--workload` weighs every pod by all the pods of its input. Here the controller's own decision
code (`controller.decide` over a `ClusterView`) decides the pods one at a time, and `simulate`
is given the same objects.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.decide import Decision, decide
from controller.informer import key_of
from controller.view import ClusterView
from dra_driver.allocator import AllocationMode
from dra_driver.backends.fake import FakeBackend
from dra_driver.cli.main import main
from dra_driver.simulation.workload_source import WorkloadSource
from dra_driver.slices import SliceSettings, build_resource_slices
from dra_driver.workload_profile import PROFILE_KEY, ProfileEntry, dump_profile, entry_of
from tests.support import objects
from tests.unit.controller.viewkit import DRIVER, put

GATE = f"{DRIVER}/allocation"
GPUS = "H100-SXM5-80GB:4"

PODS = [("p0", "4", 1), ("p1", "2", 1), ("p2", "4", 4), ("p3", "1", 1), ("p4", "1", 3)]
"""(name, CPU, GPUs) in creation order: small pods, then one that needs a whole node's GPUs."""


def _claim(name: str, gpus: int) -> dict[str, Any]:
    return objects.claim(f"{name}-gpu", objects.request("req", "gpu", gpus), uid=f"uid-{name}")


def _pod(name: str, cpu: str, created: str | None = None) -> dict[str, Any]:
    container = {"name": "main", "image": "i", "resources": {"requests": {"cpu": cpu}}}
    body = objects.pod(
        name, [f"{name}-gpu"], uid=f"uid-p-{name}", gates=[GATE], containers=[container]
    )
    if created is not None:
        body["metadata"]["creationTimestamp"] = created
    return body


def _cluster() -> list[dict[str, Any]]:
    """The gpu class, and two nodes of four H100 with 8 CPUs each."""
    docs = [objects.device_class("gpu", driver=DRIVER)]
    for name in ("n0", "n1"):
        docs.append(
            objects.node(
                name,
                labels={"kubernetes.io/hostname": name},
                ready=True,
                allocatable={"cpu": "8", "memory": "64Gi", "pods": "110"},
            )
        )
        inventory = FakeBackend.from_spec(GPUS, name).inventory()
        docs += build_resource_slices(inventory, SliceSettings())
    return docs


def _workload(
    shapes: list[tuple[str, str, int]] = PODS,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods of `shapes` (as `PODS`), in creation order, and their claims."""
    return [_pod(n, cpu) for n, cpu, _ in shapes], [_claim(n, gpus) for n, _, gpus in shapes]


def _kept(weights: dict[int, int]) -> list[ProfileEntry]:
    """A learned profile: GPUs asked → pods counted (of one CPU each)."""
    return [
        entry_of(_pod(f"k{gpus}", "1"), [_claim(f"k{gpus}", gpus)], count)
        for gpus, count in weights.items()
    ]


def _configmap(entries: list[ProfileEntry], name: str = "dra-workload") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {PROFILE_KEY: dump_profile(entries)},
    }


async def _controller(
    pods: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    kept: Sequence[ProfileEntry] = (),
    configured: Sequence[ProfileEntry] | None = None,
) -> dict[str, str | None]:
    """Where the controller's decisions put the pods, created one at a time: pod → node.
    `kept`: the counts its ConfigMap held; `configured`: its `--workload-profile`."""
    view = ClusterView(AllocationMode.SCORED, WorkloadSource(configured))
    for doc in _cluster():
        resource = {"DeviceClass": "deviceclasses", "Node": "nodes"}.get(doc["kind"])
        put(view, resource or "resourceslices", copy.deepcopy(doc))
    if kept:
        view.profile.restore(kept)  # as the store does when a term starts
    placed: dict[str, str | None] = {}
    for body, claim in zip(pods, claims, strict=True):
        put(view, "resourceclaims", copy.deepcopy(claim))
        put(view, "pods", copy.deepcopy(body))
        made = decide(view, [view.pods[key_of(body)]])
        name = body["metadata"]["name"]
        placed[name] = made.nodes.get(key_of(body)) if isinstance(made, Decision) else None
    return placed


def _simulate(
    capsys: pytest.CaptureFixture[str], path: Path, docs: list[dict[str, Any]], *args: str
) -> dict[str, str | None]:
    path.write_text(yaml.safe_dump_all(docs))
    capsys.readouterr()
    command = ["simulate", "--output", "json", "--mode", "scored", "--input", str(path)]
    assert main([*command, *args]) == 0
    return {p["name"]: p["node"] for p in json.loads(capsys.readouterr().out)["pods"]}


async def test_learned_weighting_places_pods_as_the_controller_where_the_whole_input_does_not(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods, claims = _workload()
    docs = _cluster() + claims + pods
    controller = await _controller(pods, claims)
    learned = _simulate(capsys, tmp_path / "in.yaml", docs, "--workload", "learned")
    assert learned == controller
    # Weighed by every pod of the input, simulate knows a four-GPU pod is coming and keeps a
    # node whole for it; the controller, having seen only one-GPU pods, spreads them, and the
    # four-GPU pod finds no room.
    whole = _simulate(capsys, tmp_path / "in.yaml", docs)
    assert whole["p2"] is not None and learned["p2"] is None
    assert whole != learned


async def test_learned_starts_from_the_controller_configmap_in_the_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The counts kept before the pods (the ConfigMap as it stood) are where learning starts."""
    pods, claims = _workload()
    kept = _kept({4: 6, 1: 2})
    docs = _cluster() + claims + pods
    path = tmp_path / "in.yaml"
    controller = await _controller(pods, claims, kept)
    learned = _simulate(capsys, path, [*docs, _configmap(kept)], "--workload", "learned")
    assert learned == controller
    # Those counts make a difference: learning from nothing places otherwise.
    assert learned != _simulate(capsys, path, docs, "--workload", "learned")
    # Given as a file, the same ConfigMap is a fixed profile: what a controller started with
    # `--workload-profile` of it does.
    (tmp_path / "kept.yaml").write_text(yaml.safe_dump(_configmap(kept)))
    fixed = _simulate(capsys, path, docs, "--workload", str(tmp_path / "kept.yaml"))
    assert fixed == await _controller(pods, claims, configured=kept)


async def test_learned_replays_pods_in_creation_order_whatever_the_file_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Creation time first, then name among pods created in the same second: the names here
    sort otherwise than the pods were created."""
    names = ["e", "f", "a", "b", "c"]
    stamps = ["2025-01-01T00:00:00Z"] * 2 + ["2025-01-01T00:00:01Z"] * 3
    pods = [
        _pod(name, cpu, stamp) for name, (_, cpu, _), stamp in zip(names, PODS, stamps, strict=True)
    ]
    claims = [_claim(name, gpus) for name, (_, _, gpus) in zip(names, PODS, strict=True)]
    controller = await _controller(pods, claims)
    listed = sorted(pods, key=lambda p: p["metadata"]["name"])  # as `kubectl get` lists them
    docs = _cluster() + claims + listed
    learned = _simulate(capsys, tmp_path / "in.yaml", docs, "--workload", "learned")
    assert list(learned) == names and learned == controller
    # Weighed by the whole input, the pods are decided in file order.
    assert list(_simulate(capsys, tmp_path / "in.yaml", docs)) == sorted(names)


async def test_a_pod_no_node_has_room_for_counts_as_a_placed_one_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """p1 asks for more CPU than a node has: the controller turns it away before any search,
    and counts it all the same, as `simulate` does (the weights p2 meets depend on it)."""
    pods, claims = _workload(
        [("p0", "1", 1), ("p1", "16", 1), ("p2", "4", 2), ("p3", "4", 1), ("p4", "4", 1)]
    )
    controller = await _controller(pods, claims)
    learned = _simulate(
        capsys, tmp_path / "in.yaml", _cluster() + claims + pods, "--workload", "learned"
    )
    assert learned["p1"] is None and learned == controller


def test_a_second_configmap_with_a_profile_is_refused_naming_both(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods, claims = _workload()
    kept = _kept({1: 1})
    docs = [*_cluster(), *claims, *pods, _configmap(kept, "a"), _configmap(kept, "b")]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*docs, other]))
    args = ["simulate", "--mode", "scored", "--input", str(path), "--workload", "learned"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "2 ConfigMaps hold data.profile.yaml (default/a, default/b)" in err
    # Other ConfigMaps are read by nothing: without `learned` the input is fine.
    assert main(args[:-2]) == 0


async def test_explain_pod_replays_the_learning_as_simulate_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods, claims = _workload()
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(_cluster() + claims + pods))
    base = ["explain", "--mode", "scored", "--input", str(path), "--pod", "default/p2"]
    assert main([*base, "--workload", "learned"]) == 0
    assert "not placed" in capsys.readouterr().out
    assert main(base) == 0
    assert "chosen" in capsys.readouterr().out


async def test_with_gpuqueues_the_learning_counts_each_pod_once_as_without(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Queued, a pod that does not fit waits and is decided again: it still counts once."""
    pods, claims = _workload()
    queue = {
        "apiVersion": "gpu.dra-driver.dev/v1alpha1",
        "kind": "GpuQueue",
        "metadata": {"name": "all"},
        "spec": {"namespaces": ["default"]},
    }
    docs = _cluster() + claims + pods
    learned = _simulate(capsys, tmp_path / "in.yaml", docs, "--workload", "learned")
    queued = _simulate(capsys, tmp_path / "q.yaml", [*docs, queue], "--workload", "learned")
    assert queued == learned
