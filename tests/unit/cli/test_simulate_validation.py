"""`simulate` and `explain` refuse what kube-apiserver refuses: exit 2, naming the object and
the field, instead of a plausible answer from an object no cluster could hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli.main import main
from tests.support.invalid_objects import REFUSED, Refused, claim, fresh
from tests.unit.cli.test_simulate_queues import base, pod, queue


def _write(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _in_queue_scenario(row: Refused) -> list[dict[str, Any]]:
    """The refused object among a GpuQueue scenario's objects (where `cpu: lots` was once
    placed as if the pod asked for nothing)."""
    obj = fresh(row.obj)
    obj["metadata"]["namespace"] = "a"
    if obj["kind"] == "Pod":
        obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return [*base(), queue("qa", namespaces=["a"]), pod("a", "fine", 0), obj]


@pytest.mark.parametrize("command", ["simulate", "explain"])
@pytest.mark.parametrize("row", REFUSED, ids=lambda r: r.label)
def test_each_refused_shape_exits_2_naming_object_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, row: Refused, command: str
) -> None:
    path = _write(tmp_path, _in_queue_scenario(row))
    args = [command, "--input", str(path)]
    if command == "explain":
        args += ["--pod", "a/fine"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"document 8: {row.kind} a/{row.name} is invalid: {row.field}: " in err
    assert row.message in err


def test_the_scenario_itself_is_accepted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [*base(), queue("qa", namespaces=["a"]), pod("a", "fine", 0)]
    assert main(["simulate", "--input", str(_write(tmp_path, docs))]) == 0
    capsys.readouterr()


def test_every_problem_of_an_object_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = pod("a", "Two_Problems", 0)
    bad["spec"]["containers"].append({"name": "c"})
    assert main(["simulate", "--input", str(_write(tmp_path, [*base(), bad]))]) == 2
    err = capsys.readouterr().err
    assert 'metadata.name: Invalid value: "Two_Problems"' in err
    assert 'spec.containers[1].name: Duplicate value: "c"' in err


def test_a_zero_count_is_read_as_kube_apiserver_stores_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """resource.k8s.io/v1 defaults `count: 0` to 1, so a file with it means one device."""
    zero = claim("zero", count=0)
    zero["metadata"]["namespace"] = "a"
    docs = [*base(), zero]
    path = _write(tmp_path, docs)
    assert main(["simulate", "--input", str(path), "--output", "json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["claims"]
    assert result["allocated"] is True
    assert [r["request"] for r in result["allocation"]["devices"]["results"]] == ["r"]
