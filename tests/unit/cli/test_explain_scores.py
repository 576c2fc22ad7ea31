"""`dra-driver explain` in scored mode: the terms that made the chosen node and devices win.

The cluster is three (or two) trace-shaped nodes: per GPU a whole device and a shared `gpumilli`
device that exclude each other through a counter, so taking a fresh shared device blocks the
whole one (fragmentation loss) while joining a shared device already in use blocks nothing.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli.main import main
from tests.bench.traces import DRIVER, cluster
from tests.support import objects
from tests.support.trace_inputs import base, pod

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "deploy" / "examples" / "simulate" / "cluster.yaml"
NODES = [
    {"sn": f"n{i}", "cpu_milli": "8000", "memory_mib": "32768", "gpu": "2", "model": "V100"}
    for i in range(3)
]
TERMS = {
    "loses on firstAvailable preference": 0,
    "loses on topology spread": 1,
    "loses on fragmentation loss": 2,
    "loses on load": 3,
    "ties on every term": 4,
}
NODE_LINE = re.compile(
    r"^    (?:chosen )?(?P<node>n\d+): (?:(?P<why>[^;]+); )?preference \[(?P<pref>[^\]]*)\], "
    r"topology spread \((?P<topo>[^)]*)\), loss (?P<loss>\S+), load (?P<load>\d+); "
    r"devices (?P<devices>.+)$"
)


def claim(name: str, exactly: dict[str, Any], held: dict[str, Any] | None = None) -> dict[str, Any]:
    """A claim for one device; `held`: the result it is allocated in the input (on `pool`)."""
    status = None
    if held is not None:
        result = {"request": "gpu", "driver": DRIVER, **held}
        pinned = {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": [held["pool"]]}]
        }
        status = {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [pinned]},
            }
        }
    request = {"name": "gpu", "exactly": exactly}
    return objects.claim(name, request, namespace="ns", status=status)


WHOLE = {"deviceClassName": "whole"}
QUARTER = {"deviceClassName": "shared", "capacity": {"requests": {"gpumilli": "250"}}}
HALF = {"deviceClassName": "shared", "capacity": {"requests": {"gpumilli": "500"}}}


def explain(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]], *args: str
) -> list[str]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["explain", "--input", str(path), *args]) == 0
    return capsys.readouterr().out.splitlines()


def compared(lines: list[str]) -> list[dict[str, Any]]:
    """The nodes of the scored section, the chosen one first, with their parsed terms."""
    start = next(i for i, line in enumerate(lines) if "scored choice" in line)
    rows = []
    for line in lines[start + 1 :]:
        found = NODE_LINE.match(line)
        if found is None:
            continue
        topology = tuple(int(part.split()[-1]) for part in found["topo"].split(", "))
        key = (found["pref"], topology, float(found["loss"]), -int(found["load"]), found["node"])
        rows.append({**found.groupdict(), "key": key, "chosen": line.startswith("    chosen ")})
    assert rows and rows[0]["chosen"] and not any(r["chosen"] for r in rows[1:])
    return rows


@pytest.mark.parametrize(
    ("earlier", "target", "winner", "term"),
    [
        # Nothing allocated yet: every node scores the same, the first name wins.
        ([], QUARTER, "n0", "ties on every term"),
        # A half share went to n0's first GPU: another share joins it without blocking
        # anything, while a fresh shared device elsewhere blocks its whole GPU.
        ([claim("half", HALF)], QUARTER, "n0", "loses on fragmentation loss"),
        # A whole GPU went to n0: a second whole GPU blocks as much anywhere, so the busier
        # node wins.
        ([claim("one", WHOLE)], WHOLE, "n0", "loses on load"),
    ],
)
def test_each_node_compared_loses_on_its_first_worse_term(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    earlier: list[dict[str, Any]],
    target: dict[str, Any],
    winner: str,
    term: str,
) -> None:
    nodes, slices, classes = cluster(NODES)
    docs = [*nodes, *slices, *classes, *earlier, claim("target", target)]
    lines = explain(capsys, tmp_path, docs, "--claim", "ns/target", "--mode", "scored")
    rows = compared(lines)
    assert rows[0]["node"] == winner
    assert {r["node"] for r in rows} == {"n0", "n1", "n2"}
    for other in rows[1:]:
        assert other["why"].startswith(term)
        assert rows[0]["key"] < other["key"]
        # The term named is the first on which the two differ: every one before is equal.
        position = TERMS[term]
        assert rows[0]["key"][:position] == other["key"][:position]
        assert rows[0]["key"][position] != other["key"][position]
    # The node chosen is the one simulate allocates the claim on.
    path = tmp_path / "in.yaml"
    assert main(["simulate", "--output", "json", "--input", str(path), "--mode", "scored"]) == 0
    outcome = json.loads(capsys.readouterr().out)["claims"][-1]
    assert outcome["name"] == "target" and outcome["node"] == winner
    devices = [r["device"] for r in outcome["allocation"]["devices"]["results"]]
    assert rows[0]["devices"] == ", ".join(devices)


def test_the_winner_need_not_be_the_first_node_searched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rows3 = [dict(NODES[0]), {**NODES[1], "gpu": "3"}, dict(NODES[2])]
    nodes, slices, classes = cluster(rows3)
    half: dict[str, Any] = {"pool": "n0", "device": "gpu-0-shared", "shareID": "s1"}
    half["consumedCapacity"] = {"gpumilli": "500"}
    docs = [
        *nodes,
        *slices,
        *classes,
        # n1 is the busiest (two results), so it is searched first; n0 has one.
        claim("w0", WHOLE, {"pool": "n1", "device": "gpu-0"}),
        claim("w1", WHOLE, {"pool": "n1", "device": "gpu-1"}),
        claim("half", HALF, half),
        claim("target", QUARTER),
    ]
    lines = explain(capsys, tmp_path, docs, "--claim", "ns/target", "--mode", "scored")
    rows = compared(lines)
    by_node = {r["node"]: r for r in rows}
    assert rows[0]["node"] == "n0" and by_node["n0"]["loss"] == "0"
    assert [by_node[n]["load"] for n in ("n0", "n1", "n2")] == ["1", "2", "0"]
    assert by_node["n1"]["why"].startswith("loses on fragmentation loss")
    assert by_node["n2"]["why"].startswith("loses on fragmentation loss")


def test_the_devices_chosen_are_compared_with_first_fits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes, slices, classes = cluster(NODES[:2])
    # n0's second GPU is shared already; first fit would open n0's first GPU's shared device.
    held: dict[str, Any] = {"pool": "n0", "device": "gpu-1-shared", "shareID": "s1"}
    held["consumedCapacity"] = {"gpumilli": "500"}
    docs = [*nodes, *slices, *classes, claim("held", HALF, held), claim("target", QUARTER)]
    lines = explain(capsys, tmp_path, docs, "--claim", "ns/target", "--mode", "scored")
    rows = compared(lines)
    assert rows[0]["node"] == "n0" and rows[0]["devices"] == "gpu-1-shared"
    assert "  n0: fits (gpu-1-shared)" in lines
    against = next(line for line in lines if line.startswith("      devices: "))
    assert "first fit would take gpu-0-shared" in against
    assert against.endswith("which loses on fragmentation loss (1 against 0)")


def test_first_fit_output_has_no_scored_section(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes, slices, classes = cluster(NODES)
    docs = [*nodes, *slices, *classes, claim("target", QUARTER)]
    lines = explain(capsys, tmp_path, docs, "--claim", "ns/target")
    assert lines == [
        "claim ns/target, after the first-fit allocation of the claims before it:",
        "  n0: fits (gpu-0-shared)",
        "  n1: fits (gpu-0-shared)",
        "  n2: fits (gpu-0-shared)",
    ]


POD_LINE = re.compile(
    r"^    (?:chosen )?(?P<node>n\d+): (?:(?P<why>[^;]+); )?fragmentation (?P<before>\S+) -> "
    r"(?P<after>\S+) \(increase (?P<increase>\S+), (?P<points>\d+) points\), "
    r"free device room after (?P<room>\S+), "
    r"the ranking picked (?P<picked>[^;]+); "
    r"the allocator takes (?P<devices>\S+) \(.*steer (?P<steer>\d+), loss (?P<loss>\S+)\)$"
)


def test_a_pod_shows_the_fragmentation_terms_that_ranked_the_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods = [pod("a", "milli-500"), pod("b", "whole-1"), pod("c", "milli-250")]
    docs = [*base(), *pods, pod("d", "milli-250")]
    lines = explain(capsys, tmp_path, docs, "--pod", "ns/d", "--mode", "scored")
    assert lines[1:3] == ["  n0: fits", "  n1: fits"]
    rows = [found.groupdict() for line in lines if (found := POD_LINE.match(line))]
    assert sorted(r["node"] for r in rows) == ["n0", "n1"]
    chosen, other = rows
    for row in rows:
        increase = float(row["after"]) - float(row["before"])
        assert float(row["increase"]) == pytest.approx(increase, abs=1e-3)
        assert row["devices"] == row["picked"] and row["steer"] == "0"
        assert 0 <= float(row["room"]) <= 4
        assert int(row["points"]) == int(100 / (1 + math.exp(float(row["increase"]))))
    # The chosen node's shared device is half full already (pod a's): another quarter there
    # leaves the room that is left usable, a fresh shared device on the other fragments it.
    assert float(chosen["increase"]) < float(other["increase"])
    assert int(chosen["points"]) > int(other["points"])
    assert other["why"].startswith(f"loses on points ({other['points']} against")
    assert lines[-2].startswith(f"    chosen {chosen['node']}: ")
    # What simulate does with the pod.
    path = tmp_path / "in.yaml"
    assert main(["simulate", "--output", "json", "--input", str(path), "--mode", "scored"]) == 0
    placed = {p["name"]: p["node"] for p in json.loads(capsys.readouterr().out)["pods"]}
    assert placed["d"] == placed["a"] == chosen["node"]


def test_a_pod_in_first_fit_mode_names_the_first_node_that_fits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [*base(), pod("a", "whole-2"), pod("b", "whole-2"), pod("c", "whole-1")]
    lines = explain(capsys, tmp_path, docs, "--pod", "ns/b")
    assert lines[0] == (
        "pod ns/b, arriving at 0s, after the first-fit placement of the claims and pods before it:"
    )
    assert lines[1] == "  n0: does not fit"
    assert "blocked by shared counters" in lines[2] or "already allocated" in lines[2]
    assert "  n1: fits (gpu-0, gpu-1)" in lines
    assert lines[-1].startswith("  chosen: n1, the first node in node order")
    assert not any("scored choice" in line for line in lines)


def test_explain_pod_refuses_what_it_cannot_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "in.yaml"
    queue = {
        "apiVersion": "gpu.dra-driver.dev/v1alpha1",
        "kind": "GpuQueue",
        "metadata": {"name": "q"},
        "spec": {"namespaces": ["ns"]},
    }
    path.write_text(yaml.safe_dump_all([*base(), pod("a", "whole-1")]))
    assert main(["explain", "--input", str(path), "--pod", "ns/absent"]) == 2
    assert "--pod ns/absent: no such Pod in the input" in capsys.readouterr().err
    path.write_text(yaml.safe_dump_all([*base(), queue, pod("a", "whole-1")]))
    assert main(["explain", "--input", str(path), "--pod", "ns/a"]) == 2
    assert "the input holds GpuQueues" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["explain", "--input", str(path), "--pod", "ns/a", "--claim", "ns/c"])
