"""`dra-driver queues` against the embedded API server: the table and JSON in tree order, the
reasons of refused queues under the table, and one clear line (exit 1) when the cluster lacks the
CRD or cannot be reached."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from dra_driver.cli.main import main
from dra_driver.queues import GROUP, KIND, PLURAL, VERSION
from localcluster import ApiServer
from localcluster.resources import DEFAULT_RESOURCES, ResourceType
from tests.integration.cli.idle_claims import allocated_claim

QUEUES = ResourceType(GROUP, VERSION, PLURAL, KIND, False, has_status=True)
WITHOUT_QUEUES = [rt for rt in DEFAULT_RESOURCES if rt.key != QUEUES.key]
BAD_PARENT = "GpuQueue lost: spec.parent: GpuQueue nowhere does not exist"


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A server that serves GpuQueues (added here when its default table does not) and holds
    an organisation of two teams, a refused queue and a flat one."""
    with ApiServer(resources=[*WITHOUT_QUEUES, QUEUES]) as server:
        path = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(path)))
        # Created children first and out of name order, so the output's order is the tree's.
        _create(
            api,
            "team-b",
            parent="org",
            namespaces=["b1", "b2"],
            guaranteed={"gpu": 8},
            limit={"gpu": "12", "memory": "960Gi"},
            weight=2,
        )
        _create(
            api, "team-a", parent="org", namespaces=["a"], guaranteed={"gpu": "8"}, reclaim="Never"
        )
        _create(api, "lost", parent="nowhere", namespaces=["x"])
        _create(api, "org", guaranteed={"gpu": "16", "memory": "1280Gi"})
        _create(api, "batch", namespaces=["batch"], weight=0.5)
        _create(api, "team-a-night", parent="team-a", namespaces=["a-night"])
        _status(
            api,
            "team-a",
            used={"gpu": "9", "memory": "720Gi"},
            borrowed={"gpu": "1", "memory": "80Gi"},
            pending=2,
            valid=("True", "ok"),
        )
        _status(api, "lost", valid=("False", BAD_PARENT))
        # Idle devices, as the kubelet plugins mark them in the claims' status: two in team-a's
        # namespace (one claim busy), one in team-a-night's, one in the refused queue's.
        api_client = api.api_client
        allocated_claim(api_client, "a", "train", "node-1", {"gpu-0": True, "gpu-1": True})
        allocated_claim(api_client, "a", "serve", "node-1", {"gpu-2": False, "gpu-3": None})
        allocated_claim(api_client, "a-night", "etl", "node-2", {"gpu-0": True})
        allocated_claim(api_client, "x", "lost", "node-2", {"gpu-1": True})
        allocated_claim(api_client, "b1", "other", "node-2", {"d": True}, driver="other.example")
        yield path


def _create(api: client.CustomObjectsApi, name: str, **spec: Any) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)


def _status(api: client.CustomObjectsApi, name: str, valid: tuple[str, str], **status: Any) -> None:
    reason = "Accepted" if valid[0] == "True" else "InvalidSpec"
    condition = {"type": "Valid", "status": valid[0], "reason": reason, "message": valid[1]}
    body = {"status": {**status, "conditions": [condition]}}
    api.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, body)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["queues", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_lists_the_tree_with_quotas_and_status(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "--kubeconfig", str(kubeconfig))
    assert (code, err) == (0, "")
    table, _, notes = out.partition("\n\n")
    lines = table.splitlines()
    assert lines[0].split() == [
        "NAME", "PARENT", "NAMESPACES", "GUARANTEED", "LIMIT", "WEIGHT", "RECLAIM", "USED",
        "BORROWED", "IDLE", "PENDING", "VALID",
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    # team-a: its own two idle devices and team-a-night's one.
    assert rows["team-a"] == [
        "team-a", "org", "a", "8/-", "-", "1", "Never", "9/720Gi", "1/80Gi", "3", "2", "True",
    ]  # fmt: skip
    # team-b's namespace holds only another driver's idle device.
    assert rows["team-b"] == [
        "team-b", "org", "b1,b2", "8/-", "12/960Gi", "2", "Borrowed", "-", "-", "0", "-", "-",
    ]  # fmt: skip
    assert rows["org"][9] == "3"
    assert rows["team-a-night"][9] == "1"
    assert rows["lost"][9] == "-"  # refused: its pods count in the default queue
    assert rows["org"][3] == "16/1280Gi"
    assert rows["batch"][5] == "0.5"
    assert rows["lost"][1] == "nowhere" and rows["lost"][-1] == "False"
    # Columns line up: every cell of a column starts where its header does.
    start = lines[0].index("RECLAIM")
    assert all(line[start - 2 : start] == "  " and line[start] != " " for line in lines[1:])
    assert notes == f"lost: {BAD_PARENT}\n"


def test_children_are_indented_under_their_parent(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = _run(capsys, "--kubeconfig", str(kubeconfig))
    header, *rows = out.partition("\n\n")[0].splitlines()
    names = [row[: header.index("PARENT")].rstrip() for row in rows]
    assert names == ["batch", "lost", "org", "  team-a", "    team-a-night", "  team-b"]


def test_json_gives_the_same_rows_in_tree_order(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--kubeconfig", str(kubeconfig), "--output", "json")
    assert code == 0
    queues = json.loads(out)["queues"]
    assert [(q["name"], q["depth"]) for q in queues] == [
        ("batch", 0), ("lost", 0), ("org", 0), ("team-a", 1), ("team-a-night", 2), ("team-b", 1),
    ]  # fmt: skip
    team_a = queues[3]
    assert team_a["parent"] == "org"
    assert team_a["guaranteed"] == {"gpu": "8"}
    assert team_a["used"] == {"gpu": "9", "memory": "720Gi"}
    assert team_a["borrowed"] == {"gpu": "1", "memory": "80Gi"}
    assert team_a["pending"] == 2
    assert team_a["idle"] == 3
    assert team_a["reclaim"] == "Never"
    assert team_a["valid"]["status"] == "True"
    assert queues[5]["limit"] == {"gpu": "12", "memory": "960Gi"}
    assert queues[5]["weight"] == 2
    assert queues[1]["valid"] == {"status": "False", "reason": "InvalidSpec", "message": BAD_PARENT}
    assert queues[2]["valid"] is None  # no status written yet


def test_a_cluster_without_the_crd_gets_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ApiServer(resources=WITHOUT_QUEUES) as server:
        path = server.write_kubeconfig(tmp_path / "config")
        code, out, err = _run(capsys, "--kubeconfig", str(path))
    assert (code, out) == (1, "")
    assert err.startswith("dra-driver queues: the GpuQueue CRD is not installed")
    assert "gpuqueues.gpu.dra-driver.dev" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_an_unusable_kubeconfig_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "--kubeconfig", str(tmp_path / "missing"))
    assert code == 1
    assert "missing" in err and err.count("\n") == 1


def test_kubeconfig_comes_from_the_environment(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    code, out, _ = _run(capsys)
    assert code == 0 and "team-a-night" in out
