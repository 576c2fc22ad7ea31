"""CustomResourceDefinitions: a CRD makes its kind served at once (discovery, CRUD, watch,
status), objects are pruned, defaulted and validated against its schema and CEL rules the way
kube-apiserver does, and deleting the CRD stops serving the kind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.integration.apiserver.support import established, namespaces_fixture, not_found
from tests.support.polling import wait_until

namespaces = namespaces_fixture("crds")

GROUP, VERSION, PLURAL = "example.com", "v1", "widgets"
NS = "crds"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "x-kubernetes-validations": [
                {
                    # kube-apiserver refuses a messageExpression that joins `string(self.size)`:
                    # its cost estimate cannot bound that string's length.
                    "rule": "self.size <= self.maxSize",
                    "messageExpression": (
                        "self.size > 2 * self.maxSize ? 'size is far over maxSize'"
                        " : 'size is over maxSize'"
                    ),
                },
                {"rule": "self.size == oldSelf.size || self.mutable", "message": "size is fixed"},
            ],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "exclusiveMaximum": True, "maximum": 100},
                "maxSize": {"type": "integer", "default": 10},
                "mutable": {"type": "boolean", "default": False},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                "ratio": {"type": "number", "nullable": True},
                "amount": {"x-kubernetes-int-or-string": True},
                "tags": {
                    "type": "array",
                    "maxItems": 3,
                    "x-kubernetes-list-type": "set",
                    "items": {"type": "string", "minLength": 1},
                },
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    },
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
    },
}


def crd_body(schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def ext(api_client: client.ApiClient) -> client.ApiextensionsV1Api:
    return client.ApiextensionsV1Api(api_client)


@pytest.fixture(scope="module")
def widgets(ext: client.ApiextensionsV1Api) -> Iterator[None]:
    ext.create_custom_resource_definition(crd_body())
    established(ext, f"{PLURAL}.{GROUP}")
    yield
    ext.delete_custom_resource_definition(f"{PLURAL}.{GROUP}")


def widget(object_name: str, /, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": object_name},
        "spec": {"size": 1, **spec},
    }


def create(custom: client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, body
    )
    return result


def rejected(custom: client.CustomObjectsApi, body: dict[str, Any]) -> list[dict[str, Any]]:
    with pytest.raises(ApiException) as caught:
        create(custom, body)
    assert caught.value.status == 422, caught.value.body
    status = json.loads(caught.value.body)
    assert status["reason"] == "Invalid"
    causes: list[dict[str, Any]] = status["details"]["causes"]
    return causes


def test_lifecycle(ext: client.ApiextensionsV1Api, custom: client.CustomObjectsApi) -> None:
    body = crd_body()
    body["metadata"]["name"] = "gadgets.example.org"
    body["spec"].update(group="example.org", scope="Cluster")
    body["spec"]["names"] = {"plural": "gadgets", "kind": "Gadget"}
    ext.create_custom_resource_definition(body)
    conditions = established(ext, "gadgets.example.org")
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    crd = ext.read_custom_resource_definition("gadgets.example.org")
    assert crd.status.accepted_names.singular == "gadget"
    assert crd.status.accepted_names.list_kind == "GadgetList"

    resources = custom.get_api_resources("example.org", "v1").resources
    assert [(r.name, r.namespaced, r.kind) for r in resources] == [
        ("gadgets", False, "Gadget"),
        ("gadgets/status", False, "Gadget"),
    ]
    start = custom.list_cluster_custom_object("example.org", "v1", "gadgets")["metadata"][
        "resourceVersion"
    ]
    g = {"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g1"}}
    created = custom.create_cluster_custom_object(
        "example.org", "v1", "gadgets", g | {"spec": {"size": 3}, "status": {"ready": True}}
    )
    assert "status" not in created  # a status subresource: status is not set on create
    assert created["spec"] == {"size": 3, "maxSize": 10, "mutable": False, "color": "red"}
    patched = custom.patch_cluster_custom_object(
        "example.org", "v1", "gadgets", "g1", {"spec": {"size": 4, "mutable": True}}
    )
    assert patched["spec"]["size"] == 4 and patched["metadata"]["generation"] == 2
    with_status = custom.patch_cluster_custom_object_status(
        "example.org", "v1", "gadgets", "g1", {"spec": {"size": 9}, "status": {"ready": True}}
    )
    assert with_status["status"] == {"ready": True} and with_status["spec"]["size"] == 4
    listed = custom.list_cluster_custom_object("example.org", "v1", "gadgets")
    assert listed["kind"] == "GadgetList" and [i["metadata"]["name"] for i in listed["items"]] == [
        "g1"
    ]
    events = watch.Watch().stream(
        custom.list_cluster_custom_object,
        "example.org",
        "v1",
        "gadgets",
        resource_version=start,
        timeout_seconds=1,
    )
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert seen[:3] == [("ADDED", "g1"), ("MODIFIED", "g1"), ("MODIFIED", "g1")]

    # kube-apiserver deletes the objects, then the CRD, behind its cleanup finalizer; the
    # embedded server does both at once. Either way the object and the kind go.
    ext.delete_custom_resource_definition("gadgets.example.org")
    wait_until(
        lambda: not_found(
            lambda: custom.get_cluster_custom_object("example.org", "v1", "gadgets", "g1")
        ),
        "g1 deleted with its CRD",
    )
    wait_until(
        lambda: not_found(lambda: custom.get_api_resources("example.org", "v1")),
        "example.org/v1 no longer served",
    )


# A schema error of these kinds keeps the CEL rules from running, and kube-apiserver says so in
# a cause of its own (`hasBlockingErr`); after other schema errors the rules still run.
SKIPPED = ("<nil>", "FieldValueInvalid")


@pytest.mark.usefixtures("widgets")
def test_schema_errors_name_the_field(custom: client.CustomObjectsApi) -> None:
    cases: list[tuple[dict[str, Any], list[tuple[str, str]]]] = [
        (widget("t1", size="big"), [("spec.size", "FieldValueTypeInvalid"), SKIPPED]),
        (widget("t2", size=0), [("spec.size", "FieldValueInvalid")]),
        # 100 is over the maximum and over maxSize: the rule runs and fails too.
        (
            widget("t3", size=100),
            [("spec.size", "FieldValueInvalid"), ("spec", "FieldValueInvalid")],
        ),
        (widget("t4", color="green"), [("spec.color", "FieldValueNotSupported"), SKIPPED]),
        (widget("t5", name="abcdef"), [("spec.name", "FieldValueTooLong"), SKIPPED]),
        (widget("t6", name="AB"), [("spec.name", "FieldValueInvalid")]),
        (widget("t7", tags=["a", "b", "a"]), [("spec.tags[2]", "FieldValueDuplicate")]),
        (widget("t8", tags=["a", "b", "c", "d"]), [("spec.tags", "FieldValueTooMany"), SKIPPED]),
        (
            widget("t9", ports=[{"name": "x"}, {"name": "x", "port": 2}]),
            [("spec.ports[1]", "FieldValueDuplicate")],
        ),
        (widget("t10", amount=1.5), [("spec.amount", "FieldValueTypeInvalid"), SKIPPED]),
        (widget("t11", labels={"a": 1}), [("spec.labels.a", "FieldValueTypeInvalid"), SKIPPED]),
        (
            widget("t12", ports=[{"port": 1}]),
            [("spec.ports[0].name", "FieldValueRequired"), SKIPPED],
        ),
        ({**widget("t13"), "spec": {}}, [("spec.size", "FieldValueRequired"), SKIPPED]),
    ]
    for body, expected in cases:
        causes = rejected(custom, body)
        assert [(c["field"], c["reason"]) for c in causes] == expected, body
    causes = rejected(custom, widget("t14", size="big"))
    assert [c["message"] for c in causes] == [
        'Invalid value: "string": spec.size in body must be of type integer: "string"',
        "Invalid value: null: some validation rules were not checked because the object was "
        "invalid; correct the existing errors to complete validation",
    ]


@pytest.mark.usefixtures("widgets")
def test_defaults_pruning_and_preserved_fields(custom: client.CustomObjectsApi) -> None:
    created = create(
        custom,
        widget(
            "d1", unknown=1, ratio=None, amount="5", extra={"any": {"thing": 1}}, labels={"a": "b"}
        ),
    )
    assert created["spec"] == {
        "size": 1,
        "maxSize": 10,
        "mutable": False,
        "color": "red",
        "amount": "5",
        "extra": {"any": {"thing": 1}},
        "labels": {"a": "b"},
        "ratio": None,
    }
    got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "d1")
    assert "unknown" not in got["spec"]


@pytest.mark.usefixtures("widgets")
def test_cel_rules(custom: client.CustomObjectsApi) -> None:
    causes = rejected(custom, widget("c1", size=30))
    # An object's value is left out of the message (a scalar's would be shown).
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec",
            "message": "Invalid value: size is far over maxSize",
        }
    ]
    causes = rejected(custom, widget("c1", size=11))
    assert [c["message"] for c in causes] == ["Invalid value: size is over maxSize"]
    create(custom, widget("c2", size=2))
    # A transition rule: only checked on update, against the old object.
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "c2", {"spec": {"size": 3}}
        )
    assert caught.value.status == 422 and "size is fixed" in caught.value.body
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "c2", {"spec": {"size": 3, "mutable": True}}
    )


def test_bad_crds_are_refused(ext: client.ApiextensionsV1Api) -> None:
    body = crd_body({"type": "object", "properties": {"spec": {"properties": {}}}})
    body["metadata"]["name"] = "widgets.wrong.com"
    with pytest.raises(ApiException) as caught:
        ext.create_custom_resource_definition(body)
    assert caught.value.status == 422
    fields = [c["field"] for c in json.loads(caught.value.body)["details"]["causes"]]
    # The one version's schema is the CRD's schema: kube-apiserver names it `spec.validation`.
    assert fields == [
        "metadata.name",
        "spec.validation.openAPIV3Schema.properties[spec].type",
    ]
    broken_rule = crd_body({"type": "object", "x-kubernetes-validations": [{"rule": "self.a ==="}]})
    broken_rule["metadata"]["name"] = f"{PLURAL}.{GROUP}x"
    with pytest.raises(ApiException) as caught:
        ext.create_custom_resource_definition(broken_rule)
    assert "compilation failed" in caught.value.body
    # Versions with schemas of their own are named one by one.
    two = crd_body({"type": "object", "properties": {"spec": {"properties": {}}}})
    two["metadata"]["name"] = "widgets.two.com"
    two["spec"]["group"] = "two.com"
    second = {**two["spec"]["versions"][0], "name": "v2", "storage": False}
    second["schema"] = {
        "openAPIV3Schema": broken_rule["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    }
    two["spec"]["versions"].append(second)
    with pytest.raises(ApiException) as caught:
        ext.create_custom_resource_definition(two)
    causes = json.loads(caught.value.body)["details"]["causes"]
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueRequired", "spec.versions[0].schema.openAPIV3Schema.properties[spec].type"),
        (
            "FieldValueInvalid",
            "spec.versions[1].schema.openAPIV3Schema.x-kubernetes-validations[0].rule",
        ),
    ]


@pytest.mark.usefixtures("widgets")
def test_a_strategic_merge_patch_of_a_custom_object_is_unsupported(
    custom: client.CustomObjectsApi,
) -> None:
    # Custom resources have no patch strategies: kube-apiserver answers 415; a merge patch works.
    create(custom, widget("smp", size=2, tags=["a"]))
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "smp",
            {"spec": {"size": 3}},
            _content_type="application/strategic-merge-patch+json",
        )
    body = json.loads(caught.value.body)
    assert (caught.value.status, body["code"], body["reason"]) == (
        415,
        415,
        "UnsupportedMediaType",
    )
    merged = custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        "smp",
        {"spec": {"tags": ["b"], "mutable": True, "size": 3}},
        _content_type="application/merge-patch+json",
    )
    assert (merged["spec"]["size"], merged["spec"]["tags"]) == (3, ["b"])
