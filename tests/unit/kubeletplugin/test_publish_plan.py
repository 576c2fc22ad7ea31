"""Publication plans keep the pool complete after every write but one short burst."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.allocator import ClusterSnapshot
from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import SliceSettings, build_resource_slices
from dra_driver.validation.defaults import with_defaults
from kubeletplugin.publisher.plan import NodeOwner, PublishPlan, plan_publication

OWNER = NodeOwner("node-a", "uid-node-a")
Obj = dict[str, Any]


def desired(spec: str = "H100-SXM5-80GB:2", **settings: Any) -> list[Obj]:
    backend = FakeBackend.from_spec(spec, "node-a")
    return build_resource_slices(backend.inventory(), SliceSettings(**settings))


class Store:
    """What the API server would hold: writes applied one at a time, with resourceVersions."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.version = 0

    def write(self, obj: Obj) -> None:
        self.version += 1
        stored = with_defaults("ResourceSlice", obj)  # a taint's timeAdded, as the server
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[obj["metadata"]["name"]] = stored

    def steps(self, plan: PublishPlan) -> list[list[Obj]]:
        """The stored slices after each write of the plan, in the order the publisher writes."""
        states = []
        for obj in [*plan.updates, *plan.creates]:
            current = self.objects.get(obj["metadata"]["name"])
            if "resourceVersion" in obj["metadata"]:
                assert current is not None
                assert obj["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
            self.write(obj)
            states.append(list(self.objects.values()))
        for name, _version in plan.deletes:
            del self.objects[name]
            states.append(list(self.objects.values()))
        return states

    def slices(self) -> list[Obj]:
        return list(self.objects.values())


def pool_problem(slices: list[Obj]) -> str | None:
    snapshot = ClusterSnapshot.build(slices, [])
    (pool,) = snapshot.pools
    return pool.problem


def test_first_publication_creates_every_slice_at_generation_one() -> None:
    plan = plan_publication(desired(), [], OWNER)
    assert plan.generation == 1 and not plan.updates and not plan.deletes
    assert len(plan.creates) == 3
    for obj in plan.creates:
        assert obj["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 3}
        assert obj["metadata"]["ownerReferences"] == [OWNER.reference()]
    store = Store()
    store.steps(plan)
    assert pool_problem(store.slices()) is None


def test_nothing_changed_means_nothing_to_write() -> None:
    store = Store()
    store.steps(plan_publication(desired(), [], OWNER))
    again = plan_publication(desired(), store.slices(), OWNER)
    assert again.empty and again.generation == 1


def test_changed_content_is_updated_in_place_and_the_pool_never_looks_incomplete() -> None:
    store = Store()
    store.steps(plan_publication(desired(), [], OWNER))
    changed = desired(timeslice_shares=2)
    plan = plan_publication(changed, store.slices(), OWNER)
    assert plan.generation == 1 and not plan.creates and not plan.deletes
    assert {o["metadata"]["name"] for o in plan.updates} >= {"node-a-gpu-dra-driver-dev-gpu-0"}
    for state in store.steps(plan):
        assert pool_problem(state) is None


def test_a_tainted_device_keeps_the_time_the_server_stamped_on_its_taint() -> None:
    taint = {"key": "gpu.dra-driver.dev/unhealthy", "value": "xid", "effect": "NoExecute"}
    tainted = desired(taints={0: [taint]})
    store = Store()
    store.steps(plan_publication(tainted, [], OWNER))
    name = "node-a-gpu-dra-driver-dev-gpu-0"
    (stored,) = store.objects[name]["spec"]["devices"][0]["taints"]
    stored["timeAdded"] = "2026-01-02T03:04:05Z"  # stamped long ago
    assert plan_publication(tainted, store.slices(), OWNER).empty
    # Another change to the same slice keeps the taint's time instead of restarting it.
    plan = plan_publication(desired(taints={0: [taint]}, timeslice_shares=2), store.slices(), OWNER)
    store.steps(plan)
    (kept,) = store.objects[name]["spec"]["devices"][0]["taints"]
    assert kept == {**taint, "timeAdded": "2026-01-02T03:04:05Z"}


@pytest.mark.parametrize(
    ("before", "after"),
    [("H100-SXM5-80GB:2", "H100-SXM5-80GB:1"), ("H100-SXM5-80GB:1", "H100-SXM5-80GB:2")],
)
def test_a_changed_set_of_slices_moves_to_the_next_generation(before: str, after: str) -> None:
    store = Store()
    store.steps(plan_publication(desired(before), [], OWNER))
    plan = plan_publication(desired(after), store.slices(), OWNER)
    assert plan.generation == 2
    states = store.steps(plan)
    writes = len(plan.updates) + len(plan.creates)
    # Complete again as soon as the last slice of the new generation is written, and from then on.
    for state in states[writes - 1 :]:
        assert pool_problem(state) is None
    assert {o["spec"]["pool"]["generation"] for o in store.slices()} == {2}
    assert sorted(o["metadata"]["name"] for o in store.slices()) == sorted(
        o["metadata"]["name"] for o in desired(after)
    )


def test_an_interrupted_publication_is_finished_at_a_new_generation() -> None:
    store = Store()
    store.steps(plan_publication(desired("H100-SXM5-80GB:1"), [], OWNER))
    half = plan_publication(desired("H100-SXM5-80GB:2"), store.slices(), OWNER)
    store.write(half.creates[0])  # crashed after one write: generations 1 and 2 mixed
    assert pool_problem(store.slices()) is not None
    plan = plan_publication(desired("H100-SXM5-80GB:2"), store.slices(), OWNER)
    assert plan.generation == 3
    store.steps(plan)
    assert pool_problem(store.slices()) is None
    assert {o["spec"]["pool"]["generation"] for o in store.slices()} == {3}


def test_slices_no_longer_published_are_deleted_with_their_version() -> None:
    store = Store()
    store.write(
        {
            "metadata": {"name": "old"},
            "spec": {
                "driver": "gpu.dra-driver.dev",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-a",
                "devices": [],
            },
        }
    )
    plan = plan_publication(desired(), store.slices(), OWNER)
    assert plan.deletes == [("old", "1")]
    assert plan.generation == 2


def test_desired_slices_must_have_distinct_names() -> None:
    slices = desired()
    with pytest.raises(ValueError, match="repeat a name"):
        plan_publication([slices[0], slices[0]], [], OWNER)
