"""Discovery documents, as the dynamic client and `VersionApi` consume them."""

from __future__ import annotations

from kubernetes import client, dynamic


def test_version(api_client: client.ApiClient) -> None:
    info = client.VersionApi(api_client).get_code()
    assert info.major == "1"
    assert info.git_version.startswith("v1.")


def test_group_and_resource_lists(api_client: client.ApiClient) -> None:
    groups = client.ApisApi(api_client).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"resource.k8s.io", "coordination.k8s.io"} <= names
    core = client.CoreApi(api_client).get_api_versions()
    assert core.versions == ["v1"]
    resources = client.ResourceV1Api(api_client).get_api_resources()
    by_name = {r.name: r for r in resources.resources}
    assert by_name["resourceslices"].namespaced is False
    assert by_name["resourceclaims"].namespaced is True
    assert "resourceclaims/status" in by_name
    assert "watch" in by_name["resourceslices"].verbs
    pods = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert pods["pods"].kind == "Pod"
    assert "pods/status" in pods
    assert "configmaps/status" not in pods


def test_dynamic_client_round_trip(api_client: client.ApiClient) -> None:
    dyn = dynamic.DynamicClient(api_client)
    leases = dyn.resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    leases.create(body={"metadata": {"name": "dyn"}, "spec": {}}, namespace="default")
    found = leases.get(namespace="default", name="dyn")
    assert found.metadata.name == "dyn"
    assert found.metadata.uid


def test_default_namespaces_exist(api_client: client.ApiClient) -> None:
    names = {n.metadata.name for n in client.CoreV1Api(api_client).list_namespace().items}
    assert {"default", "kube-system"} <= names
