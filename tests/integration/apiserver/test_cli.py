"""`dra-driver apiserver`: starts, prints its URL, writes a working kubeconfig, stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client, config

from dra_driver.cli.main import build_parser


def test_command_is_registered() -> None:
    args = build_parser().parse_args(["apiserver", "--port", "0", "--kubeconfig-out", "k"])
    assert args.port == 0
    assert args.kubeconfig_out == Path("k")


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
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
