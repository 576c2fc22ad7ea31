"""`dra-driver simulate` with Pods in the file: node CPU and memory as well as devices decide."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.checker.rules import check_allocations
from dra_driver.cli import simulate as simulate_cli
from dra_driver.cli.main import main
from dra_driver.noderesources import CPU, MEMORY, node_allocatable, pod_requests
from dra_driver.simulation.workload import Workload
from tests.support import objects, trace_inputs
from tests.support.trace_inputs import sim_pod as pod

DRV = "gpu.example.com"
CLASS = {
    "kind": "DeviceClass",
    "metadata": {"name": "any"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRV}"'}}]},
}
SPEC = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "any"}}]}}
TEMPLATE = {
    "kind": "ResourceClaimTemplate",
    "metadata": {"namespace": "ns", "name": "one-gpu"},
    "spec": {"spec": SPEC},
}


def node_slice(node: str, devices: int) -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-slice"},
        "spec": {
            "driver": DRV,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def node(name: str, cpu: str, memory: str = "8Gi") -> dict[str, Any]:
    return objects.node(name, allocatable={"cpu": cpu, "memory": memory, "pods": "110"})


def claim(name: str) -> dict[str, Any]:
    return objects.claim(name, *SPEC["devices"]["requests"], namespace="ns")


def simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]], *args: str
) -> dict[str, Any]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", "--output", "json", "--input", str(path), *args]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def pods_by_name(out: dict[str, Any]) -> dict[str, Any]:
    return {p["name"]: p for p in out["pods"]}


@pytest.mark.parametrize("mode", ["first-fit", "scored"])
def test_pods_with_a_template_claim_and_a_direct_claim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mode: str
) -> None:
    docs = [
        CLASS,
        TEMPLATE,
        node_slice("n1", 2),
        node("n1", "4"),
        claim("direct"),
        claim("loose"),
        pod("with-template", "1", claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
        pod("with-claim", "1", claims=[{"name": "gpu", "resourceClaimName": "direct"}]),
    ]
    out = simulate(capsys, tmp_path, docs, "--mode", mode)
    # The claim no pod uses is allocated first, as without pods; it takes one of the two GPUs.
    assert out["claims"][0]["name"] == "loose" and out["claims"][0]["allocated"]
    pods = pods_by_name(out)
    assert pods["with-template"] == {
        "namespace": "ns",
        "name": "with-template",
        "node": "n1",
        "reason": None,
    }
    # Only one GPU is left after "loose" and the template pod: the direct claim finds none.
    assert pods["with-claim"]["node"] is None
    assert "claims do not fit" in pods["with-claim"]["reason"]
    names = [c["name"] for c in out["claims"]]
    assert names[1].startswith("with-template-gpu-") and names[2] == "direct"
    made = out["claims"][1]
    assert made["node"] == "n1" and made["allocated"]
    assert not out["claims"][2]["allocated"] and out["claims"][2]["node"] is None
    assert "with-claim" in out["claims"][2]["reason"]


def test_a_pod_claim_is_allocated_with_its_pod_not_before(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [
        CLASS,
        node_slice("n1", 1),
        node_slice("n2", 1),
        node("n1", "1"),
        node("n2", "4"),
        claim("direct"),
        pod("p", "2", claims=[{"name": "gpu", "resourceClaimName": "direct"}]),
    ]
    out = simulate(capsys, tmp_path, docs)
    # Allocated on its own the claim would take n1's GPU; with its pod it must go where the
    # pod's 2 cpu fit.
    (only,) = out["claims"]
    assert only["name"] == "direct" and only["node"] == "n2"
    assert out["pods"] == [{"namespace": "ns", "name": "p", "node": "n2", "reason": None}]


def test_cpu_only_pod_is_placed_and_counted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [node("n1", "2"), node("n2", "2"), pod("a", "1500m"), pod("b", "1500m")]
    out = simulate(capsys, tmp_path, docs)
    assert out["claims"] == []
    assert [(p["name"], p["node"]) for p in out["pods"]] == [("a", "n1"), ("b", "n2")]


def test_pod_that_fits_nowhere_for_cpu_names_cpu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [CLASS, TEMPLATE, node_slice("n1", 4), node("n1", "2"), node("n2", "1")]
    docs.append(pod("big", "3", claims=[{"name": "g", "resourceClaimTemplateName": "one-gpu"}]))
    out = simulate(capsys, tmp_path, docs)
    (big,) = out["pods"]
    assert big["node"] is None
    assert "insufficient cpu" in big["reason"] and "memory" not in big["reason"]
    (made,) = out["claims"]
    assert not made["allocated"] and made["node"] is None


def test_departure_frees_room_for_a_later_pod(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gpu = [{"name": "g", "resourceClaimTemplateName": "one-gpu"}]
    docs = [
        CLASS,
        TEMPLATE,
        node_slice("n1", 1),
        node("n1", "4"),
        # File order is not arrival order: "late" arrives after "first" has left.
        pod("late", "3", claims=gpu, arrival=20),
        pod("first", "3", claims=gpu, arrival=0, departure=10),
        pod("blocked", "3", claims=gpu, arrival=5),
    ]
    out = simulate(capsys, tmp_path, docs)
    assert [(p["name"], p["node"]) for p in out["pods"]] == [
        ("first", "n1"),
        ("blocked", None),
        ("late", "n1"),
    ]
    assert "insufficient cpu" in out["pods"][1]["reason"]
    without_departure = [dict(d) for d in docs]
    without_departure[5] = pod("first", "3", claims=gpu, arrival=0)
    out = simulate(capsys, tmp_path, without_departure)
    assert pods_by_name(out)["late"]["node"] is None


def test_table_has_a_pods_section(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([node("n1", "1"), pod("fits", "1"), pod("no-room", "1")]))
    assert main(["simulate", "--input", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("POD")))
    assert lines[start].split() == ["POD", "NODE", "REASON"]
    assert lines[start + 1].split() == ["ns/fits", "n1"]
    assert lines[start + 2].startswith("ns/no-room") and "insufficient cpu" in lines[start + 2]


def test_json_without_pods_has_an_empty_pods_list(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = simulate(capsys, tmp_path, [CLASS, node_slice("n1", 1), claim("x")])
    assert set(out) == {"claims", "pods"} and out["pods"] == []
    assert set(out["claims"][0]) == {
        "namespace",
        "name",
        "allocated",
        "node",
        "allocation",
        "reason",
    }


@pytest.mark.parametrize("mode", ["first-fit", "scored"])
def test_many_pods_never_overcommit_and_their_claims_pass_the_checker(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mode: str
) -> None:
    nodes = [node(f"n{i}", "8", "16Gi") for i in range(3)]
    slices = [node_slice(f"n{i}", 3) for i in range(3)]
    pods = []
    for i in range(24):
        claims = [{"name": "g", "resourceClaimTemplateName": "one-gpu"}] if i % 3 else []
        pods.append(pod(f"p{i}", ["500m", "1", "3"][i % 3], ["1Gi", "6Gi"][i % 2], claims))
    docs = [CLASS, TEMPLATE, *slices, *nodes, *pods]
    out = simulate(capsys, tmp_path, docs, "--mode", mode)
    placed = [p for p in out["pods"] if p["node"]]
    assert placed and len(placed) < len(pods)  # some room runs out, so the checks bite
    spec = {p["metadata"]["name"]: p for p in pods}
    for n in nodes:
        name = n["metadata"]["name"]
        allocatable = node_allocatable(n)
        assert allocatable is not None
        for resource in (CPU, MEMORY):
            used = sum(
                pod_requests(spec[p["name"]]).amount(resource) for p in placed if p["node"] == name
            )
            assert used <= allocatable.amount(resource), (name, resource)
    allocated = [c for c in out["claims"] if c["allocated"]]
    assert len(allocated) == sum(1 for p in placed if spec[p["name"]]["spec"]["resourceClaims"])
    claims = [
        {
            "kind": "ResourceClaim",
            "metadata": {"namespace": c["namespace"], "name": c["name"]},
            "spec": SPEC,
            "status": {"allocation": c["allocation"]},
        }
        for c in allocated
    ]
    assert check_allocations(slices, [CLASS], claims) == []


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        ([pod("p", "1", claims=[{"name": "g", "resourceClaimName": "absent"}])], "ns/absent"),
        (
            [
                claim("c"),
                pod("p", "1", claims=[{"name": "g", "resourceClaimName": "c"}]),
                pod("q", "1", claims=[{"name": "g", "resourceClaimName": "c"}]),
            ],
            "share a claim",
        ),
        ([pod("p", "1", arrival=5, departure=1)], "before"),
        (
            [
                {**claim("c"), "status": {"allocation": {"devices": {"results": []}}}},
                pod("p", "1", claims=[{"name": "g", "resourceClaimName": "c"}]),
            ],
            "already allocated",
        ),
        ([pod("p", "1"), pod("p", "1")], "Pod ns/p appears twice"),
    ],
)
def test_bad_pod_input_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]], expected: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", "--input", str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_scored_pods_weigh_by_every_pod_of_the_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`simulate` knows every pod before it places the first, and the scored mode weighs by all
    of them: the one-GPU pod goes to the free GPU of the node the shares went to, keeping the
    other node's two GPUs whole. Weighed only by the pods placed before it (two shares), it
    would go to the other node instead. (The two nodes are alike; which one the first share
    takes is the tie order's.)"""
    docs = [
        *trace_inputs.base(),
        trace_inputs.pod("p0", "milli-500"),
        trace_inputs.pod("p1", "milli-250"),
        trace_inputs.pod("p2", "whole-1"),
        trace_inputs.pod("p3", "milli-250"),
    ]

    def placed() -> dict[str, str | None]:
        result = simulate(capsys, tmp_path, docs, "--mode", "scored")
        return {p["name"]: p["node"] for p in result["pods"]}

    first = placed()
    assert set(first.values()) == {first["p0"]} and first["p0"] in {"n0", "n1"}
    monkeypatch.setattr(simulate_cli, "input_workload", lambda *_: Workload())
    second = placed()
    assert second["p0"] == first["p0"] and second["p2"] not in {first["p0"], None}


def test_a_workload_profile_that_cannot_be_read_stops_simulate_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([CLASS, node_slice("n1", 1), node("n1", "4")]))
    missing = tmp_path / "none.yaml"
    assert main(["simulate", "--input", str(path), "--workload", str(missing)]) == 2
    assert f"--workload {missing}" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("shapes: [{count: 0}]")
    assert main(["simulate", "--input", str(path), "--workload", str(bad)]) == 2
    assert "shapes[0].count must be above 0" in capsys.readouterr().err


def test_a_profile_entry_of_an_unknown_class_is_left_out_with_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    unknown = {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "nope"}}]}}
    profile = tmp_path / "profile.yaml"
    profile.write_text(
        yaml.safe_dump(
            {"shapes": [{"count": 1, "claims": [unknown]}, {"count": 2, "claims": [SPEC]}]}
        )
    )
    docs = [CLASS, TEMPLATE, node_slice("n1", 2), node("n1", "4")]
    docs.append(pod("p", "1", claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]))
    out = simulate(capsys, tmp_path, docs, "--mode", "scored", "--workload", str(profile))
    assert pods_by_name(out)["p"]["node"] == "n1"
    # The warning goes to stderr, which the helper above drops: run once more to read it.
    assert main(["simulate", "--input", str(tmp_path / "in.yaml"), "--workload", str(profile)]) == 0
    assert "workload profile entry left out: shapes[0]" in capsys.readouterr().err
