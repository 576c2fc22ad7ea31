"""A pod's effective requests and NodeResourcesFit's verdicts, with values worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.noderesources import (
    NodeUsage,
    Resources,
    Shortfall,
    amount_of,
    free_on,
    insufficient,
    node_allocatable,
    pod_requests,
    render,
    usage_of,
)

GI = 2**30
MI = 2**20


def container(requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "c", "image": "x", **extra}
    if requests is not None:
        out.setdefault("resources", {})["requests"] = requests
    return out


def pod(
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers or [], **spec}
    if init is not None:
        body["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "d"}, "spec": body}


def node(allocatable: dict[str, Any] | None) -> dict[str, Any]:
    status = {} if allocatable is None else {"allocatable": allocatable}
    return {"metadata": {"name": "n1"}, "status": status}


# --- pod_requests ------------------------------------------------------------------------------


def test_regular_containers_are_summed_in_canonical_units() -> None:
    got = pod_requests(
        pod(
            [
                container({"cpu": "1500m", "memory": "2Gi"}),
                container({"cpu": "1", "memory": "512Mi"}),
            ]
        )
    )
    assert got == Resources({"cpu": 2500, "memory": 2 * GI + 512 * MI})


def test_fractions_round_up_like_milli_value() -> None:
    assert pod_requests(pod([container({"cpu": "0.0001", "memory": "1.5"})])) == Resources(
        {"cpu": 1, "memory": 2}
    )


def test_missing_requests_ask_nothing() -> None:
    assert pod_requests(pod([container(), container({})])) == Resources()
    assert pod_requests({"metadata": {"name": "p"}}) == Resources()


def test_limit_without_request_requests_the_limit() -> None:
    c = {
        "name": "c",
        "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1"}},
    }
    assert pod_requests(pod([c])) == Resources({"cpu": 1000, "memory": GI})


def test_init_container_bigger_than_the_containers_sets_the_request() -> None:
    # The upstream example: init 2 cpu/1G and 2 cpu/3G; containers 2 cpu/1G + 1 cpu/1G.
    got = pod_requests(
        pod(
            [container({"cpu": "2", "memory": "1G"}), container({"cpu": "1", "memory": "1G"})],
            init=[container({"cpu": "2", "memory": "1G"}), container({"cpu": "2", "memory": "3G"})],
        )
    )
    assert got == Resources({"cpu": 3000, "memory": 3 * 10**9})


def test_init_container_maximum_is_per_resource() -> None:
    got = pod_requests(
        pod(
            [container({"cpu": "1", "memory": "4Gi"})],
            init=[container({"cpu": "8", "memory": "1Gi"})],
        )
    )
    assert got == Resources({"cpu": 8000, "memory": 4 * GI})


def test_sidecars_add_to_the_containers_and_to_later_init_containers() -> None:
    sidecar = container({"cpu": "1", "memory": "1Gi"}, restartPolicy="Always")
    got = pod_requests(
        pod(
            [container({"cpu": "2", "memory": "1Gi"})],
            init=[
                container({"cpu": "3", "memory": "1Gi"}),  # before the sidecar: 3 cpu alone
                sidecar,
                container({"cpu": "4", "memory": "1Gi"}),  # after it: 4 + 1 = 5 cpu, 2Gi
            ],
        )
    )
    # Running: 2 + 1 = 3 cpu, 2Gi; the last init container's 5 cpu/2Gi is larger in cpu.
    assert got == Resources({"cpu": 5000, "memory": 2 * GI})


def test_sidecar_alone_counts_with_the_containers() -> None:
    got = pod_requests(
        pod([container({"cpu": "2"})], init=[container({"cpu": "1"}, restartPolicy="Always")])
    )
    assert got == Resources({"cpu": 3000})


def test_overhead_is_added() -> None:
    got = pod_requests(
        pod(
            [container({"cpu": "1"})],
            init=[container({"cpu": "4"})],
            overhead={"cpu": "250m", "memory": "120Mi"},
        )
    )
    assert got == Resources({"cpu": 4250, "memory": 120 * MI})


def test_pod_level_requests_replace_cpu_and_memory_only() -> None:
    got = pod_requests(
        pod(
            [container({"cpu": "1", "memory": "1Gi", "example.com/foo": "2"})],
            resources={"requests": {"cpu": "6"}},
            overhead={"cpu": "100m"},
        )
    )
    # cpu from the pod level (plus overhead); memory and the extended resource from containers.
    assert got == Resources({"cpu": 6100, "memory": GI, "example.com/foo": 2})


def test_pod_level_requests_of_unsupported_resources_are_ignored() -> None:
    got = pod_requests(
        pod([container({"cpu": "1"})], resources={"requests": {"example.com/foo": "3"}})
    )
    assert got == Resources({"cpu": 1000})


def test_extended_hugepages_and_storage_are_counted_other_names_not() -> None:
    got = pod_requests(
        pod(
            [
                container(
                    {
                        "ephemeral-storage": "10G",
                        "hugepages-2Mi": "4Mi",
                        "nvidia.com/gpu": "1",
                        "storage": "5Gi",
                        "example.com/zero": "0",
                    }
                )
            ]
        )
    )
    assert got == Resources(
        {"ephemeral-storage": 10 * 10**9, "hugepages-2Mi": 4 * MI, "nvidia.com/gpu": 1}
    )


def test_invalid_quantities_are_skipped() -> None:
    assert pod_requests(pod([container({"cpu": "lots", "memory": "1Ki"})])) == Resources(
        {"memory": 1024}
    )


# --- node_allocatable, usage ---------------------------------------------------------------------


def test_node_allocatable_parses_quantities() -> None:
    got = node_allocatable(
        node(
            {
                "cpu": "15500m",
                "memory": "62Gi",
                "pods": "110",
                "ephemeral-storage": "100Gi",
                "nvidia.com/gpu": "8",
            }
        )
    )
    assert got == Resources(
        {
            "cpu": 15500,
            "memory": 62 * GI,
            "pods": 110,
            "ephemeral-storage": 100 * GI,
            "nvidia.com/gpu": 8,
        }
    )


def test_node_without_allocatable_has_none() -> None:
    assert node_allocatable(node(None)) is None
    assert free_on(node(None), []) is None


def test_free_on_subtracts_the_pods_there() -> None:
    pods = [pod([container({"cpu": "2", "memory": "1Gi"})]), pod([container()])]
    free = free_on(node({"cpu": "8", "memory": "4Gi", "pods": "10"}), pods)
    assert free == Resources({"cpu": 6000, "memory": 3 * GI, "pods": 8})


def test_usage_add_and_remove() -> None:
    a = Resources({"cpu": 1000})
    used = NodeUsage().plus(a).plus(Resources())
    assert used == NodeUsage(Resources({"cpu": 1000}), 2)
    assert used.minus(a) == NodeUsage(Resources(), 1)
    assert usage_of([pod([container({"cpu": "1"})])]) == NodeUsage(a, 1)


def test_resources_arithmetic_drops_zeros() -> None:
    a = Resources({"cpu": 1000, "memory": 5})
    assert a - {"memory": 5} == Resources({"cpu": 1000})
    assert (a + {"pods": 1})["pods"] == 1
    assert Resources({"cpu": 0}) == Resources()


# --- insufficient ------------------------------------------------------------------------------

ALLOC = Resources({"cpu": 16000, "memory": 64 * GI, "pods": 110})


def test_fits_when_requests_are_within_what_is_free() -> None:
    used = NodeUsage(Resources({"cpu": 12000, "memory": 60 * GI}), 5)
    assert insufficient(Resources({"cpu": 4000, "memory": 4 * GI}), ALLOC, used) == []


def test_cpu_shortfall_names_cores() -> None:
    used = NodeUsage(Resources({"cpu": 12000}), 3)
    got = insufficient(Resources({"cpu": 16000}), ALLOC, used)
    assert got == [Shortfall("cpu", 16000, 4000)]
    assert str(got[0]) == "insufficient cpu (asks 16, 4 free)"


def test_memory_shortfall_in_a_readable_unit() -> None:
    used = NodeUsage(Resources({"memory": 62 * GI}), 1)
    got = insufficient(Resources({"memory": 3 * GI + GI // 2}), ALLOC, used)
    assert [str(s) for s in got] == ["insufficient memory (asks 3.5Gi, 2Gi free)"]


def test_only_requested_resources_are_checked() -> None:
    # cpu is over-committed already, but the pod asks only memory.
    used = NodeUsage(Resources({"cpu": 20000}), 1)
    assert insufficient(Resources({"memory": GI}), ALLOC, used) == []
    # A pod that asks nothing fits as long as the pod count allows.
    assert insufficient(Resources(), ALLOC, used) == []


def test_pod_count_is_always_checked() -> None:
    got = insufficient(Resources(), ALLOC, NodeUsage(Resources(), 110))
    assert got == [Shortfall("pods", 1, 0)]
    assert str(got[0]) == "too many pods (the node admits no more)"


def test_extended_resource_the_node_lacks_is_insufficient() -> None:
    got = insufficient(Resources({"example.com/foo": 1}), ALLOC, NodeUsage())
    assert [str(s) for s in got] == ["insufficient example.com/foo (asks 1, 0 free)"]


def test_several_shortfalls_in_the_scheduler_order() -> None:
    got = insufficient(
        Resources({"example.com/a": 1, "memory": 128 * GI, "cpu": 32000}), ALLOC, NodeUsage()
    )
    assert [s.resource for s in got] == ["cpu", "memory", "example.com/a"]


def test_overcommitted_node_shows_nothing_free() -> None:
    used = NodeUsage(Resources({"cpu": 20000}), 1)
    assert str(insufficient(Resources({"cpu": 500}), ALLOC, used)[0]) == (
        "insufficient cpu (asks 0.5, 0 free)"
    )


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("cpu", 1500, "1.5"),
        ("cpu", 250, "0.25"),
        ("cpu", 16000, "16"),
        ("memory", 2 * GI, "2Gi"),
        ("memory", 1536 * MI, "1.5Gi"),
        ("memory", 100, "100"),
        ("ephemeral-storage", 10 * GI, "10Gi"),
        ("nvidia.com/gpu", 3, "3"),
    ],
)
def test_render(resource: str, amount: int, text: str) -> None:
    assert render(resource, amount) == text


def test_rounded_equal_amounts_are_shown_exactly() -> None:
    s = Shortfall("memory", GI + 1, GI)
    assert str(s) == f"insufficient memory (asks {GI + 1}, {GI} free)"


# --- Resources, amounts ------------------------------------------------------------------------


def test_resources_behave_as_a_read_only_mapping() -> None:
    r = Resources([("cpu", 1000), ("memory", 0), ("pods", 3)])
    assert len(r) == 2 and list(r) == ["cpu", "pods"]
    assert dict(r) == {"cpu": 1000, "pods": 3}
    assert r["cpu"] == 1000 and r.amount("cpu") == 1000 and r.amount("memory") == 0
    with pytest.raises(KeyError):
        r["memory"]
    assert repr(r) == "Resources({'cpu': 1000, 'pods': 3})"
    same = Resources({"pods": 3, "cpu": 1000})
    assert hash(r) == hash(same) and len({r, same}) == 1
    assert hash(r) != hash(Resources({"cpu": 1000}))
    # Only another Resources is equal; a plain dict with the same items is not.
    assert r != {"cpu": 1000, "pods": 3}


def test_subtraction_goes_below_zero_and_maximum_takes_names_from_both() -> None:
    a = Resources({"cpu": 1000})
    assert a - {"memory": 5} == Resources({"cpu": 1000, "memory": -5})
    assert a.maximum({"memory": 5, "cpu": 500}) == Resources({"cpu": 1000, "memory": 5})
    assert Resources({"cpu": -3}).maximum({"cpu": -7}) == Resources({"cpu": -3})
    # Absent means zero, also when the other side is below it.
    assert Resources().maximum({"cpu": -2}) == Resources()


@pytest.mark.parametrize(
    ("name", "quantity", "expected"),
    [
        ("cpu", "250m", 250),
        ("cpu", 2, 2000),
        ("cpu", 0.5, 500),
        ("memory", "1.5", 2),
        ("memory", 1024, 1024),
        ("memory", "1Ki", 1024),
        ("cpu", True, None),
        ("cpu", None, None),
        ("cpu", ["1"], None),
        ("cpu", "lots", None),
    ],
)
def test_a_quantity_in_canonical_units(name: str, quantity: object, expected: int | None) -> None:
    assert amount_of(name, quantity) == expected


def test_a_request_written_as_zero_is_not_replaced_by_the_limit() -> None:
    c = {
        "name": "c",
        "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "0"}},
    }
    assert pod_requests(pod([c])) == Resources({"memory": GI})


def test_limits_count_when_requests_are_missing_or_not_an_object() -> None:
    c = {"name": "c", "resources": {"limits": {"cpu": "2"}, "requests": "nonsense"}}
    assert pod_requests(pod([c])) == Resources({"cpu": 2000})
    bare = {"name": "c", "resources": None}
    assert pod_requests(pod([bare, container({"cpu": "1"})])) == Resources({"cpu": 1000})


def test_pod_level_requests_replace_memory_and_hugepages_too() -> None:
    got = pod_requests(
        pod(
            [container({"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi"})],
            resources={"requests": {"memory": "3Gi", "hugepages-2Mi": "8Mi", "storage": "1"}},
        )
    )
    assert got == Resources({"cpu": 1000, "memory": 3 * GI, "hugepages-2Mi": 8 * MI})


def test_a_pod_level_request_that_is_not_a_quantity_asks_nothing() -> None:
    got = pod_requests(
        pod([container({"cpu": "1", "memory": "1Gi"})], resources={"requests": {"cpu": "x"}})
    )
    assert got == Resources({"memory": GI})


def test_a_pod_without_a_spec_or_with_null_lists_asks_nothing() -> None:
    assert pod_requests({"spec": None}) == Resources()
    assert pod_requests({"spec": {"containers": None, "initContainers": None}}) == Resources()
    assert pod_requests(pod([container({"cpu": "1"})], resources=None)) == Resources({"cpu": 1000})


def test_an_init_container_after_a_sidecar_needs_both_and_sidecars_accumulate() -> None:
    first = container({"cpu": "1"}, restartPolicy="Always")
    second = container({"cpu": "2"}, restartPolicy="Always")
    late = container({"cpu": "4"}, restartPolicy="OnFailure")
    got = pod_requests(pod([container({"cpu": "1"})], init=[first, second, late]))
    # While `late` runs: 1 + 2 + 4 = 7; afterwards: 1 + 1 + 2 = 4.
    assert got == Resources({"cpu": 7000})


def test_allocatable_keeps_pods_and_counted_resources_only() -> None:
    got = node_allocatable(
        node({"cpu": "4", "pods": "10", "storage": "1Ti", "hugepages-1Gi": "2Gi", "foo": "1"})
    )
    assert got == Resources({"cpu": 4000, "pods": 10, "hugepages-1Gi": 2 * GI})
    assert node_allocatable({"status": {"allocatable": "8"}}) is None
    assert node_allocatable({"status": None}) is None
    assert node_allocatable({}) is None


# --- insufficient, render ---------------------------------------------------------------------


def test_the_last_pod_slot_and_the_last_core_are_taken_exactly() -> None:
    alloc = Resources({"cpu": 4000, "pods": 3})
    assert (
        insufficient(Resources({"cpu": 1000}), alloc, NodeUsage(Resources({"cpu": 3000}), 2)) == []
    )
    assert insufficient(Resources({"cpu": 4000}), alloc) == []
    assert insufficient(Resources({"cpu": 4001}), alloc) == [Shortfall("cpu", 4001, 4000)]


def test_a_node_with_more_pods_than_it_admits_has_none_free() -> None:
    got = insufficient(Resources(), Resources({"pods": 2}), NodeUsage(Resources(), 5))
    assert got == [Shortfall("pods", 1, 0)]
    assert insufficient(Resources(), Resources()) == [Shortfall("pods", 1, 0)]


def test_other_resources_are_checked_after_the_first_ones_by_name() -> None:
    alloc = Resources({"pods": 10})
    got = insufficient(
        Resources({"example.com/b": 1, "ephemeral-storage": 1, "example.com/a": 1}), alloc
    )
    assert [s.resource for s in got] == ["ephemeral-storage", "example.com/a", "example.com/b"]


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("memory", GI, "1Gi"),
        ("memory", MI, "1Mi"),
        ("memory", MI - 1, str(MI - 1)),
        ("memory", GI * 7 // 4, "1.8Gi"),
        ("memory", 2**40, "1Ti"),
        ("memory", 3 * 2**50, "3Pi"),
        ("memory", 2**60, "1Ei"),
        ("hugepages-2Mi", 4 * MI, "4Mi"),
        ("ephemeral-storage", 5 * MI // 2, "2.5Mi"),
        ("cpu", 1, "0.001"),
        ("cpu", 0, "0"),
        ("cpu", 10000, "10"),
        ("cpu", 120000, "120"),
        ("pods", 110, "110"),
    ],
)
def test_render_units(resource: str, amount: int, text: str) -> None:
    assert render(resource, amount) == text


def test_shortfalls_of_hugepages_and_of_counts_read_in_their_units() -> None:
    alloc = Resources({"pods": 10, "hugepages-2Mi": 4 * MI, "nvidia.com/gpu": 1})
    got = insufficient(Resources({"hugepages-2Mi": 6 * MI, "nvidia.com/gpu": 2}), alloc)
    assert [str(s) for s in got] == [
        "insufficient hugepages-2Mi (asks 6Mi, 4Mi free)",
        "insufficient nvidia.com/gpu (asks 2, 1 free)",
    ]
