"""Reading one claim from the API server as parsed JSON, as prepare does by default."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from kubeletplugin.prepare.claims import KubernetesClaimSource
from tests.integration.plugin.harness import create_claim, create_node, opaque, result

NODE = "source-node"


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


def test_the_claim_comes_back_whole(api: client.ApiClient) -> None:
    consumed = {"compute": "30", "memory": "6Gi"}
    config = [opaque({"apiVersion": "resource.dra-driver.dev/v1alpha1", "kind": "GpuConfig"})]
    name, uid = create_claim(
        api,
        [result("s", "gpu-0-shared", NODE, share_id="x", consumed=consumed)],
        config,
        reserved=True,
    )
    claim = KubernetesClaimSource(api).get("default", name)
    typed_api: object = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims", name
    )
    assert claim == typed_api
    assert claim is not None and claim["metadata"]["uid"] == uid
    (entry,) = claim["status"]["allocation"]["devices"]["results"]
    assert entry["consumedCapacity"] == consumed  # a field typed models may not know


@pytest.mark.parametrize(("namespace", "name"), [("default", "absent"), ("elsewhere", "x")])
def test_a_missing_claim_is_none(api: client.ApiClient, namespace: str, name: str) -> None:
    assert KubernetesClaimSource(api).get(namespace, name) is None


def test_an_empty_name_is_not_turned_into_a_list(api: client.ApiClient) -> None:
    assert KubernetesClaimSource(api).get("default", "") is None


class _Forbidding(BaseHTTPRequestHandler):
    """An API server that refuses this plugin, as one whose RBAC lacks `get` would."""

    def do_GET(self) -> None:
        body = json.dumps({"kind": "Status", "code": 403, "reason": "Forbidden"}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def forbidding() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Forbidding)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_refusal_is_raised_with_its_status(forbidding: str) -> None:
    with (
        client.ApiClient(client.Configuration(host=forbidding)) as api,
        pytest.raises(client.ApiException) as raised,
    ):
        KubernetesClaimSource(api).get("default", "c")
    assert raised.value.status == 403
    assert "Forbidden" in str(raised.value.body)
