"""The local API server's request log: how benchmarks count the calls a client makes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from kubernetes import client, config

from localcluster.apiserver import ApiServer

# The embedded server's request log: kube-apiserver has no such log.
pytestmark = pytest.mark.embedded_only


def test_every_request_is_logged_with_its_method_path_and_whether_it_watches(
    tmp_path: Path,
) -> None:
    log = io.StringIO()
    with ApiServer(request_log=log) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "team-a"}})
        # A watch the server ends after a second, read to its end.
        watched = core.list_namespace(watch=True, timeout_seconds=1, _preload_content=False)
        assert b"team-a" in watched.data
        core.list_namespaced_pod("team-a", label_selector="app=x")
    lines = [line.split() for line in log.getvalue().splitlines()]
    assert [line[1:] for line in lines] == [
        ["POST", "/api/v1/namespaces"],
        ["GET", "/api/v1/namespaces", "watch"],
        ["GET", "/api/v1/namespaces/team-a/pods"],  # the query is left out
    ]
    assert all(float(line[0]) > 0 for line in lines)
