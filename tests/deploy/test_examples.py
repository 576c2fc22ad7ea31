"""The examples in deploy/examples are valid Kubernetes objects for every supported version, and
the ones the local demo leaves out are exactly those that wait for the allocation controller. The
queue examples, in their own directory so the demo does not apply them, are trees the controller
accepts whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from controller.config import default_gang_label, default_gang_size_label, default_gate
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.queues import GROUP, KIND, VERSION, QueueTree
from tests.deploy.chart import KUBE_VERSIONS, ROOT

EXAMPLES = ROOT / "deploy" / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))
GATE = default_gate(DEFAULT_DRIVER_NAME)
QUEUE_FILES = sorted((EXAMPLES / "queues").glob("*.yaml"))


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_example_validates_strictly(kube_version: str) -> None:
    assert len(FILES) >= 11
    for path in FILES:
        assert path.read_text().startswith("# "), f"{path.name}: starts without a comment header"
        for doc in _documents(path):
            try:
                kubernetes_validate.validate(doc, kube_version, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']}: {err.message}")


def test_gated_examples_exist_for_the_controller() -> None:
    gated = {
        path.name
        for path in FILES
        for doc in _documents(path)
        if doc["kind"] == "Pod"
        and any(g["name"] == GATE for g in doc["spec"].get("schedulingGates") or [])
    }
    assert gated == {"gated-pod.yaml", "gang.yaml"}


def test_gang_pods_carry_the_controllers_labels() -> None:
    pods = [d for d in _documents(EXAMPLES / "gang.yaml") if d["kind"] == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert labels[default_gang_label(DEFAULT_DRIVER_NAME)] == "trainers"
        assert labels[default_gang_size_label(DEFAULT_DRIVER_NAME)] == "2"


def test_object_names_are_unique_across_examples() -> None:
    seen: dict[tuple[str, str], str] = {}
    for path in FILES:
        for doc in _documents(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in seen, f"{key} is in both {seen[key]} and {path.name}"
            seen[key] = path.name


@pytest.mark.parametrize("path", QUEUE_FILES, ids=lambda p: p.name)
def test_queue_examples_are_accepted_whole(path: Path) -> None:
    assert path.read_text().startswith("# "), f"{path.name}: starts without a comment header"
    docs = _documents(path)
    assert docs and all((d["apiVersion"], d["kind"]) == (f"{GROUP}/{VERSION}", KIND) for d in docs)
    tree = QueueTree.build(docs)
    assert tree.problems == {}
    assert set(tree.queues) == {d["metadata"]["name"] for d in docs} | {tree.default}


def test_queue_examples_show_a_flat_pair_and_a_tree() -> None:
    assert [p.name for p in QUEUE_FILES] == ["organisation.yaml", "two-teams.yaml"]
    tree = QueueTree.build(_documents(EXAMPLES / "queues" / "organisation.yaml"))
    assert sorted(tree.children("research")) == ["nlp", "vision"]
    assert tree.queue_for("nlp-eval") == "nlp"
    assert tree.queue_for("elsewhere") == tree.default
    flat = QueueTree.build(_documents(EXAMPLES / "queues" / "two-teams.yaml"))
    assert all(spec.parent is None for spec in flat.queues.values())
