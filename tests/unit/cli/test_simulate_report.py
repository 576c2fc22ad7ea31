"""`dra-driver simulate --report`: GPU allocation figures at demand shares and at times.

The cluster is two nodes with two GPUs each, published as the trace benchmark publishes them
(a whole device and a shared `gpumilli` device per GPU, excluding each other through a counter),
so the capacity is 4 GPUs whatever the device count. Every expected figure is worked out by hand
in the test from where first fit puts each pod.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli.main import main
from tests.bench.traces import cluster
from tests.support.trace_inputs import NODES, base, pod


def report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]], points: str
) -> dict[str, dict[str, Any]]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", "--output", "json", "--input", str(path), "--report", points]) == 0
    out = json.loads(capsys.readouterr().out)
    rows: list[dict[str, Any]] = out["report"]
    assert [r["point"] for r in rows] == points.split(",")
    return {r["point"]: r for r in rows}


def figures(row: dict[str, Any]) -> tuple[float, ...]:
    keys = ("arrived", "allocated", "ratio", "idle", "unallocated")
    return tuple(round(row[k], 6) for k in keys)


def test_share_points_are_read_just_after_the_arrival_that_reaches_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docs = [
        *base(),
        pod("p0", "whole-1"),  # n0 gpu-0                      arrived 1     held 1
        pod("p1", "milli-500"),  # n0 gpu-1 shared (gpu-0 is whole) 1.5     1.5
        pod("p2", "whole-2"),  # n0 has one GPU left: n1 gpu-0, gpu-1  3.5  3.5
        pod("p3", "whole-1"),  # every GPU's counter is taken: refused 4.5  3.5
        pod("p4", "milli-250"),  # n0 gpu-1 shared, 250 of its 500 left 4.75 3.75
    ]
    rows = report(capsys, tmp_path, docs, "100%,115%,150%")
    # 100 % of 4 GPUs is first reached by p3 (3.5 -> 4.5), which holds nothing.
    assert figures(rows["100%"]) == (4.5, 3.5, 0.875, 0.5, 1.0)
    # 115 % = 4.6 GPUs: reached by p4 (4.75).
    assert figures(rows["115%"]) == (4.75, 3.75, 0.9375, 0.25, 1.0)
    assert rows["100%"]["reached"] and rows["100%"]["time"] == 0
    assert rows["100%"]["capacity"] == 4
    # 150 % = 6 GPUs is never reached: listed, without figures.
    assert rows["150%"]["reached"] is False and rows["150%"]["time"] is None
    assert rows["150%"]["ratio"] is None and rows["150%"]["allocated"] is None


TIMELINE = [
    pod("p0", "whole-1", 0, 100),  # n0 gpu-0 until 100 s
    pod("p1", "whole-2", 10),  # n0 has one GPU: n1 gpu-0, gpu-1
    pod("p2", "whole-2", 20, 60),  # refused: one GPU free; a refused pod never leaves
    pod("p3", "whole-1", 150),  # n0 gpu-0 (p0 has left)
    pod("p4", "milli-500", 150),  # n0 gpu-1 shared
]


def test_time_points_count_departures_and_refused_pods(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rows = report(capsys, tmp_path, [*base(), *TIMELINE], "5s,15s,50s,100s,200s,100%")
    assert figures(rows["5s"]) == (1, 1, 0.25, 3, 0)
    assert figures(rows["15s"]) == (3, 3, 0.75, 1, 0)
    assert figures(rows["50s"]) == (5, 3, 0.75, 1, 2)
    # p0 leaves at 100 s although nothing arrives then: the point sees it gone.
    assert figures(rows["100s"]) == (5, 2, 0.5, 2, 2)
    assert figures(rows["200s"]) == (6.5, 3.5, 0.875, 0.5, 2)
    assert [rows[p]["time"] for p in ("5s", "100s")] == [5, 100]
    # The demand reaches 4 GPUs with p2 at 20 s.
    assert figures(rows["100%"]) == (5, 3, 0.75, 1, 2)
    assert rows["100%"]["time"] == 20


def test_with_queues_waiting_pods_are_unallocated_until_placed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    queue = {
        "apiVersion": "gpu.dra-driver.dev/v1alpha1",
        "kind": "GpuQueue",
        "metadata": {"name": "q"},
        "spec": {"namespaces": ["ns"]},
    }
    docs = [*base(), queue, *TIMELINE]
    rows = report(capsys, tmp_path, docs, "15s,50s,100s,145s,200s,100%")
    assert figures(rows["15s"]) == (3, 3, 0.75, 1, 0)
    # p2 waits instead of being refused.
    assert figures(rows["50s"]) == (5, 3, 0.75, 1, 2)
    # At 100 s p0 leaves and p2 takes n0's two GPUs; it runs its 40 s until 140 s.
    assert figures(rows["100s"]) == (5, 4, 1, 0, 0)
    assert figures(rows["145s"]) == (5, 2, 0.5, 2, 0)
    assert figures(rows["200s"]) == (6.5, 3.5, 0.875, 0.5, 0)
    # Read after the decisions of 20 s, when p2 arrived and waits.
    assert figures(rows["100%"]) == (5, 3, 0.75, 1, 2)
    assert rows["100%"]["time"] == 20


def test_lone_claims_and_claims_allocated_in_the_input_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    held = {
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ns", "name": "held"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "whole"}}]}
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.sim.dra-driver.dev",
                            "pool": "n1",
                            "device": "gpu-1",
                        }
                    ]
                }
            }
        },
    }
    lone = {
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ns", "name": "lone"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "shared",
                            "capacity": {"requests": {"gpumilli": "250"}},
                        },
                    }
                ]
            }
        },
    }
    rows = report(capsys, tmp_path, [*base(), held, lone], "0s,25%")
    # The allocated claim holds n1 gpu-1 from the start; the lone claim takes n0 gpu-0 shared.
    assert figures(rows["0s"]) == (1.25, 1.25, 0.3125, 2.75, 0)
    # 25 % = 1 GPU is reached before anything arrives: by what the input already holds.
    assert rows["25%"]["time"] == 0
    assert figures(rows["25%"]) == (1, 1, 0.25, 3, 0)


def test_table_output_has_a_report_section(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*base(), *TIMELINE]))
    assert main(["simulate", "--input", str(path), "--report", "50s,200%"]) == 0
    text = capsys.readouterr().out
    section = text[text.index("GPU allocation report") :].splitlines()
    assert section[0] == "GPU allocation report (capacity 4 GPUs; figures in GPUs):"
    assert section[1].split() == [
        "POINT",
        "TIME",
        "ARRIVED",
        "ALLOCATED",
        "RATIO",
        "IDLE",
        "UNALLOCATED",
        "NOTE",
    ]
    assert section[2].split() == ["50s", "50s", "5", "3", "75.00%", "1", "2"]
    assert section[3].split()[:7] == ["200%", "-", "-", "-", "-", "-", "-"]
    assert (
        "not reached: the arrived demand ended at 6.50 GPUs (162.5% of the capacity)" in section[3]
    )


def test_no_report_section_without_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*base(), *TIMELINE]))
    assert main(["simulate", "--output", "json", "--input", str(path)]) == 0
    assert "report" not in json.loads(capsys.readouterr().out)
    assert main(["simulate", "--input", str(path)]) == 0
    assert "GPU allocation report" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("points", "bad"),
    [
        ("100", "'100'"),
        ("100%,1h", "'1h'"),
        ("t=3600", "'t=3600'"),
        ("-5s", "'-5s'"),
        ("110%,", "''"),
        ("0%", "above 0%"),
    ],
)
def test_bad_points_are_refused_naming_the_point(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, points: str, bad: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(base()))
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--input", str(path), f"--report={points}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--report" in err and bad in err


def test_share_points_need_gpus_in_the_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes, _, classes = cluster(NODES)
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*nodes, *classes]))
    assert main(["simulate", "--input", str(path), "--report", "10s,100%"]) == 2
    assert "--report 100%: the input publishes no GPUs" in capsys.readouterr().err
    assert main(["simulate", "--output", "json", "--input", str(path), "--report", "10s"]) == 0
    row = json.loads(capsys.readouterr().out)["report"][0]
    assert row["capacity"] == 0 and row["ratio"] == 0 and row["idle"] == 0
