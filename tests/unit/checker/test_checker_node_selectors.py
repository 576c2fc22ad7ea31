"""The node selector an allocation must carry when its devices each have their own
(`perDeviceNodeSelection`): the devices' selector when they agree, and Kubernetes' merge of
one-term selectors into one term (every requirement once) in any case."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.checker.rules import Violation, check_allocations
from tests.unit.checker.test_checker import NIC, Obj, claim, cluster, device, devices_slice
from tests.unit.checker.test_checker import exactly as exactly_one
from tests.unit.checker.test_checker import result as result_of


def label_is(key: str, value: str) -> Obj:
    return {"key": key, "operator": "In", "values": [value]}


NAME_IS_A = {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
IN_RACK = {"nodeSelectorTerms": [{"matchExpressions": [label_is("rack", "r1")]}]}
IN_ZONE = {"nodeSelectorTerms": [{"matchExpressions": [label_is("zone", "z1")]}]}
NAMED = {"nodeSelectorTerms": [{"matchFields": [NAME_IS_A]}]}
EITHER = {
    "nodeSelectorTerms": [
        {"matchExpressions": [label_is("rack", "r1")]},
        {"matchExpressions": [label_is("zone", "z1")]},
    ]
}
EDGE = {
    "in-rack": IN_RACK,
    "in-rack-too": IN_RACK,
    "in-zone": IN_ZONE,
    "named": NAMED,
    "either": EITHER,
}


def check_edge(devices: list[str], selector: Any) -> list[Violation]:
    """One claim for `devices` of the edge pool (in this order), written with `selector`."""
    slices, classes, nodes = cluster()
    nodes[0]["metadata"]["labels"] = {"rack": "r1", "zone": "z1"}
    edge = [{**device(name, "vf"), "nodeSelector": s} for name, s in EDGE.items()]
    slices.append(devices_slice("edge", None, NIC, "edge", edge, perDeviceNodeSelection=True))
    taken = claim(
        "edge",
        [exactly_one("n", "nic", count=len(devices))],
        [result_of("n", name, "edge", NIC) for name in devices],
        node=None,
    )
    taken["status"]["allocation"]["nodeSelector"] = selector
    return check_allocations(slices, classes, [taken], nodes)


def test_devices_that_agree_need_their_selector() -> None:
    assert check_edge(["in-rack", "in-rack-too"], IN_RACK) == []
    assert check_edge(["in-rack"], IN_RACK) == []
    # Written with empty lists a JSON writer may add, it is the same selector.
    padded = {
        "nodeSelectorTerms": [{"matchExpressions": [label_is("rack", "r1")], "matchFields": []}]
    }
    assert check_edge(["in-rack", "in-rack-too"], padded) == []
    assert check_edge(["in-rack", "in-rack-too"], IN_ZONE) == [
        Violation(
            "default/edge",
            "node-selector",
            f"claim default/edge: nodeSelector is {IN_ZONE}, expected {IN_RACK} (allocation "
            "checked on node node-a)",
        )
    ]


def test_devices_that_disagree_need_one_term_with_every_requirement_once() -> None:
    merged = {
        "nodeSelectorTerms": [
            {"matchExpressions": [label_is("rack", "r1"), label_is("zone", "z1")]}
        ]
    }
    assert check_edge(["in-rack", "in-rack-too", "in-zone"], merged) == []
    twice = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    label_is("rack", "r1"),
                    label_is("rack", "r1"),
                    label_is("zone", "z1"),
                ]
            }
        ]
    }
    for wrong in (IN_RACK, IN_ZONE, twice, None):
        assert check_edge(["in-rack", "in-rack-too", "in-zone"], wrong) == [
            Violation(
                "default/edge",
                "node-selector",
                f"claim default/edge: nodeSelector is {wrong}, expected {merged} (allocation "
                "checked on node node-a)",
            )
        ]


def test_fields_and_expressions_are_merged_into_one_term() -> None:
    merged = {
        "nodeSelectorTerms": [
            {"matchFields": [NAME_IS_A], "matchExpressions": [label_is("rack", "r1")]}
        ]
    }
    assert check_edge(["in-rack", "named"], merged) == []
    fields_only = {"nodeSelectorTerms": [{"matchFields": [NAME_IS_A]}]}
    assert [v.rule for v in check_edge(["in-rack", "named"], fields_only)] == ["node-selector"]


def test_a_selector_of_several_terms_is_not_merged() -> None:
    # Kubernetes merges one-term selectors only: no selector fits a device whose selector has
    # two terms beside one that differs, and the message says so.
    for written in (EITHER, IN_RACK):
        assert check_edge(["in-rack", "either"], written) == [
            Violation(
                "default/edge",
                "node-selector",
                f"claim default/edge: nodeSelector is {written}, expected one of the devices "
                "selectors (allocation checked on node node-a)",
            )
        ]
    assert check_edge(["either"], EITHER) == []


def on_one_node(labels: dict[str, str], selector: Obj) -> list[Violation]:
    """A device of a slice published for `selector`, allocated with that selector, in a
    cluster whose only node, node-a, has `labels`: no violation exactly when node-a matches."""
    _, classes, _ = cluster()
    slices = [
        devices_slice("rack", None, NIC, "rack", [device("link", "vf")], nodeSelector=selector)
    ]
    taken = claim(
        "rack", [exactly_one("n", "nic")], [result_of("n", "link", "rack", NIC)], node=None
    )
    taken["status"]["allocation"]["nodeSelector"] = selector
    nodes = [{"metadata": {"name": "node-a", "labels": labels}}]
    return check_allocations(slices, classes, [taken], nodes)


def one_term(*requirements: Obj, fields: tuple[Obj, ...] = ()) -> Obj:
    term: Obj = {"matchExpressions": list(requirements)}
    if fields:
        term["matchFields"] = list(fields)
    return {"nodeSelectorTerms": [term]}


def requirement(key: str, operator: str, *values: str) -> Obj:
    found: Obj = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


@pytest.mark.parametrize(
    ("labels", "selector", "matches"),
    [
        ({"rack": "r1"}, one_term(requirement("rack", "In", "r0", "r1")), True),
        ({"rack": "r2"}, one_term(requirement("rack", "In", "r0", "r1")), False),
        ({}, one_term(requirement("rack", "In", "r1")), False),
        ({"rack": "r2"}, one_term(requirement("rack", "NotIn", "r1")), True),
        ({}, one_term(requirement("rack", "NotIn", "r1")), True),
        ({"rack": "r1"}, one_term(requirement("rack", "NotIn", "r1")), False),
        ({"rack": ""}, one_term(requirement("rack", "Exists")), True),
        ({}, one_term(requirement("rack", "Exists")), False),
        ({}, one_term(requirement("rack", "DoesNotExist")), True),
        ({"rack": "r1"}, one_term(requirement("rack", "DoesNotExist")), False),
        ({"gen": "4"}, one_term(requirement("gen", "Gt", "3")), True),
        ({"gen": "3"}, one_term(requirement("gen", "Gt", "3")), False),
        ({"gen": "2"}, one_term(requirement("gen", "Lt", "3")), True),
        ({"gen": "3"}, one_term(requirement("gen", "Lt", "3")), False),
        ({"gen": "4"}, one_term(requirement("gen", "Lt", "3")), False),
        ({"gen": "new"}, one_term(requirement("gen", "Gt", "3")), False),
        ({"gen": "4"}, one_term(requirement("gen", "Gt", "three")), False),
        ({"gen": "4"}, one_term(requirement("gen", "Gt", "3", "5")), False),
        ({}, one_term(requirement("gen", "Lt", "3")), False),
        ({"rack": "r1"}, one_term(requirement("rack", "Like", "r1")), False),
        # Requirements within a term all hold; terms are alternatives; an empty term is none.
        (
            {"rack": "r1", "zone": "z1"},
            one_term(requirement("rack", "In", "r1"), requirement("zone", "In", "z1")),
            True,
        ),
        (
            {"rack": "r1", "zone": "z1"},
            one_term(requirement("rack", "In", "r1"), requirement("zone", "In", "z2")),
            False,
        ),
        (
            {"rack": "r1"},
            {
                "nodeSelectorTerms": [
                    {"matchExpressions": [requirement("rack", "In", "r2")]},
                    {"matchExpressions": [requirement("rack", "In", "r1")]},
                ]
            },
            True,
        ),
        ({"rack": "r1"}, {"nodeSelectorTerms": [{}]}, False),
        (
            {"rack": "r1"},
            {"nodeSelectorTerms": [{}, {"matchExpressions": [requirement("rack", "In", "r1")]}]},
            True,
        ),
        ({}, one_term(fields=(requirement("metadata.name", "In", "node-a"),)), True),
        ({}, one_term(fields=(requirement("metadata.name", "NotIn", "node-a"),)), False),
        (
            {"rack": "r1"},
            one_term(
                requirement("rack", "In", "r2"),
                fields=(requirement("metadata.name", "In", "node-a"),),
            ),
            False,
        ),
    ],
)
def test_a_slice_for_a_node_selector_applies_to_the_nodes_it_matches(
    labels: dict[str, str], selector: Obj, matches: bool
) -> None:
    found = on_one_node(labels, selector)
    if matches:
        assert found == []
    else:
        assert found == [
            Violation(
                "default/rack",
                "node-selector",
                f"claim default/rack request n: device {NIC}/rack/link is not available on node "
                "node-a",
            )
        ]


def test_an_allocation_for_no_named_node_is_accepted_when_any_node_fits_it() -> None:
    _, classes, _ = cluster()
    rack = {"nodeSelectorTerms": [{"matchExpressions": [requirement("rack", "In", "r1")]}]}
    slices = [devices_slice("rack", None, NIC, "rack", [device("link", "vf")], nodeSelector=rack)]
    taken = claim(
        "rack", [exactly_one("n", "nic")], [result_of("n", "link", "rack", NIC)], node=None
    )
    taken["status"]["allocation"]["nodeSelector"] = rack
    # node-a, tried first, is in another rack; node-b fits.
    nodes = [
        {"metadata": {"name": "node-a", "labels": {"rack": "r2"}}},
        {"metadata": {"name": "node-b", "labels": {"rack": "r1"}}},
    ]
    assert check_allocations(slices, classes, [taken], nodes) == []
