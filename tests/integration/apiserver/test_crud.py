"""Create, read, update, delete through the official client, with Kubernetes error shapes."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.apiserver.support import Raw, namespaces_fixture

namespaces = namespaces_fixture("ns-a", "ns-b", "dc", "dry", "raw")


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
    # A ConfigMap: nothing else writes it (kube-scheduler marks an unschedulable pod at once).
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "upd"}})
    cm.metadata.labels = {"v": "1"}
    updated = core.replace_namespaced_config_map("upd", "default", cm)
    assert updated.metadata.labels == {"v": "1"}
    assert int(updated.metadata.resource_version) > int(cm.metadata.resource_version)
    cm.metadata.labels = {"v": "2"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_config_map("upd", "default", cm)
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


def test_a_pod_status_write_keeps_the_spec_and_takes_the_labels(core: client.CoreV1Api) -> None:
    """The pod status strategy copies the old spec back and nothing else of note: labels and
    annotations written through `/status` stick (`podStatusStrategy.PrepareForUpdate`; claims
    and custom resources reset all metadata instead, see test_status_subresource)."""
    core.create_namespaced_pod("default", _pod("st2", labels={"keep": "me"}))
    body = _pod("st2", labels={"from": "status"})
    body["spec"]["containers"][0]["image"] = "other"  # type: ignore[index]
    body["status"] = {"phase": "Running"}
    after = core.replace_namespaced_pod_status("st2", "default", body)
    assert after.status.phase == "Running"
    assert after.spec.containers[0].image == "busybox"
    assert after.metadata.labels == {"from": "status"}
    patched = core.patch_namespaced_pod_status(
        "st2",
        "default",
        {"metadata": {"labels": {"also": "set"}}, "status": {"phase": "Succeeded"}},
        _content_type="application/merge-patch+json",
    )
    assert patched.status.phase == "Succeeded"
    assert patched.metadata.labels == {"from": "status", "also": "set"}


def test_status_subresource_only_where_declared(core: client.CoreV1Api, raw: Raw) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    status, _ = raw.send("GET", "/api/v1/namespaces/default/configmaps/cm/status")
    assert status == 404


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
    # Leases keep no generation: their strategy never sets one (ResourceSlices do).
    assert "generation" not in replaced["metadata"]
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(
            "coordination.k8s.io", "v1", "kube-system", "leases", "leader", lease
        )
    assert caught.value.status == 409


def test_unknown_resource_is_not_found(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        custom.list_cluster_custom_object("example.com", "v1", "widgets")
    assert caught.value.status == 404


# kube-apiserver serves dry runs (it answers as if it wrote); the embedded server refuses them
# with 400 rather than half-support them (docs/architecture.md).
@pytest.mark.embedded_only
def test_a_dry_run_is_refused_rather_than_written(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map("dry", {"metadata": {"name": "x"}}, dry_run="All")
    assert refused.value.status == 400
    assert json.loads(refused.value.body)["reason"] == "BadRequest"
    assert "x" not in [c.metadata.name for c in core.list_namespaced_config_map("dry").items]


def test_raw_errors_are_status_objects_and_keep_alive_survives(raw: Raw) -> None:
    conn = raw.connection()
    try:
        headers = {"Content-Type": "application/json"}
        bad = raw.request(conn, "POST", "/api/v1/namespaces/raw/configmaps", b"{not json", headers)
        assert bad.status == 400
        assert json.loads(bad.read())["reason"] == "BadRequest"
        sock = conn.sock
        body = b'{"metadata": {"name": "x"}}'
        wrong_method = raw.request(conn, "POST", "/api/v1/pods", body, headers)
        assert wrong_method.status == 405
        assert json.loads(wrong_method.read())["reason"] == "MethodNotAllowed"
        assert raw.request(conn, "GET", "/api/v1/namespaces/raw/configmaps").status == 200
        assert conn.sock is sock
    finally:
        conn.close()
