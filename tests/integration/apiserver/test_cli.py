"""`dra-driver apiserver`: starts, prints its URL, writes a working kubeconfig, stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from dra_driver.cli.main import build_parser

# The embedded server's command line (`dra-driver apiserver`): nothing upstream to compare.
pytestmark = pytest.mark.embedded_only


def test_command_is_registered() -> None:
    args = build_parser().parse_args(["apiserver", "--port", "0", "--kubeconfig-out", "k"])
    assert args.port == 0
    assert args.kubeconfig_out == Path("k")
    assert args.watch_history == 1000


def test_watch_history_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["apiserver", "--watch-history", "0"])
    assert "--watch-history: must be at least 1" in capsys.readouterr().err
    args = build_parser().parse_args(["local-cluster", "--watch-history", "7"])
    assert args.watch_history == 7


def test_a_request_log_that_cannot_be_written_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-dir" / "requests.log"
    args = build_parser().parse_args(["apiserver", "--request-log", str(missing)])
    assert args.run(args) == 2
    assert f"--request-log: cannot write {missing}" in capsys.readouterr().err


def test_watch_history_bounds_what_a_watch_can_resume_from(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "apiserver",
            "--watch-history",
            "3",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.stdout.readline()  # the kubeconfig is written
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        first = api.create_node({"metadata": {"name": "h-0"}}).metadata.resource_version
        for i in range(1, 4):
            api.create_node({"metadata": {"name": f"h-{i}"}})
        # Three writes after `first`: all still in a history of three.
        seen = [
            e["object"].metadata.name
            for e in watch.Watch().stream(api.list_node, resource_version=first, timeout_seconds=1)
        ]
        assert seen == ["h-1", "h-2", "h-3"]
        api.create_node({"metadata": {"name": "h-4"}})  # h-1 leaves the history
        with pytest.raises(ApiException) as caught:
            for _ in watch.Watch().stream(api.list_node, resource_version=first, timeout_seconds=5):
                pass
        assert caught.value.status == 410
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_serves_until_terminated(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "apiserver",
            "--kubeconfig-out",
            str(kubeconfig),
            "--request-log",
            str(tmp_path / "requests.log"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("API server listening on http://127.0.0.1:")
        assert proc.stdout.readline().strip() == f"kubeconfig written to {kubeconfig}"
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        api.create_node({"metadata": {"name": "cli-node"}})
        assert [n.metadata.name for n in api.list_node().items] == ["cli-node"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        logged = [line.split()[1:] for line in (tmp_path / "requests.log").read_text().splitlines()]
        assert logged == [["POST", "/api/v1/nodes"], ["GET", "/api/v1/nodes"]]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
