"""`dra-driver usage` against the embedded API server: per node and pod the devices held, each
with what its claim's status says (idle for how long, busy, unknown), as a table and JSON, and
with `--metrics` the figures of reachable plugin endpoints, an unreachable one skipped with a
note; and which devices are lent to or borrowed from whom."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import config

from dra_driver.cli.main import main
from localcluster import ApiServer
from tests.integration.cli.idle_claims import allocated_claim

TRAIN = 'node="node-1",claim_namespace="qa",claim_name="train",pods="p1"'
EXPOSITION = f"""\
# HELP dra_device_utilization_percent SM utilisation of an allocated device.
# TYPE dra_device_utilization_percent gauge
dra_device_utilization_percent{{{TRAIN},device="gpu-1"}} 87.0
# HELP dra_device_memory_used_bytes GPU memory used on an allocated device.
# TYPE dra_device_memory_used_bytes gauge
dra_device_memory_used_bytes{{{TRAIN},device="gpu-1"}} 4294967296.0
dra_device_memory_used_bytes{{{TRAIN},device="gpu-0"}} 0.0
"""


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with ApiServer() as server:
        path = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        api = config.new_client_from_config(config_file=str(path))
        allocated_claim(api, "qa", "train", "node-1", {"gpu-0": True, "gpu-1": False}, pods=("p1",))
        allocated_claim(api, "qb", "serve", "node-2", {"gpu-0": None}, pods=("p2", "p3"))
        allocated_claim(api, "qb", "other", "node-2", {"x": True}, driver="other.example")
        yield path


@pytest.fixture(scope="module")
def metrics_url() -> Iterator[str]:
    """A plugin's metrics endpoint, serving a fixed exposition."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = EXPOSITION.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["usage", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_lists_each_device_per_node_and_pod_with_its_idleness(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "--kubeconfig", str(kubeconfig))
    assert (code, err) == (0, "")
    header, *rows = [line.split() for line in out.splitlines()]
    assert header == ["NODE", "POD", "CLAIM", "DEVICE", "IDLE"]
    assert rows[0][:4] == ["node-1", "qa/p1", "qa/train", "node-1/gpu-0"]
    assert rows[0][4] == "idle" and rows[0][5].startswith("2h")
    assert rows[1] == ["node-1", "qa/p1", "qa/train", "node-1/gpu-1", "busy"]
    # A claim shared by two pods shows under each; no condition yet: unknown.
    assert rows[2:] == [
        ["node-2", "qb/p2", "qb/serve", "node-2/gpu-0", "unknown"],
        ["node-2", "qb/p3", "qb/serve", "node-2/gpu-0", "unknown"],
    ]


def test_json_gives_the_same_rows_with_idle_seconds(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--kubeconfig", str(kubeconfig), "--output", "json")
    assert code == 0
    devices = json.loads(out)["devices"]
    assert [(d["node"], d["pod"], d["device"], d["state"]) for d in devices] == [
        ("node-1", "p1", "gpu-0", "idle"),
        ("node-1", "p1", "gpu-1", "busy"),
        ("node-2", "p2", "gpu-0", "unknown"),
        ("node-2", "p3", "gpu-0", "unknown"),
    ]
    idle = devices[0]
    assert 7200 <= idle["idle_seconds"] < 7300
    assert idle["namespace"] == "qa" and idle["claim"] == "train" and idle["pool"] == "node-1"
    assert devices[1]["idle_seconds"] is None


def test_metrics_add_utilisation_and_memory_and_an_unreachable_endpoint_is_skipped(
    kubeconfig: Path, metrics_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    down = closed_port_url()
    code, out, err = _run(
        capsys, "--kubeconfig", str(kubeconfig), "--metrics", down, "--metrics", metrics_url
    )
    assert code == 0
    assert err.startswith(f"dra-driver usage: skipping {down}: ")
    assert err.count("\n") == 1
    header, *rows = [line.split() for line in out.splitlines()]
    assert header == ["NODE", "POD", "CLAIM", "DEVICE", "IDLE", "UTIL", "MEMORY"]
    assert rows[0][-2:] == ["-", "0Mi"]  # no utilisation series: unknown, not 0
    assert rows[1] == ["node-1", "qa/p1", "qa/train", "node-1/gpu-1", "busy", "87%", "4.0Gi"]
    assert rows[2][-2:] == ["-", "-"]

    code, out, _ = _run(
        capsys, "--kubeconfig", str(kubeconfig), "--metrics", metrics_url, "--output", "json"
    )
    busy = json.loads(out)["devices"][1]
    assert busy["utilization_percent"] == 87.0
    assert busy["memory_used_bytes"] == 4 * 2**30


def test_a_server_that_cannot_be_reached_gets_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "--kubeconfig", str(tmp_path / "missing"))
    assert (code, out) == (1, "")
    assert err == "dra-driver usage: cannot list the ResourceClaims\n"


def test_idle_for_is_measured_from_the_conditions_transition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ApiServer() as server:
        path = server.write_kubeconfig(tmp_path / "config")
        api = config.new_client_from_config(config_file=str(path))
        allocated_claim(
            api, "qa", "c", "node-1", {"gpu-0": True}, pods=("p",), idle_for=timedelta(minutes=45)
        )
        code, out, _ = _run(capsys, "--kubeconfig", str(path))
    assert code == 0
    assert out.splitlines()[1].split()[4:] in (["idle", "45m"], ["idle", "45m1s"])


BORROW = "gpu-opportunistic.dra-driver.dev"


def test_lending_says_lent_on_the_owners_device_and_borrowed_on_the_borrowers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """node-1's GPU 0 is owned through a time-slice and borrowed by two claims; GPU 1 and
    node-2's GPU 0 (same minor, another pool) are nobody's business; node-2's GPU 3 is borrowed
    with no owner."""
    with ApiServer() as server:
        path = server.write_kubeconfig(tmp_path / "config")
        api = config.new_client_from_config(config_file=str(path))
        allocated_claim(api, "qa", "train", "node-1", {"gpu-0-ts-1": True}, pods=("p1",))
        allocated_claim(
            api, "qb", "scavenge", "node-1", {"gpu-0-lent": None}, ("b1",), device_class=BORROW
        )
        allocated_claim(
            api, "qc", "batch", "node-1", {"gpu-0-lent": None}, ("b2",), device_class=BORROW
        )
        allocated_claim(api, "qa", "other", "node-1", {"gpu-1": False}, pods=("p2",))
        allocated_claim(api, "qa", "far", "node-2", {"gpu-0": False}, pods=("p3",))
        allocated_claim(
            api, "qd", "orphan", "node-2", {"gpu-3-lent": None}, ("b3",), device_class=BORROW
        )
        code, out, err = _run(capsys, "--kubeconfig", str(path))
        assert (code, err) == (0, "")
        _, json_out, _ = _run(capsys, "--kubeconfig", str(path), "--output", "json")

    header, *lines = out.splitlines()
    assert header.split() == ["NODE", "POD", "CLAIM", "DEVICE", "IDLE", "LENDING"]
    lending = {line.split()[2]: line[header.index("LENDING") :] for line in lines}
    assert lending == {
        "qa/train": "LENT to 2",
        "qb/scavenge": "BORROWED from qa/train",
        "qc/batch": "BORROWED from qa/train",
        "qa/other": "",
        "qa/far": "",
        "qd/orphan": "BORROWED gpu-3 (no owner)",
    }

    by_claim = {d["claim"]: d["lending"] for d in json.loads(json_out)["devices"]}
    gpu0 = {"gpu": "gpu-0", "owners": ["qa/train"], "borrowers": ["qb/scavenge", "qc/batch"]}
    assert by_claim["train"] == {"role": "lent", **gpu0}
    assert by_claim["scavenge"] == by_claim["batch"] == {"role": "borrowed", **gpu0}
    assert by_claim["other"] is None and by_claim["far"] is None
    assert by_claim["orphan"] == {
        "role": "borrowed",
        "gpu": "gpu-3",
        "owners": [],
        "borrowers": ["qd/orphan"],
    }


def test_a_cluster_that_lends_nothing_has_no_lending_column(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = _run(capsys, "--kubeconfig", str(kubeconfig))
    assert "LENDING" not in out
    _, out, _ = _run(capsys, "--kubeconfig", str(kubeconfig), "--output", "json")
    assert [d["lending"] for d in json.loads(out)["devices"]] == [None] * 4
