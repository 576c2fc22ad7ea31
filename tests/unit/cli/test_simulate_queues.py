"""`dra-driver simulate` with GpuQueues: pods wait in their queues, limits hold, reclaim evicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake import FakeBackend
from dra_driver.cli.main import main
from dra_driver.slices import SliceSettings, build_resource_slices
from tests.support import objects

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "deploy" / "examples" / "simulate" / "queues.yaml"
DRIVER = DEFAULT_DRIVER_NAME
CLASS = {
    "kind": "DeviceClass",
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
}


def slices(node: str, gpus: int) -> list[dict[str, Any]]:
    backend = FakeBackend.from_spec(f"H100-SXM5-80GB:{gpus}", node)
    return build_resource_slices(
        backend.inventory(), SliceSettings(shapes=frozenset({DeviceType.GPU}))
    )


def template(namespace: str) -> dict[str, Any]:
    return objects.template("one-gpu", objects.request("gpu", "gpu"), namespace=namespace)


def pod(
    namespace: str, name: str, arrival: float, departure: float | None = None, priority: int = 0
) -> dict[str, Any]:
    annotations = {"sim.dra-driver.dev/arrival": str(arrival)}
    if departure is not None:
        annotations["sim.dra-driver.dev/departure"] = str(departure)
    return objects.pod(
        name,
        templates={"gpu": "one-gpu"},
        namespace=namespace,
        annotations=annotations,
        containers=[{"name": "c"}],
        priority=priority,
    )


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu.dra-driver.dev/v1alpha1",
        "kind": "GpuQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]], *args: str
) -> str:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", "--input", str(path), *args]) == 0
    return capsys.readouterr().out


def run_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]]
) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(run(capsys, tmp_path, docs, "--output", "json"))
    return result


def base(gpus: int = 1) -> list[dict[str, Any]]:
    return [CLASS, *slices("n1", gpus), template("a"), template("b")]


def nodes(out: dict[str, Any]) -> dict[str, Any]:
    return {p["name"]: p["node"] for p in out["pods"]}


def by_queue(out: dict[str, Any]) -> dict[str, Any]:
    return {q["name"]: q for q in out["queues"]["queues"]}


def test_without_queues_a_pod_that_does_not_fit_is_refused_and_there_is_no_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = run_json(capsys, tmp_path, [*base(), pod("a", "first", 0, 10), pod("a", "late", 5)])
    assert nodes(out) == {"first": "n1", "late": None}
    assert "queues" not in out


def test_with_queues_it_waits_and_is_placed_when_room_frees(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [*base(), queue("qa", namespaces=["a"]), pod("a", "first", 0, 10), pod("a", "late", 5)]
    out = run_json(capsys, tmp_path, docs)
    assert nodes(out) == {"first": "n1", "late": "n1"}
    qa = by_queue(out)["qa"]
    assert qa["placed"] == 2 and qa["waitingAtEnd"] == 0
    assert qa["delaySeconds"] == {"p50": 0.0, "p99": 5.0, "max": 5.0}
    usage = [(row["time"], row["queues"]["qa"]["gpu"]) for row in out["queues"]["usage"]]
    assert usage == [(0.0, 1.0)]  # 10 s: one pod leaves, the other takes the GPU at once


def test_run_time_starts_at_placement(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`late` runs 5 s (arrival 5, departure 10) from its placement at 10 s: until 15 s."""
    docs = [
        *base(),
        queue("qa", namespaces=["a"]),
        pod("a", "first", 0, 10),
        pod("a", "late", 5, 10),
        pod("a", "third", 11),
    ]
    out = run_json(capsys, tmp_path, docs)
    # Delays: first 0 s, late 5 s (5 s to 10 s), third 4 s (11 s to 15 s, when late leaves).
    assert by_queue(out)["qa"]["delaySeconds"] == {"p50": 4.0, "p99": 5.0, "max": 5.0}


def test_a_limit_holds_pods_back_although_devices_are_free(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [
        *base(2),
        queue("qa", namespaces=["a"], limit={"gpu": 1}),
        pod("a", "one", 0),
        pod("a", "two", 1),
    ]
    out = run_json(capsys, tmp_path, docs)
    assert nodes(out) == {"one": "n1", "two": None}
    reason = next(p["reason"] for p in out["pods"] if p["name"] == "two")
    assert reason.startswith("still waiting in queue qa at the end: queue qa would pass its gpu")
    assert by_queue(out)["qa"]["waitingAtEnd"] == 1


def test_a_queue_below_its_guarantee_reclaims_borrowed_capacity(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [
        *base(2),
        queue("owed", namespaces=["a"], guaranteed={"gpu": 1}),
        queue("borrower", namespaces=["b"]),
        pod("b", "old", 0, 100),
        pod("b", "new", 1, 100),
        pod("a", "owed-pod", 10, 20),
    ]
    out = run_json(capsys, tmp_path, docs)
    report = out["queues"]
    # The newest borrowed pod goes; it comes back at once and waits for the owed pod to leave.
    assert report["evictions"] == [
        {
            "time": 10.0,
            "pod": "b/new",
            "queue": "borrower",
            "byPod": "a/owed-pod",
            "byQueue": "owed",
            "node": "n1",
        }
    ]
    assert report["reclaimedFrom"] == [{"queue": "owed", "from": "borrower", "pods": 1}]
    queues = by_queue(out)
    assert queues["owed"]["reclaimed"] == 1 and queues["borrower"]["evicted"] == 1
    assert queues["borrower"]["delaySeconds"]["max"] == 10.0  # back at 10 s, placed at 20 s
    assert nodes(out) == {"old": "n1", "new": "n1", "owed-pod": "n1"}


def test_reclaim_never_leaves_the_pod_waiting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [
        *base(1),
        queue("owed", namespaces=["a"], guaranteed={"gpu": 1}, reclaim="Never"),
        pod("b", "borrowing", 0),
        pod("a", "owed-pod", 1),
    ]
    out = run_json(capsys, tmp_path, docs)
    assert out["queues"]["evictions"] == []
    reason = next(p["reason"] for p in out["pods"] if p["name"] == "owed-pod")
    assert "reclaim policy is Never" in reason


def test_bad_queues_are_listed_and_their_namespaces_fall_to_the_default_queue(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [*base(), queue("orphan", parent="ghost", namespaces=["a"]), pod("a", "p", 0)]
    out = run_json(capsys, tmp_path, docs)
    assert out["queues"]["ignored"] == {
        "orphan": "GpuQueue orphan: spec.parent: GpuQueue ghost does not exist"
    }
    assert by_queue(out)["default"]["placed"] == 1


def test_the_text_output_has_the_queue_tables(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [
        *base(1),
        queue("owed", namespaces=["a"], guaranteed={"gpu": 1}),
        pod("b", "borrowing", 0),
        pod("a", "owed-pod", 1),
    ]
    text = run(capsys, tmp_path, docs)
    assert "QUEUE    PARENT  GUARANTEED" in text
    assert "1s    default/borrowing" not in text  # pods keep their namespace
    assert "b/borrowing  default  n1    a/owed-pod  owed" in text
    assert "TIME  owed GPUS  default GPUS" in text


def test_example_input_is_up_to_date() -> None:
    script = ROOT / "hack" / "make-simulate-queues-example.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_reclaims_for_training_and_inference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--output", "json", "--input", str(EXAMPLE)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queues"]["reclaimedFrom"] == [
        {"queue": "training", "from": "research", "pods": 2},
        {"queue": "inference", "from": "research", "pods": 1},
    ]
    assert all(p["node"] for p in out["pods"])


def gang_member(name: str, arrival: float, gpus: int) -> dict[str, Any]:
    """A pod of queue b's gang `trainers` of two, with a claim for `gpus` GPUs."""
    member = pod("b", name, arrival)
    member["metadata"]["labels"] = {f"{DRIVER}/gang": "trainers", f"{DRIVER}/gang-size": "2"}
    member["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": f"gpus-{gpus}"}
    ]
    return member


def gpus_template(gpus: int) -> dict[str, Any]:
    found = template("b")
    found["metadata"]["name"] = f"gpus-{gpus}"
    found["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = gpus
    return found


def two_lent_nodes(gpus: int) -> list[dict[str, Any]]:
    """Two nodes of 8 GPUs, all of them borrowed by queue a's 16 pods; then queue b's gang."""
    docs = [
        CLASS,
        *slices("n1", 8),
        *slices("n2", 8),
        template("a"),
        gpus_template(gpus),
        queue("lender", namespaces=["b"], guaranteed={"gpu": 16}),
        queue("borrower", namespaces=["a"]),
    ]
    docs += [pod("a", f"a{i:02d}", i) for i in range(16)]
    return [*docs, gang_member("t0", 20, gpus), gang_member("t1", 21, gpus)]


def test_a_waiting_gang_reclaims_room_for_every_member_across_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = run_json(capsys, tmp_path, two_lent_nodes(8))
    report = out["queues"]
    # The gang is complete at 21 s; each member needs a whole node: all 16 borrowed pods go.
    assert len(report["evictions"]) == 16
    assert {e["byPod"] for e in report["evictions"]} == {"gang b/trainers"}
    assert {e["time"] for e in report["evictions"]} == {21.0}
    placed = nodes(out)
    assert {placed["t0"], placed["t1"]} == {"n1", "n2"}
    assert by_queue(out)["borrower"]["evicted"] == 16


def test_a_gang_that_would_not_fit_after_reclaim_evicts_nothing_in_the_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = run_json(capsys, tmp_path, two_lent_nodes(9))  # no node has 9 GPUs
    assert out["queues"]["evictions"] == []
    reason = next(p["reason"] for p in out["pods"] if p["name"] == "t0")
    assert "even with every pod on borrowed capacity evicted" in reason
