"""Property tests of object validation: valid objects of every kind the project reads pass the
API server (the embedded one, or kube-apiserver under `DRA_CONTROL_PLANE=upstream`) and
`simulate`'s input reading; one mutation of such an object (wrong type, invalid quantity, bad
name, duplicate, missing required field, out-of-range number) is refused by both, with the
field named (a value that does not decode is a 400 that names no field; `simulate` names it).

An example is non-trivial when the object carries more than its required minimum (several
containers, requests, claims, selectors...), so a refusal is not just the refusal of a bare
object; at least 80 % of the examples must be.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dra_driver.cli.inputs import KINDS, InputFileError, load_objects
from dra_driver.validation import UndecodableError, validate_object
from localcluster.crds import bundled_definitions
from tests.integration.apiserver.support import Raw
from tests.support.polling import wait_until

Obj = dict[str, Any]
NAMESPACE = "default"
MIN_NON_TRIVIAL = 0.8
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_PATHS = {
    "Pod": f"/api/v1/namespaces/{NAMESPACE}/pods",
    "Node": "/api/v1/nodes",
    "Namespace": "/api/v1/namespaces",
    "ResourceClaim": f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims",
    "ResourceClaimTemplate": (
        f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates"
    ),
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "GpuQueue": "/apis/gpu.dra-driver.dev/v1alpha1/gpuqueues",
}
_API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "Namespace": "v1",
    "GpuQueue": "gpu.dra-driver.dev/v1alpha1",
}
_NAMESPACED = frozenset({"Pod", "ResourceClaim", "ResourceClaimTemplate"})
_SERIAL = itertools.count()
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="module")
def installed(raw: Raw) -> Iterator[Raw]:
    """The chart's GpuQueue CRD installed, as the local cluster installs it."""
    (crd,) = bundled_definitions()
    status, body = raw.send("POST", _CRDS, crd)
    assert status == 201, body
    _wait_served(raw)
    yield raw
    raw.send("DELETE", f"{_CRDS}/{crd['metadata']['name']}")


def _wait_served(raw: Raw) -> None:
    """Until the GpuQueue kind is served: kube-apiserver serves a CRD's kind once it is
    Established, a moment after the create (the embedded server at once)."""
    wait_until(lambda: raw.send("GET", _PATHS["GpuQueue"])[0] == 200, "GpuQueues served")


# ---- valid objects --------------------------------------------------------------------------

_labels = st.text("abcxyz019", min_size=1, max_size=5).map(lambda s: f"n{s}")
_often = st.sampled_from([*[True] * 9, False])
_quantities = st.sampled_from(["100m", "1", "2", "1500m", "0.5", "64Mi", "1Gi", "3e3", "4k"])


def _unique(values: st.SearchStrategy[str], low: int, high: int) -> st.SearchStrategy[list[str]]:
    return st.lists(values, min_size=low, max_size=high, unique=True)


def _meta(kind: str) -> Obj:
    meta: Obj = {"name": f"{kind.lower()}-{next(_SERIAL)}"}
    if kind in _NAMESPACED:
        meta["namespace"] = NAMESPACE
    return meta


def _object(kind: str, spec: Obj, key: str = "spec") -> Obj:
    api = _API_VERSIONS.get(kind, "resource.k8s.io/v1")
    return {"apiVersion": api, "kind": kind, "metadata": _meta(kind), key: spec}


@st.composite
def _resources(draw: st.DrawFn, claims: list[str]) -> Obj:
    names = draw(st.lists(st.sampled_from(["cpu", "memory"]), unique=True, max_size=2))
    requests = {n: draw(_quantities) for n in names}
    limits = {n: requests[n] for n in names if draw(st.booleans())}
    out: Obj = {"requests": requests}
    if limits:
        out["limits"] = limits
    used = draw(st.lists(st.sampled_from(claims), unique=True)) if claims else []
    if used:
        out["claims"] = [{"name": n} for n in used]
    return out


@st.composite
def pods(draw: st.DrawFn) -> Obj:
    claims = draw(_unique(_labels, 0, 3))
    names = draw(_unique(_labels, 1, 3))
    containers = [
        {"name": n, "image": "busybox", "resources": draw(_resources(claims))} for n in names
    ]
    spec: Obj = {"containers": containers}
    init = [n for n in draw(_unique(_labels, 0, 2)) if n not in names]
    if init:
        spec["initContainers"] = [{"name": n, "image": "busybox"} for n in init]
    if claims:
        spec["resourceClaims"] = [
            {"name": n, "resourceClaimTemplateName": "gpu-template"}
            if draw(st.booleans())
            else {"name": n, "resourceClaimName": f"claim-{n}"}
            for n in claims
        ]
    gates = draw(_unique(st.sampled_from(["example.com/a", "example.com/b", "gate"]), 0, 2))
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return _object("Pod", spec)


@st.composite
def nodes(draw: st.DrawFn) -> Obj:
    allocatable = {
        "cpu": draw(_quantities),
        "memory": draw(st.sampled_from(["64Gi", "1Ti", "512Mi"])),
        "pods": str(draw(st.integers(1, 250))),
    }
    node = _object("Node", {"capacity": dict(allocatable), "allocatable": allocatable}, "status")
    taints = draw(_unique(st.sampled_from(["example.com/a", "b", "c.io/d"]), 0, 2))
    if taints:
        node["spec"] = {"taints": [{"key": t, "effect": "NoSchedule"} for t in taints]}
    return node


@st.composite
def _claim_specs(draw: st.DrawFn) -> Obj:
    names = draw(_unique(_labels, 1, 3))
    requests: list[Obj] = []
    for name in names:
        exactly: Obj = {"deviceClassName": draw(st.sampled_from(["gpu", "mig.example.com"]))}
        if draw(_often):
            exactly["count"] = draw(st.integers(1, 4))
        if draw(_often):
            exactly["selectors"] = [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]
        if draw(st.booleans()):
            requests.append(
                {
                    "name": name,
                    "firstAvailable": [
                        {"name": "sub", **exactly},
                        {"name": "any", "deviceClassName": "gpu"},
                    ],
                }
            )
        else:
            requests.append({"name": name, "exactly": exactly})
    devices: Obj = {"requests": requests}
    if len(names) > 1 and draw(st.booleans()):
        devices["constraints"] = [{"requests": names[:2], "matchAttribute": "example.com/numa"}]
    if draw(_often):
        devices["config"] = [
            {
                "requests": names[:1],
                "opaque": {"driver": "gpu.example.com", "parameters": {"sharing": "none"}},
            }
        ]
    return {"devices": devices}


@st.composite
def claims(draw: st.DrawFn) -> Obj:
    return _object("ResourceClaim", draw(_claim_specs()))


@st.composite
def templates(draw: st.DrawFn) -> Obj:
    return _object("ResourceClaimTemplate", {"spec": draw(_claim_specs())})


@st.composite
def classes(draw: st.DrawFn) -> Obj:
    count = draw(st.integers(0, 3))
    spec: Obj = {
        "selectors": [
            {
                "cel": {
                    "expression": 'device.capacity["gpu.example.com"].memory'
                    f'.compareTo(quantity("{i}Gi")) >= 0'
                }
            }
            for i in range(count)
        ]
    }
    if draw(_often):
        spec["config"] = [{"opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}}]
    return _object("DeviceClass", spec)


@st.composite
def namespaces(draw: st.DrawFn) -> Obj:
    obj = _object("Namespace", {})
    if draw(_often):
        labels = draw(st.dictionaries(_labels, _labels, min_size=1, max_size=3))
        obj["metadata"]["labels"] = labels
    return obj


@st.composite
def queues(draw: st.DrawFn) -> Obj:
    spec: Obj = {"namespaces": draw(_unique(_labels, 1, 3))}
    if draw(_often):
        spec["guaranteed"] = {"gpu": draw(st.sampled_from(["1", "2", 4]))}
    if draw(_often):
        spec["limit"] = {"gpu": "8", "memory": "640Gi"}
    if draw(_often):
        spec["weight"] = draw(st.integers(1, 10_000))
    return _object("GpuQueue", spec)


GENERATORS: dict[str, st.SearchStrategy[Obj]] = {
    "Pod": pods(),
    "Node": nodes(),
    "ResourceClaim": claims(),
    "ResourceClaimTemplate": templates(),
    "DeviceClass": classes(),
    "Namespace": namespaces(),
    "GpuQueue": queues(),
}


def rich(obj: Obj) -> bool:
    """More than the required minimum: the interesting case, as the module docstring says."""
    kind = obj["kind"]
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return (
            len(spec["containers"]) > 1
            or bool(spec.get("resourceClaims"))
            or any(c["resources"]["requests"] for c in spec["containers"])
        )
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        devices = (spec.get("spec") or spec)["devices"]
        return (
            len(devices["requests"]) > 1
            or "config" in devices
            or any(
                "firstAvailable" in r or "selectors" in r.get("exactly", {})
                for r in devices["requests"]
            )
        )
    if kind == "DeviceClass":
        return bool(spec["selectors"]) or "config" in spec
    if kind == "Namespace":
        return bool(obj["metadata"].get("labels"))
    if kind == "GpuQueue":
        return len(spec) > 1 or len(spec["namespaces"]) > 1
    return True  # a Node always carries quantities


# ---- one mutation at a time -------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    """What was done and what kube-apiserver says about it: the field and the status code."""

    what: str
    field: str
    code: int


Mutate = Callable[[st.DrawFn, Obj], Mutation | None]
_BAD_NAMES = ["Upper_Case", "a..b", "-lead", "trail-", "x" * 254, "sp ace"]


def _bad_name(draw: st.DrawFn, obj: Obj) -> Mutation:
    obj["metadata"]["name"] = draw(st.sampled_from(_BAD_NAMES))
    return Mutation("bad name", "metadata.name", 422)


def _pod_container(draw: st.DrawFn, obj: Obj) -> tuple[int, Obj]:
    containers = obj["spec"]["containers"]
    index = draw(st.integers(0, len(containers) - 1))
    return index, containers[index]


def _pod_mutations(draw: st.DrawFn, obj: Obj) -> Mutation | None:
    choice = draw(
        st.sampled_from(
            [
                "name",
                "container-name",
                "duplicate",
                "no-containers",
                "no-name",
                "quantity",
                "negative",
                "wrong-type",
                "over-limit",
                "unknown-claim",
                "added-gate-on-create",
            ]
        )
    )
    spec = obj["spec"]
    if choice == "name":
        return _bad_name(draw, obj)
    index, container = _pod_container(draw, obj)
    where = f"spec.containers[{index}]"
    resources = container["resources"]
    if choice == "container-name":
        container["name"] = draw(st.sampled_from(["Bad_Name", "a.b", "x" * 64]))
        return Mutation("bad container name", f"{where}.name", 422)
    if choice == "duplicate":
        spec["containers"].append(dict(container))
        return Mutation(
            "duplicate container", f"spec.containers[{len(spec['containers']) - 1}].name", 422
        )
    if choice == "no-containers":
        spec["containers"] = []
        spec.pop("initContainers", None)
        return Mutation("no containers", "spec.containers", 422)
    if choice == "no-name":
        del container["name"]
        return Mutation("container without name", f"{where}.name", 422)
    resource = draw(st.sampled_from(["cpu", "memory"]))
    if choice == "quantity":
        resources["requests"][resource] = draw(st.sampled_from(["lots", "1.5.5Gi", "", "1Qi"]))
        return Mutation("not a quantity", f"{where}.resources.requests[{resource}]", 400)
    if choice == "negative":
        resources["requests"][resource] = draw(st.sampled_from(["-1", "-100m", "-2Gi"]))
        resources.pop("limits", None)
        return Mutation("negative quantity", f"{where}.resources.requests[{resource}]", 422)
    if choice == "wrong-type":
        resources["requests"] = [resource]
        return Mutation("requests as a list", f"{where}.resources.requests", 400)
    if choice == "over-limit":
        resources["requests"][resource] = "2Ti"
        resources.setdefault("limits", {})[resource] = "1"
        return Mutation("request above limit", f"{where}.resources.requests", 422)
    if choice == "unknown-claim":
        resources["claims"] = [*resources.get("claims", []), {"name": "nowhere"}]
        return Mutation(
            "unknown claim", f"{where}.resources.claims[{len(resources['claims']) - 1}]", 422
        )
    spec["schedulingGates"] = [{"name": "example.com/g"}]
    spec["nodeName"] = "n1"
    return Mutation("bound while gated", "spec.nodeName", 422)


def _node_mutations(draw: st.DrawFn, obj: Obj) -> Mutation | None:
    choice = draw(st.sampled_from(["name", "quantity", "negative", "wrong-type", "effect"]))
    allocatable = obj["status"]["allocatable"]
    resource = draw(st.sampled_from(sorted(allocatable)))
    if choice == "name":
        return _bad_name(draw, obj)
    if choice == "quantity":
        # Not "Gi": `resource.ParseQuantity` reads a suffix without digits as zero.
        allocatable[resource] = draw(st.sampled_from(["lots", "1..2", "Ei"]))
        return Mutation("not a quantity", f"status.allocatable.{resource}", 400)
    if choice == "negative":
        allocatable[resource] = "-4"
        return Mutation("negative", f"status.allocatable.{resource}", 422)
    if choice == "wrong-type":
        allocatable[resource] = True
        return Mutation("a bool quantity", f"status.allocatable.{resource}", 400)
    obj["spec"] = {"taints": [{"key": "k", "effect": "Sometimes"}]}
    # `ValidateNode` checks taints under the metadata's path: upstream names them so.
    return Mutation("unsupported taint effect", "metadata.taints[0].effect", 422)


def _claim_mutations(draw: st.DrawFn, obj: Obj) -> Mutation | None:
    spec = obj["spec"]
    prefix = "spec.devices"
    if obj["kind"] == "ResourceClaimTemplate":
        spec, prefix = spec["spec"], "spec.spec.devices"
    requests = spec["devices"]["requests"]
    index = draw(st.integers(0, len(requests) - 1))
    request = requests[index]
    where = f"{prefix}.requests[{index}]"
    exact = "exactly" in request
    target = request["exactly"] if exact else request["firstAvailable"][0]
    target_where = f"{where}.exactly" if exact else f"{where}.firstAvailable[0]"
    choice = draw(
        st.sampled_from(
            [
                "name",
                "request-name",
                "duplicate",
                "count",
                "count-type",
                "no-class",
                "mode",
                "constraint",
                "too-many-selectors",
                "neither",
            ]
        )
    )
    if choice == "name":
        return _bad_name(draw, obj)
    if choice == "request-name":
        request["name"] = draw(st.sampled_from(["Bad", "a.b", "x" * 64]))
        return Mutation("bad request name", f"{where}.name", 422)
    if choice == "duplicate":
        requests.append(json.loads(json.dumps(request)))
        return Mutation("duplicate request", f"{prefix}.requests[{len(requests) - 1}]", 422)
    if choice == "count":
        # 0 is no mutation: resource.k8s.io/v1 defaults a count of 0 to 1.
        target["count"] = draw(st.integers(-5, -1))
        target.pop("allocationMode", None)
        return Mutation("count out of range", f"{target_where}.count", 422)
    if choice == "count-type":
        target["count"] = draw(st.sampled_from(["two", 1.5, [1]]))
        return Mutation("count of the wrong type", f"{target_where}.count", 400)
    if choice == "no-class":
        del target["deviceClassName"]
        return Mutation("no device class", f"{target_where}.deviceClassName", 422)
    if choice == "mode":
        target["allocationMode"] = "Some"
        return Mutation("unsupported mode", f"{target_where}.allocationMode", 422)
    if choice == "constraint":
        spec["devices"]["constraints"] = [{"requests": ["nowhere"], "matchAttribute": "a.io/b"}]
        return Mutation("constraint on no request", f"{prefix}.constraints[0].requests[0]", 422)
    if choice == "too-many-selectors":
        target["selectors"] = [{"cel": {"expression": "true"}}] * 33
        return Mutation("too many selectors", f"{target_where}.selectors", 422)
    request.pop("exactly", None)
    request.pop("firstAvailable", None)
    return Mutation("neither exactly nor firstAvailable", where, 422)


def _class_mutations(draw: st.DrawFn, obj: Obj) -> Mutation | None:
    choices = ["name", "no-cel", "no-expression", "ill-typed", "no-opaque", "wrong-type"]
    choice = draw(st.sampled_from(choices))
    spec = obj["spec"]
    if choice == "name":
        return _bad_name(draw, obj)
    if choice == "ill-typed":
        # A domain's capacities are a map: comparing one with a number does not type-check.
        spec["selectors"].append({"cel": {"expression": "device.capacity.x > 0"}})
        where = f"spec.selectors[{len(spec['selectors']) - 1}].cel.expression"
        return Mutation("selector that does not compile", where, 422)
    if choice == "no-cel":
        spec["selectors"].append({})
        return Mutation(
            "selector without cel", f"spec.selectors[{len(spec['selectors']) - 1}].cel", 422
        )
    if choice == "no-expression":
        spec["selectors"].append({"cel": {"expression": ""}})
        where = f"spec.selectors[{len(spec['selectors']) - 1}].cel.expression"
        return Mutation("empty expression", where, 422)
    if choice == "no-opaque":
        spec["config"] = [{}]
        return Mutation("config without opaque", "spec.config[0].opaque", 422)
    spec["selectors"] = {"cel": "x"}
    return Mutation("selectors as an object", "spec.selectors", 400)


def _namespace_mutations(draw: st.DrawFn, obj: Obj) -> Mutation | None:
    choice = draw(st.sampled_from(["subdomain", "name", "label-value", "wrong-type"]))
    meta = obj["metadata"]
    if choice == "subdomain":
        meta["name"] = "a.b"  # a subdomain, but a namespace's name is a label
        return Mutation("dotted namespace", "metadata.name", 422)
    if choice == "name":
        return _bad_name(draw, obj)
    if choice == "label-value":
        meta["labels"] = {**meta.get("labels", {}), "k": "not ok!"}
        return Mutation("bad label value", "metadata.labels", 422)
    meta["labels"] = ["k"]
    return Mutation("labels as a list", "metadata.labels", 400)


def _queue_mutations(draw: st.DrawFn, obj: Obj) -> Mutation | None:
    choice = draw(st.sampled_from(["namespace", "weight", "weight-type", "quantity"]))
    spec = obj["spec"]
    if choice == "namespace":
        index = draw(st.integers(0, len(spec["namespaces"]) - 1))
        spec["namespaces"][index] = draw(st.sampled_from(["Bad_Name", "a.b", "-x"]))
        return Mutation("bad namespace", f"spec.namespaces[{index}]", 422)
    if choice == "weight":
        spec["weight"] = draw(st.sampled_from([0, -1, 10_001]))
        return Mutation("weight out of range", "spec.weight", 422)
    if choice == "weight-type":
        spec["weight"] = "high"
        return Mutation("weight as text", "spec.weight", 422)
    spec["guaranteed"] = {"gpu": draw(st.sampled_from(["four", "1.5.5", "Gi"]))}
    return Mutation("not a quantity", "spec.guaranteed.gpu", 422)


MUTATIONS: dict[str, Mutate] = {
    "Pod": _pod_mutations,
    "Node": _node_mutations,
    "ResourceClaim": _claim_mutations,
    "ResourceClaimTemplate": _claim_mutations,
    "DeviceClass": _class_mutations,
    "Namespace": _namespace_mutations,
    "GpuQueue": _queue_mutations,
}


# ---- the two readers ------------------------------------------------------------------------


def _create(raw: Raw, obj: Obj) -> tuple[int, Obj]:
    status, body = raw.send("POST", _PATHS[obj["kind"]], obj)
    if status == 201:
        raw.send("DELETE", f"{_PATHS[obj['kind']]}/{obj['metadata']['name']}")
    return status, body


def _simulate_reads(tmp_path: Path, obj: Obj) -> str:
    """'' when `simulate` reads the object, else its error. Namespaces are no input of
    `simulate`; the shared validation it calls answers for them."""
    if obj["kind"] not in KINDS:
        try:
            return "; ".join(f" {p}" for p in validate_object(obj["kind"], obj))
        except UndecodableError as err:
            return f" {err}"
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump(obj))
    try:
        load_objects(path)
    except InputFileError as err:
        return str(err)
    return ""


class Share:
    def __init__(self) -> None:
        self.non_trivial = 0
        self.total = 0

    def note(self, non_trivial: bool) -> None:
        event("non-trivial" if non_trivial else "trivial: a bare object")
        self.total += 1
        self.non_trivial += non_trivial

    def check(self, name: str) -> None:
        assert self.total > 0
        share = self.non_trivial / self.total
        print(f"{name}: {self.non_trivial}/{self.total} non-trivial ({share:.0%})")
        assert share >= MIN_NON_TRIVIAL, f"{name}: only {self.non_trivial}/{self.total}"


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_valid_objects_pass_both(installed: Raw, tmp_path: Path, kind: str) -> None:
    share = Share()

    @SETTINGS
    @given(obj=GENERATORS[kind])
    def check(obj: Obj) -> None:
        share.note(rich(obj))
        status, body = _create(installed, obj)
        assert status == 201, body
        assert _simulate_reads(tmp_path, obj) == ""

    check()
    share.check(f"valid {kind}")


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_one_mutation_is_refused_by_both_naming_the_field(
    installed: Raw, tmp_path: Path, kind: str
) -> None:
    share = Share()

    @SETTINGS
    @given(obj=GENERATORS[kind], data=st.data())
    def check(obj: Obj, data: st.DataObject) -> None:
        share.note(rich(obj))
        mutation = MUTATIONS[kind](data.draw, obj)
        assert mutation is not None
        event(f"{kind}: {mutation.what}")
        status, body = _create(installed, obj)
        assert status == mutation.code, (mutation, body)
        fields = [c.get("field") for c in body.get("details", {}).get("causes", [])]
        if mutation.code == 400:
            assert body["reason"] == "BadRequest" and not fields, (mutation, body)
        else:
            assert mutation.field in fields, (mutation, body)
        error = _simulate_reads(tmp_path, obj)
        assert f" {mutation.field}: " in f" {error}", (mutation, error)

    check()
    share.check(f"mutated {kind}")
