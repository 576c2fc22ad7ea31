"""The shared validation words each problem as kube-apiserver does: field path, type, value,
detail (`k8s.io/apimachinery/pkg/util/validation/field`), so users recognise the message and
clients can match it."""

from __future__ import annotations

import copy

import pytest

from dra_driver.validation import UndecodableError, validate_object
from tests.support.invalid_objects import REFUSED, Refused, claim, pod

SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    r"for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def messages(kind: str, obj: dict[str, object], old: dict[str, object] | None = None) -> list[str]:
    return [str(p) for p in validate_object(kind, obj, old)]


@pytest.mark.parametrize("row", REFUSED, ids=lambda r: r.label)
def test_the_issue_table(row: Refused) -> None:
    if row.code == 400:
        with pytest.raises(UndecodableError) as caught:
            validate_object(row.kind, row.obj)
        assert caught.value.field == row.field
        assert row.message in caught.value.problem
    else:
        (problem,) = validate_object(row.kind, row.obj)
        assert problem.field == row.field
        assert row.message in problem.message


def test_names_use_the_upstream_wording() -> None:
    assert messages("Pod", pod("Upper_Case")) == [
        f'metadata.name: Invalid value: "Upper_Case": {SUBDOMAIN}'
    ]
    renamed = pod()
    renamed["spec"]["containers"][0]["name"] = "Bad_Name"
    assert messages("Pod", renamed) == [
        f'spec.containers[0].name: Invalid value: "Bad_Name": {LABEL}'
    ]
    assert messages("Namespace", {"metadata": {"name": "a.b"}}) == [
        f'metadata.name: Invalid value: "a.b": {LABEL}'
    ]
    long = "x" * 254
    assert messages("Node", {"metadata": {"name": long}}) == [
        f'metadata.name: Invalid value: "{long}": must be no more than 253 characters'
    ]


def test_a_valid_pod_and_claim_pass() -> None:
    ok = pod(
        resources={
            "requests": {"cpu": "250m", "nvidia.com/gpu": "1"},
            "limits": {"nvidia.com/gpu": "1"},
        }
    )
    assert messages("Pod", ok) == []
    assert messages("ResourceClaim", claim(count=3)) == []


def test_resources_follow_validate_resource_requirements() -> None:
    extended = pod(resources={"requests": {"example.com/dev": "1"}})
    assert messages("Pod", extended) == [
        "spec.containers[0].resources.limits: Required value: Limit must be set for non "
        "overcommitable resources"
    ]
    half = pod(
        resources={"requests": {"example.com/dev": "500m"}, "limits": {"example.com/dev": "500m"}}
    )
    assert messages("Pod", half) == [
        'spec.containers[0].resources.limits[example.com/dev]: Invalid value: "500m": must be an '
        "integer",
        'spec.containers[0].resources.requests[example.com/dev]: Invalid value: "500m": must be '
        "an integer",
    ]
    odd = pod(resources={"requests": {"cpus": "1"}})
    assert messages("Pod", odd) == [
        'spec.containers[0].resources.requests[cpus]: Invalid value: "cpus": must be a standard '
        "resource for containers"
    ]


def test_a_quantity_of_the_wrong_json_type_does_not_decode() -> None:
    with pytest.raises(UndecodableError) as caught:
        validate_object("Pod", pod(resources={"requests": {"cpu": True}}))
    assert caught.value.field == "spec.containers[0].resources.requests[cpu]"
    assert messages("Pod", pod(resources={"requests": {"cpu": 2, "memory": 1.5e9}})) == []


def test_pod_claims_follow_validate_pod_resource_claim() -> None:
    both = pod()
    both["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
        {"name": "gpu", "resourceClaimName": "c"},
        {"name": "none"},
    ]
    assert [m.split(": ")[0] + ": " + m.split(": ")[1] for m in messages("Pod", both)] == [
        "spec.resourceClaims[0]: Invalid value",
        "spec.resourceClaims[1].name: Duplicate value",
        "spec.resourceClaims[2]: Invalid value",
    ]


def test_scheduling_gates_may_only_be_removed() -> None:
    old = pod()
    old["spec"]["schedulingGates"] = [{"name": "a.io/one"}, {"name": "a.io/two"}]
    fewer = copy.deepcopy(old)
    fewer["spec"]["schedulingGates"] = [{"name": "a.io/two"}]
    assert messages("Pod", fewer, old) == []
    more = copy.deepcopy(old)
    more["spec"]["schedulingGates"].append({"name": "a.io/three"})
    assert messages("Pod", more, old) == [
        "spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new "
        "scheduling gate 'a.io/three'"
    ]
    bound = copy.deepcopy(old)
    bound["spec"]["nodeName"] = "n1"
    assert messages("Pod", bound) == [
        "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
    ]


def test_claim_rules_follow_validate_resource_claim() -> None:
    bad = claim()
    requests = bad["spec"]["devices"]["requests"]
    requests.append(copy.deepcopy(requests[0]))
    requests[1]["exactly"].update(allocationMode="All", count=2)
    bad["spec"]["devices"]["constraints"] = [{"requests": ["nope"], "matchAttribute": "numa"}]
    assert messages("ResourceClaim", bad) == [
        'spec.devices.requests[1]: Duplicate value: "r"',
        "spec.devices.requests[1].exactly.count: Invalid value: 2: must not be specified when "
        "allocationMode is 'All'",
        'spec.devices.constraints[0].requests[0]: Invalid value: "nope": must be the name of a '
        "request in the claim or the name of a request and a subrequest separated by '/'",
        "spec.devices.constraints[0].matchAttribute: Required value: a fully qualified name "
        "must be a domain and a name separated by a slash",
    ]
    many = claim()
    many["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": "true"}}
    ] * 33
    assert messages("ResourceClaim", many) == [
        "spec.devices.requests[0].exactly.selectors: Too many: 33: must have at most 32 items"
    ]


def test_gpu_queues_are_read_by_the_queue_code() -> None:
    queue = {"kind": "GpuQueue", "metadata": {"name": "q"}, "spec": {"weight": 0}}
    assert messages("GpuQueue", queue) == ["spec.weight: must be above 0 and at most 10000, got 0"]
