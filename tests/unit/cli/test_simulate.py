"""`dra-driver simulate` and `explain` on files, through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.checker.rules import check_allocations
from dra_driver.cli.main import main
from tests.support import objects

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "deploy" / "examples" / "simulate" / "cluster.yaml"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["simulate", "--output", "json", *args]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_example_input_is_up_to_date() -> None:
    script = ROOT / "hack" / "make-simulate-example.py"
    command = [sys.executable, str(script), "--check"]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("mode", ["first-fit", "scored"])
def test_example_allocations_are_valid_and_explained(
    capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    out = run_json(capsys, "--input", str(EXAMPLE), "--mode", mode)
    by_name = {c["name"]: c for c in out["claims"]}
    assert list(by_name) == [
        "training-pair",
        "notebook-mig",
        "inference-any",
        "timeslice",
        "shared-small",
        "big-memory",
    ]
    pair = by_name["training-pair"]
    assert pair["allocated"] and pair["node"] == "node-a"
    assert [r["device"] for r in pair["allocation"]["devices"]["results"]] == ["gpu-0", "gpu-1"]
    assert by_name["inference-any"]["allocation"]["devices"]["results"][0]["request"] == (
        "gpu/a30-mig"
    )
    for name in ("shared-small", "big-memory"):
        assert not by_name[name]["allocated"]
        assert by_name[name]["allocation"] is None
        assert "no node fits" in by_name[name]["reason"]
    # The independent checker accepts everything the run allocated, together.
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    claims = []
    for doc in docs:
        if doc["kind"] == "ResourceClaim":
            outcome = by_name[doc["metadata"]["name"]]
            status = {"allocation": outcome["allocation"]} if outcome["allocated"] else {}
            claims.append({**doc, "status": status})
    slices = [d for d in docs if d["kind"] == "ResourceSlice"]
    classes = [d for d in docs if d["kind"] == "DeviceClass"]
    assert check_allocations(slices, classes, claims) == []


def test_table_output_lists_claims_and_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--input", str(EXAMPLE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["CLAIM", "NODE", "DEVICES", "REASON"]
    assert lines[1].startswith("demo/training-pair") and "gpus=gpu-0,gpus=gpu-1" in lines[1]


def test_explain_says_why_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--input", str(EXAMPLE), "--claim", "demo/shared-small"]) == 0
    text = capsys.readouterr().out
    assert "node-a: does not fit" in text and "node-b: does not fit" in text
    assert "blocked by shared counters" in text
    assert main(["explain", "--input", str(EXAMPLE), "--claim", "demo/timeslice"]) == 0
    assert "node-b: fits (gpu-1-ts-0)" in capsys.readouterr().out


def small_input(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


DRV = "gpu.example.com"
SLICE = {
    "kind": "ResourceSlice",
    "metadata": {"name": "s"},
    "spec": {
        "driver": DRV,
        "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "a"}, {"name": "b"}],
    },
}
CLASS = {
    "kind": "DeviceClass",
    "metadata": {"name": "any"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRV}"'}}]},
}


def claim(name: str, allocated: str | None = None) -> dict[str, Any]:
    status = None
    if allocated:
        result = {"request": "r", "driver": DRV, "pool": "n1", "device": allocated}
        status = {"allocation": {"devices": {"results": [result]}}}
    return objects.claim(name, objects.request("r", "any"), namespace="ns", status=status)


def test_allocated_claims_count_as_in_use_and_order_is_file_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = small_input(tmp_path, SLICE, CLASS, claim("x"), claim("old", "a"), claim("y"))
    out = run_json(capsys, "--input", str(path))
    assert [(c["name"], c["allocated"]) for c in out["claims"]] == [("x", True), ("y", False)]
    assert out["claims"][0]["allocation"]["devices"]["results"][0]["device"] == "b"
    assert "already allocated" in out["claims"][1]["reason"]


def test_runtime_cel_error_is_the_claims_reason_not_a_crash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = claim("x")
    bad["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["{DRV}"].missing == 1'}}
    ]
    out = run_json(capsys, "--input", str(small_input(tmp_path, SLICE, CLASS, bad)))
    (only,) = out["claims"]
    assert not only["allocated"]
    assert "missing" in only["reason"] and "selector" in only["reason"]


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        ([{"kind": "Deployment", "metadata": {"name": "p"}}], "document 1: kind 'Deployment'"),
        ([SLICE, {"kind": "DeviceClass"}], "document 2: DeviceClass has no metadata.name"),
        ([SLICE, CLASS, claim("x"), claim("x")], "appears twice"),
        (
            [{**SLICE, "spec": {**SLICE["spec"], "pool": {"name": "n1", "generation": "one"}}}],
            "spec.pool.generation",
        ),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]], expected: str
) -> None:
    assert main(["simulate", "--input", str(small_input(tmp_path, *docs))]) == 2
    assert expected in capsys.readouterr().err


def test_unreadable_and_malformed_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["simulate", "--input", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    assert main(["simulate", "--input", str(broken)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["explain", "--input", str(EXAMPLE), "--claim", "demo/absent"]) == 2
    assert "no such ResourceClaim" in capsys.readouterr().err


def test_unschedulable_nodes_are_not_tried(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cordoned = {"kind": "Node", "metadata": {"name": "n1"}, "spec": {"unschedulable": True}}
    out = run_json(
        capsys, "--input", str(small_input(tmp_path, SLICE, CLASS, cordoned, claim("x")))
    )
    (only,) = out["claims"]
    assert not only["allocated"] and "no node to try" in only["reason"]


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    command = f"{sys.executable} -m dra_driver.cli.main simulate --output json --input {EXAMPLE}"
    done = subprocess.run(
        f"{command} | head -c 10", shell=True, check=False, capture_output=True, text=True, cwd=ROOT
    )
    assert done.stdout == '{\n  "claim'
    assert "Traceback" not in done.stderr
