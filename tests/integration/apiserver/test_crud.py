"""Create, read, update, delete through the official client, with Kubernetes error shapes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import ApiServer


def _pod(name: str, **meta: object) -> dict[str, object]:
    return {
        "metadata": {"name": name, **meta},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_create_fills_server_side_metadata(core: client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod("default", _pod("", generateName="web-"))
    assert pod.metadata.name.startswith("web-")
    assert len(pod.metadata.name) == len("web-") + 5
    assert pod.metadata.uid
    assert pod.metadata.creation_timestamp is not None
    assert int(pod.metadata.resource_version) > 0
    assert pod.metadata.namespace == "default"
    assert pod.kind == "Pod"
    assert pod.api_version == "v1"


def test_every_write_gets_a_larger_resource_version(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_pod("default", _pod("rv-a"))
    second = core.create_namespaced_pod("default", _pod("rv-b"))
    listed = core.list_namespaced_pod("default")
    assert int(first.metadata.resource_version) < int(second.metadata.resource_version)
    assert int(listed.metadata.resource_version) >= int(second.metadata.resource_version)


def test_duplicate_name_is_already_exists(core: client.CoreV1Api) -> None:
    core.create_node({"metadata": {"name": "dup-node"}})
    with pytest.raises(ApiException) as caught:
        core.create_node({"metadata": {"name": "dup-node"}})
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert body["reason"] == "AlreadyExists"
    assert body["details"]["name"] == "dup-node"


def test_missing_name_is_invalid(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_node({"metadata": {}})
    assert caught.value.status == 422
    causes = json.loads(caught.value.body)["details"]["causes"]
    assert causes[0]["field"] == "metadata.name"


def test_get_missing_is_not_found(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("nope", "default")
    assert caught.value.status == 404
    assert json.loads(caught.value.body)["reason"] == "NotFound"


def test_namespaces_are_separate(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns-a", _pod("same"))
    core.create_namespaced_pod("ns-b", _pod("same"))
    assert [p.metadata.namespace for p in core.list_namespaced_pod("ns-a").items] == ["ns-a"]
    everywhere = core.list_pod_for_all_namespaces(field_selector="metadata.name=same")
    assert sorted(p.metadata.namespace for p in everywhere.items) == ["ns-a", "ns-b"]


def test_delete_and_deletecollection(core: client.CoreV1Api) -> None:
    for name in ("dc-1", "dc-2", "dc-3"):
        core.create_namespaced_pod("dc", _pod(name, labels={"set": "x"}))
    core.delete_namespaced_pod("dc-1", "dc")
    assert sorted(p.metadata.name for p in core.list_namespaced_pod("dc").items) == [
        "dc-2",
        "dc-3",
    ]
    core.delete_collection_namespaced_pod("dc", label_selector="set=x")
    assert core.list_namespaced_pod("dc").items == []


def test_stale_update_is_conflict(core: client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod("default", _pod("upd"))
    pod.metadata.labels = {"v": "1"}
    updated = core.replace_namespaced_pod("upd", "default", pod)
    assert updated.metadata.labels == {"v": "1"}
    assert int(updated.metadata.resource_version) > int(pod.metadata.resource_version)
    pod.metadata.labels = {"v": "2"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_pod("upd", "default", pod)
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["reason"] == "Conflict"


def test_main_resource_write_never_changes_status(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("st"))
    status = core.replace_namespaced_pod_status(
        "st", "default", {"metadata": {"name": "st"}, "status": {"phase": "Running"}}
    )
    assert status.status.phase == "Running"
    current = core.read_namespaced_pod("st", "default")
    current.status.phase = "Failed"
    current.metadata.labels = {"touched": "yes"}
    after = core.replace_namespaced_pod("st", "default", current)
    assert after.status.phase == "Running"
    assert after.metadata.labels == {"touched": "yes"}


def test_status_write_changes_only_status(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("st2", labels={"keep": "me"}))
    body = _pod("st2", labels={"ignored": "yes"})
    body["status"] = {"phase": "Succeeded"}
    after = core.replace_namespaced_pod_status("st2", "default", body)
    assert after.status.phase == "Succeeded"
    assert after.metadata.labels == {"keep": "me"}
    patched = core.patch_namespaced_pod_status(
        "st2",
        "default",
        {"metadata": {"labels": {"also": "ignored"}}, "status": {"phase": "Failed"}},
        _content_type="application/merge-patch+json",
    )
    assert patched.status.phase == "Failed"
    assert patched.metadata.labels == {"keep": "me"}


def test_status_subresource_only_where_declared(core: client.CoreV1Api, server: ApiServer) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    url = f"{server.url}/api/v1/namespaces/default/configmaps/cm/status"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url, timeout=5)
    assert caught.value.code == 404


def test_resource_k8s_io_through_typed_client(resource: client.ResourceV1Api) -> None:
    resource.create_device_class({"metadata": {"name": "gpu.example.com"}, "spec": {}})
    claim = resource.create_namespaced_resource_claim(
        "default",
        {
            "metadata": {"name": "claim"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
                }
            },
        },
    )
    assert claim.api_version == "resource.k8s.io/v1"
    allocated = resource.patch_namespaced_resource_claim_status(
        "claim",
        "default",
        {"status": {"allocation": {"devices": {"results": []}}}},
        _content_type="application/merge-patch+json",
    )
    assert allocated.status.allocation is not None
    assert [c.metadata.name for c in resource.list_device_class().items] == ["gpu.example.com"]
    resource.create_namespaced_resource_claim_template(
        "default", {"metadata": {"name": "tmpl"}, "spec": {"spec": {"devices": {}}}}
    )
    assert resource.read_namespaced_resource_claim_template("tmpl", "default").metadata.uid


def test_leases_through_custom_objects(custom: client.CustomObjectsApi) -> None:
    lease = custom.create_namespaced_custom_object(
        "coordination.k8s.io",
        "v1",
        "kube-system",
        "leases",
        {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}},
    )
    lease["spec"]["holderIdentity"] = "b"
    replaced = custom.replace_namespaced_custom_object(
        "coordination.k8s.io", "v1", "kube-system", "leases", "leader", lease
    )
    assert replaced["spec"]["holderIdentity"] == "b"
    assert replaced["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(
            "coordination.k8s.io", "v1", "kube-system", "leases", "leader", lease
        )
    assert caught.value.status == 409


def test_unknown_resource_is_not_found(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        custom.list_cluster_custom_object("example.com", "v1", "widgets")
    assert caught.value.status == 404


def test_dry_run_is_refused_rather_than_written(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map("dry", {"metadata": {"name": "x"}}, dry_run="All")
    assert caught.value.status == 400
    assert core.list_namespaced_config_map("dry").items == []


def test_raw_errors_are_status_objects_and_keep_alive_survives(server: ApiServer) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        headers = {"Content-Type": "application/json"}
        conn.request(
            "POST", "/api/v1/namespaces/raw/configmaps", body=b"{not json", headers=headers
        )
        bad = conn.getresponse()
        assert bad.status == 400
        assert json.loads(bad.read())["reason"] == "BadRequest"
        sock = conn.sock
        conn.request("POST", "/api/v1/pods", body=b'{"metadata": {"name": "x"}}', headers=headers)
        wrong_method = conn.getresponse()
        assert wrong_method.status == 405
        assert json.loads(wrong_method.read())["reason"] == "MethodNotAllowed"
        conn.request("GET", "/api/v1/namespaces/raw/configmaps")
        assert conn.getresponse().status == 200
        assert conn.sock is sock
    finally:
        conn.close()
