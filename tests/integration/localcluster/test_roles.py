"""Control-plane stand-ins on the embedded API server: claims from templates, scheduling."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, dynamic

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake import FakeBackend
from dra_driver.checker.rules import check_allocations
from dra_driver.slices import SliceSettings, build_resource_slices
from localcluster import ApiServer
from localcluster.roles import claims_from_templates, scheduler
from tests.support import objects

# The stand-ins (scheduler, claims from templates, kubelet) themselves, on the embedded server;
# the upstream tier runs the real control plane instead.
pytestmark = pytest.mark.embedded_only

Obj = dict[str, Any]
DRV = DEFAULT_DRIVER_NAME


@pytest.fixture
def cluster() -> Iterator[dynamic.DynamicClient]:
    with ApiServer(port=0) as server:
        api = client.ApiClient(client.Configuration(host=server.url))
        yield dynamic.DynamicClient(api)
        api.close()


def kind(dyn: dynamic.DynamicClient, api_version: str, name: str) -> Any:
    return dyn.resources.get(api_version=api_version, kind=name)


def items(dyn: dynamic.DynamicClient, api_version: str, name: str) -> list[Obj]:
    return list(kind(dyn, api_version, name).get().to_dict().get("items") or [])


def setup_node(dyn: dynamic.DynamicClient, name: str = "node-a") -> None:
    kind(dyn, "v1", "Node").create(body={"metadata": {"name": name}})
    backend = FakeBackend.from_spec("H100-SXM5-80GB:1", name)
    slices = kind(dyn, "resource.k8s.io/v1", "ResourceSlice")
    for obj in build_resource_slices(backend.inventory(), SliceSettings()):
        slices.create(body=obj)
    expression = f'device.driver == "{DRV}" && device.attributes["{DRV}"].type == "gpu"'
    kind(dyn, "resource.k8s.io/v1", "DeviceClass").create(
        body={
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
    )
    kind(dyn, "resource.k8s.io/v1", "ResourceClaimTemplate").create(
        namespace="default",
        body={
            "metadata": {"name": "one-gpu", "namespace": "default"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]
                    }
                }
            },
        },
    )


def make_pod(dyn: dynamic.DynamicClient, name: str, **spec: Any) -> None:
    body = objects.pod(name, templates={"gpu": "one-gpu"}, **spec)
    kind(dyn, "v1", "Pod").create(body=body, namespace="default")


def pod(dyn: dynamic.DynamicClient, name: str) -> Obj:
    found: Obj = kind(dyn, "v1", "Pod").get(name=name, namespace="default").to_dict()
    return found


def test_claims_are_made_from_templates_once_and_owned_by_the_pod(
    cluster: dynamic.DynamicClient,
) -> None:
    setup_node(cluster)
    make_pod(cluster, "trainer")
    assert claims_from_templates.reconcile_once(cluster) == 1
    assert claims_from_templates.reconcile_once(cluster) == 0
    (claim,) = items(cluster, "resource.k8s.io/v1", "ResourceClaim")
    assert claim["metadata"]["name"].startswith("trainer-gpu-")
    assert (
        claim["metadata"]["ownerReferences"][0]["uid"] == pod(cluster, "trainer")["metadata"]["uid"]
    )
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu"
    assert pod(cluster, "trainer")["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}
    ]
    kind(cluster, "v1", "Pod").delete(name="trainer", namespace="default")
    assert items(cluster, "resource.k8s.io/v1", "ResourceClaim") == []


def test_the_scheduler_allocates_binds_and_leaves_what_does_not_fit(
    cluster: dynamic.DynamicClient,
) -> None:
    setup_node(cluster)
    make_pod(cluster, "first")
    make_pod(cluster, "second")
    make_pod(cluster, "gated", schedulingGates=[{"name": f"{DRV}/allocation"}])
    assert scheduler.reconcile_once(cluster) == 0  # no claims yet: nothing to schedule
    claims_from_templates.reconcile_once(cluster)
    assert scheduler.reconcile_once(cluster) == 1
    assert pod(cluster, "first")["spec"]["nodeName"] == "node-a"
    assert not pod(cluster, "second")["spec"].get("nodeName")  # the only GPU is taken
    assert not pod(cluster, "gated")["spec"].get("nodeName")
    claims = items(cluster, "resource.k8s.io/v1", "ResourceClaim")
    allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
    assert len(allocated) == 1
    status = allocated[0]["status"]
    assert [r["device"] for r in status["allocation"]["devices"]["results"]] == ["gpu-0"]
    assert status["reservedFor"] == [
        {"resource": "pods", "name": "first", "uid": pod(cluster, "first")["metadata"]["uid"]}
    ]
    slices = items(cluster, "resource.k8s.io/v1", "ResourceSlice")
    classes = items(cluster, "resource.k8s.io/v1", "DeviceClass")
    assert check_allocations(slices, classes, claims) == []
    assert scheduler.reconcile_once(cluster) == 0


def test_the_scheduler_leaves_a_pod_whose_claim_changed_since_it_was_read(
    cluster: dynamic.DynamicClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its writes carry the resourceVersion it read, as the kube-scheduler's do: a claim
    written meanwhile (by the controller, say) refuses the write, the pod stays unbound, and
    the next pass binds it to what the claim holds then."""
    setup_node(cluster)
    make_pod(cluster, "first")
    claims_from_templates.reconcile_once(cluster)
    found = scheduler._clash
    claims = kind(cluster, "resource.k8s.io/v1", "ResourceClaim")

    def written_meanwhile(*args: Any) -> str | None:
        (claim,) = items(cluster, "resource.k8s.io/v1", "ResourceClaim")
        claims.patch(  # another writer's change after the pass read the claim
            body={"metadata": {"labels": {"touched": "yes"}}},
            name=claim["metadata"]["name"],
            namespace="default",
            content_type="application/merge-patch+json",
        )
        monkeypatch.setattr(scheduler, "_clash", found)
        return found(*args)

    monkeypatch.setattr(scheduler, "_clash", written_meanwhile)
    assert scheduler.reconcile_once(cluster) == 0
    assert not pod(cluster, "first")["spec"].get("nodeName")
    (claim,) = items(cluster, "resource.k8s.io/v1", "ResourceClaim")
    assert not (claim.get("status") or {}).get("allocation")
    assert scheduler.reconcile_once(cluster) == 1
    assert pod(cluster, "first")["spec"]["nodeName"] == "node-a"


def test_reservations_of_pods_that_are_gone_or_will_never_run_are_dropped(
    cluster: dynamic.DynamicClient,
) -> None:
    setup_node(cluster)
    claims = kind(cluster, "resource.k8s.io/v1", "ResourceClaim")
    claims.create(
        namespace="default",
        body={
            "metadata": {"name": "shared", "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu"}}]}
            },
        },
    )
    make_pod(cluster, "running", nodeName="node-a")
    make_pod(cluster, "finished")
    kind(cluster, "v1", "Pod").status.patch(
        body={"status": {"phase": "Succeeded"}},
        name="finished",
        namespace="default",
        content_type="application/merge-patch+json",
    )

    def ref(name: str, uid: str | None = None) -> Obj:
        return {
            "resource": "pods",
            "name": name,
            "uid": uid or pod(cluster, name)["metadata"]["uid"],
        }

    reserved = [ref("running"), ref("finished"), ref("deleted-long-ago", "uid-gone")]
    # Reservations need an allocation, as kube-apiserver's status validation requires.
    result = {"request": "g", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"}
    allocation = {"devices": {"results": [result]}}
    claims.status.patch(
        body={"status": {"allocation": allocation, "reservedFor": reserved}},
        name="shared",
        namespace="default",
        content_type="application/merge-patch+json",
    )
    assert claims_from_templates.drop_stale_reservations(cluster) == 1
    claim = claims.get(name="shared", namespace="default").to_dict()
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["running"]
    assert claims_from_templates.drop_stale_reservations(cluster) == 0
