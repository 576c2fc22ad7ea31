"""The workload the controller weighs by, and `simulate --workload learned` replays: configured,
or learned pod by pod, each pod once."""

from __future__ import annotations

import pytest

from dra_driver.allocator import ClusterSnapshot, InputError
from dra_driver.noderesources import EMPTY
from dra_driver.simulation.replay import PodPlacement
from dra_driver.simulation.workload import REFRESH_PODS, PodShape, Workload, next_refresh, shape_of
from dra_driver.simulation.workload_source import MAX_ENTRIES, WorkloadSource
from dra_driver.workload_profile import ProfileEntry, entry_of
from tests.support import objects

CLASS = objects.device_class("gpu", "gpu.x", "drv")
SPEC = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.x"}}]}}


def _pod(name: str, cpu: str = "1") -> dict[str, object]:
    container = {"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}
    return objects.pod(name, containers=[container])


def _snapshot() -> ClusterSnapshot:
    return ClusterSnapshot.build([], [CLASS], [])


def test_a_pod_decided_again_counts_once_and_again_after_it_is_gone() -> None:
    source = WorkloadSource()
    claim = {"spec": SPEC}
    for _ in range(3):
        source.count(("ns", "a"), _pod("a"), [claim])
    source.count(("ns", "b"), _pod("b"), [claim])
    assert source.pods() == 2 and len(source.learned) == 1
    source.forget_pod(("ns", "a"))
    source.count(("ns", "a"), _pod("a"), [claim])  # a new pod of the same name
    assert source.pods() == 3


def test_the_learned_counts_make_the_workload_of_a_new_snapshot() -> None:
    source = WorkloadSource()
    for i in range(3):
        source.count(("ns", f"a{i}"), _pod(f"a{i}", "1"), [{"spec": SPEC}])
    source.count(("ns", "b"), _pod("b", "2"), [{"spec": SPEC}])
    workload = source.workload_for(_snapshot())
    assert [round(p, 2) for _, p in workload.distribution()] == [0.75, 0.25]
    assert not workload.fixed  # pods placed from now on add to it


def test_a_configured_profile_is_fixed_and_counts_nothing() -> None:
    entry = entry_of(_pod("x"), [{"spec": SPEC}])
    missing = {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "nope"}}]}}
    source = WorkloadSource(
        [ProfileEntry(entry.requests, entry.claims, 4), ProfileEntry(entry.requests, (missing,), 1)]
    )
    source.count(("ns", "a"), _pod("a", "8"), [{"spec": SPEC}])
    assert source.learned == {}
    workload = source.workload_for(_snapshot())
    assert workload.fixed and [p for _, p in workload.distribution()] == [1.0]
    assert len(source.skipped) == 1 and "shapes[1]" in source.skipped[0]
    assert "nope" in source.skipped[0]


def test_restored_counts_replace_what_was_held() -> None:
    source = WorkloadSource()
    source.count(("ns", "a"), _pod("a"), [{"spec": SPEC}])
    kept = entry_of(_pod("k", "3"), [{"spec": SPEC}], weight=5)
    epoch = source.epoch
    source.restore([kept])
    assert list(source.learned.values()) == [kept]
    assert source.epoch == epoch + 1  # the workload in use is made again


def test_learned_entries_are_bounded() -> None:
    source = WorkloadSource()
    for i in range(MAX_ENTRIES + 5):
        source.count(("ns", f"p{i}"), _pod(f"p{i}", f"{i + 1}m"), [])
    assert len(source.learned) == MAX_ENTRIES


def test_pods_of_a_shape_counted_before_add_to_its_entry() -> None:
    source = WorkloadSource()
    other = {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "gpu.x"}}]}}
    source.count(("ns", "a"), _pod("a"), [{"spec": SPEC}], shape="one-gpu")
    source.count(("ns", "b"), _pod("b"), [{"spec": other}], shape="one-gpu")
    source.count(("ns", "c"), _pod("c"), [{"spec": other}], shape="another")
    assert sorted(e.weight for e in source.learned.values()) == [1.0, 2.0]
    kept = next(e for e in source.learned.values() if e.weight == 2.0)
    assert kept.claims == (SPEC,)  # the first pod's specs stand for the shape


# --- when the learned weights move: one rule for the controller and `simulate --workload learned`


def _refreshes(workload: Workload, pods: int, shape: PodShape) -> list[int]:
    """The counts of pods at which observing `pods` pods one at a time refreshed the weights."""
    found = []
    for _ in range(pods):
        version = workload.version
        workload.observe(shape)
        if workload.version != version:
            found.append(workload.seen)
    return found


def test_learned_weights_refresh_at_each_doubling_then_every_so_many_pods() -> None:
    one = shape_of({"cpu": 1000}, [])
    assert _refreshes(Workload(refresh=8), 40, one) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert [next_refresh(n) for n in (1, 2, 1024, 2048, 4096)] == [2, 4, 2048, 4096, 6144]
    assert Workload().refresh == REFRESH_PODS == 2048


def test_between_refreshes_the_weights_are_those_of_the_last_refresh() -> None:
    small, big = shape_of({"cpu": 1000}, []), shape_of({"cpu": 8000}, [])
    workload = Workload()
    for shape in (small, small, small, small, big, big, big):  # refreshed at 1, 2 and 4 pods
        workload.observe(shape)
    assert [(s.requests, p) for s, p in workload.distribution()] == [((("cpu", 1000),), 1.0)]
    workload.observe(big)  # the 8th pod: a refresh
    assert sorted(p for _, p in workload.distribution()) == [0.5, 0.5]


def test_counts_made_again_weigh_at_once_and_refresh_next_at_their_doubling() -> None:
    """A new snapshot or counts taken back: every count weighs at once, and the next refresh
    is at twice their total, in whatever order the entries come."""
    for weights in ((60, 40), (40, 60)):
        source = WorkloadSource()
        source.restore(
            [
                entry_of(_pod("a", "1"), [{"spec": SPEC}], weight=weights[0]),
                entry_of(_pod("b", "2"), [{"spec": SPEC}], weight=weights[1]),
            ]
        )
        workload = source.workload_for(_snapshot())
        assert sorted(p for _, p in workload.distribution()) == [0.4, 0.6]
        assert _refreshes(workload, 100, shape_of({"cpu": 3000}, [])) == [200]


def _placement(shape: PodShape) -> PodPlacement:
    return PodPlacement("n1", [], None, EMPTY, shape)


def test_a_pod_is_counted_when_first_decided_and_the_placer_told_after() -> None:
    source = WorkloadSource()
    shape = shape_of({"cpu": 1000}, [])
    retries: list[bool] = []

    def place(retry: bool) -> PodPlacement:
        retries.append(retry)
        return _placement(shape)

    for _ in range(2):
        source.decide(("ns", "a"), _pod("a"), [], place)
    assert retries == [False, True] and source.pods() == 1

    def fails(retry: bool) -> PodPlacement:
        raise InputError("a claim that cannot be planned")

    with pytest.raises(InputError):
        source.decide(("ns", "b"), _pod("b"), [], fails)
    assert ("ns", "b") not in source.counted and source.pods() == 1


def test_a_pod_not_searched_counts_in_the_workload_once() -> None:
    source = WorkloadSource()
    workload = Workload()
    shape = shape_of({"cpu": 1000}, [])
    asked: list[int] = []

    def in_use() -> Workload:
        asked.append(1)
        return workload

    for _ in range(3):
        source.count_unsearched(("ns", "w"), _pod("w"), [], shape, in_use)
    assert workload.seen == 1 and len(asked) == 1 and source.pods() == 1
