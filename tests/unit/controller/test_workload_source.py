"""The controller's workload: configured, or learned pod by pod, each pod once."""

from __future__ import annotations

from controller.workload_profile import MAX_ENTRIES, WorkloadSource
from dra_driver.allocator import ClusterSnapshot
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
