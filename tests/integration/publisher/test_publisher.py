"""The slice publisher against the embedded API server, through the official client."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import ClusterSnapshot
from dra_driver.backends.fake import FakeBackend
from dra_driver.inventory.products import known_products
from dra_driver.slices import SliceSettings, build_resource_slices, check_limits
from kubeletplugin.publisher.plan import NodeOwner
from kubeletplugin.publisher.publisher import SlicePublisher
from kubeletplugin.publisher.store import KubernetesSliceStore
from localcluster.control_planes import Server, api_server
from tests.support import polling

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with api_server() as running:
        yield running


@pytest.fixture
def api(server: Server) -> Iterator[client.ApiClient]:
    config = server.configuration()
    with client.ApiClient(config) as api_client:
        yield api_client


_NODES = iter(range(1000))


@pytest.fixture
def node(api: client.ApiClient) -> NodeOwner:
    name = f"node-{next(_NODES)}"
    created = client.CoreV1Api(api).create_node(
        client.V1Node(metadata=client.V1ObjectMeta(name=name))
    )
    return NodeOwner(name, str(created.metadata.uid))


class Builder:
    """The node's slices from a fake backend, with settings a test can change between rounds."""

    def __init__(self, node: str, spec: str = "H100-SXM5-80GB:2") -> None:
        self.backend = FakeBackend.from_spec(spec, node)
        self.taints: dict[int, list[Obj]] = {}

    def __call__(self, partitionable: bool) -> list[Obj]:
        settings = SliceSettings(partitionable=partitionable, taints=self.taints)
        return build_resource_slices(self.backend.inventory(), settings)


def stored(api: client.ApiClient, node: str) -> list[Obj]:
    return KubernetesSliceStore(api).list(node, DEFAULT_DRIVER_NAME)


def pool_complete(slices: Sequence[Mapping[str, Any]]) -> bool:
    snapshot = ClusterSnapshot.build(slices, [])
    return all(pool.problem is None for pool in snapshot.pools)


def test_publishes_a_complete_valid_pool_owned_by_the_node(
    api: client.ApiClient, node: NodeOwner
) -> None:
    publisher = SlicePublisher(
        KubernetesSliceStore(api), node, DEFAULT_DRIVER_NAME, Builder(node.name)
    )
    result = publisher.publish()
    assert (result.generation, result.written, result.deleted) == (1, 3, 0)
    slices = stored(api, node.name)
    assert len(slices) == 3 and pool_complete(slices)
    assert check_limits(slices) == []
    for obj in slices:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == node.uid
        # kube-apiserver leaves kind and apiVersion out of a list's items.
        typed = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **obj}
        kubernetes_validate.validate(typed, "1.36.0", strict=True)
    # Publishing again with nothing changed writes nothing.
    again = publisher.publish()
    assert (again.written, again.deleted, again.generation) == (0, 0, 1)


def test_a_health_change_updates_in_place_and_a_new_gpu_set_bumps_the_generation(
    api: client.ApiClient, node: NodeOwner
) -> None:
    build = Builder(node.name)
    publisher = SlicePublisher(KubernetesSliceStore(api), node, DEFAULT_DRIVER_NAME, build)
    publisher.publish()
    build.taints = {
        1: [{"key": "gpu.dra-driver.dev/unhealthy", "value": "xid-79", "effect": "NoSchedule"}]
    }
    result = publisher.publish()
    assert (result.generation, result.written) == (1, 1)
    # The server stamps the taint's timeAdded; that is no change to write again.
    assert publisher.publish().written == 0
    tainted = [
        d["name"]
        for obj in stored(api, node.name)
        for d in obj["spec"].get("devices") or []
        if d.get("taints")
    ]
    assert tainted and all(name.startswith("gpu-1") for name in tainted)
    smaller = SlicePublisher(
        KubernetesSliceStore(api), node, DEFAULT_DRIVER_NAME, Builder(node.name, "H100-SXM5-80GB:1")
    )
    result = smaller.publish()
    assert (result.generation, result.deleted) == (2, 1)
    slices = stored(api, node.name)
    assert len(slices) == 2 and pool_complete(slices)
    assert {o["spec"]["pool"]["generation"] for o in slices} == {2}


class ConflictOnce(KubernetesSliceStore):
    """Someone else writes a slice between the publisher's read and its write, once."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self.armed = True

    def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        if self.armed:
            self.armed = False
            other = copy.deepcopy(dict(obj))
            other["metadata"].pop("resourceVersion", None)
            current = super().list(obj["spec"]["nodeName"], obj["spec"]["driver"])
            mine = next(o for o in current if o["metadata"]["name"] == obj["metadata"]["name"])
            other["metadata"]["resourceVersion"] = mine["metadata"]["resourceVersion"]
            other["metadata"]["labels"] = {"touched": "yes"}
            super().replace(other)
        return super().replace(obj)


def test_a_conflicting_write_is_retried_from_a_fresh_read(
    api: client.ApiClient, node: NodeOwner
) -> None:
    build = Builder(node.name)
    SlicePublisher(KubernetesSliceStore(api), node, DEFAULT_DRIVER_NAME, build).publish()
    build.taints = {0: [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    pauses: list[float] = []
    publisher = SlicePublisher(
        ConflictOnce(api), node, DEFAULT_DRIVER_NAME, build, sleep=pauses.append
    )
    result = publisher.publish()
    assert result.attempts == 2 and len(pauses) == 1
    assert pool_complete(stored(api, node.name))


class DropsPartitionableFields(KubernetesSliceStore):
    """An API server without partitionable devices: it strips their fields from what it stores."""

    @staticmethod
    def strip(obj: Mapping[str, Any]) -> dict[str, Any]:
        plain = copy.deepcopy(dict(obj))
        plain["spec"].pop("sharedCounters", None)
        for device in plain["spec"].get("devices") or []:
            device.pop("consumesCounters", None)
            device.pop("allowMultipleAllocations", None)
            for capacity in (device.get("capacity") or {}).values():
                capacity.pop("requestPolicy", None)
        return plain

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return super().create(self.strip(obj))

    def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return super().replace(self.strip(obj))


def test_dropped_fields_switch_to_the_fallback_layout_with_a_warning(
    api: client.ApiClient, node: NodeOwner
) -> None:
    warnings: list[str] = []
    publisher = SlicePublisher(
        DropsPartitionableFields(api),
        node,
        DEFAULT_DRIVER_NAME,
        Builder(node.name),
        warn=warnings.append,
    )
    result = publisher.publish()
    assert not result.partitionable and result.dropped
    assert warnings and "spec.sharedCounters" in warnings[0]
    slices = stored(api, node.name)
    assert pool_complete(slices)
    kinds = {
        d["attributes"]["type"]["string"] for o in slices for d in o["spec"].get("devices") or []
    }
    assert kinds <= {"gpu", "mig"}


def test_withdraw_and_node_deletion_leave_no_slices(api: client.ApiClient, node: NodeOwner) -> None:
    publisher = SlicePublisher(
        KubernetesSliceStore(api), node, DEFAULT_DRIVER_NAME, Builder(node.name)
    )
    publisher.publish()
    assert publisher.withdraw() == 3
    assert stored(api, node.name) == []
    publisher.publish()
    client.CoreV1Api(api).delete_node(node.name)
    # The garbage collector deletes the Node's dependents: at once on the embedded server, a
    # moment later in kube-controller-manager.
    polling.wait_until(lambda: stored(api, node.name) == [], "the node's slices collected")


@pytest.mark.parametrize("product", sorted(known_products()))
@pytest.mark.parametrize("partitionable", [True, False], ids=["partitionable", "fallback"])
def test_every_fake_gpu_profile_is_stored_as_published(
    api: client.ApiClient, node: NodeOwner, product: str, partitionable: bool
) -> None:
    """Eight GPUs of each product, every MIG placement and share: the API server (on the
    upstream tier, kube-apiserver 1.37 with its own validation) takes every slice and keeps
    every device and counter set."""
    build = Builder(node.name, f"{product}:8")
    publisher = SlicePublisher(
        KubernetesSliceStore(api), node, DEFAULT_DRIVER_NAME, lambda _: build(partitionable)
    )
    result = publisher.publish()
    slices = stored(api, node.name)
    assert result.written == len(slices) > 0 and pool_complete(slices)

    def contents(objects: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
        devices = sorted(d["name"] for o in objects for d in o["spec"].get("devices") or [])
        counters = sorted(c["name"] for o in objects for c in o["spec"].get("sharedCounters") or [])
        return devices, counters

    assert contents(slices) == contents(build(partitionable))
