"""Which field selectors each kind supports, and where each one reads the object.

kube-apiserver answers 400 for a field it cannot select on, so a client that filters on, say,
a slice's `spec.pool.generation` fails on a real cluster however well it worked here. Facts,
from kubernetes:
* `pkg/apis/core/v1/conversion.go`, the field label conversion funcs of Pod, Node, Event and
  Namespace (their error: `field label not supported: <label>`), with the values from each
  registry's `ToSelectableFields` (`pkg/registry/core/{pod,node,event,namespace}/strategy.go`);
* `pkg/apis/resource/v1/conversion.go` for ResourceSlice (`metadata.name`, `spec.nodeName`,
  `spec.driver`, `spec.pool.name`; error `field label not supported for resource.k8s.io/v1,
  Kind=ResourceSlice: <label>`), values from `toSelectableFields` in
  `pkg/registry/resource/resourceslice/strategy.go`;
* every other kind: apimachinery's `runtime.DefaultMetaV1FieldSelectorConversion`
  (`metadata.name`, `metadata.namespace`; error `"<label>" is not a known field selector: only
  "metadata.name", "metadata.namespace"`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from localcluster.errors import ApiError, bad_request
from localcluster.resources import ResourceType


@dataclass(frozen=True)
class Field:
    """Where a selectable field's value lives (`path`, dotted) and what an absent one reads as."""

    path: str
    default: str = ""


def _same(*labels: str) -> dict[str, Field]:
    return {label: Field(label) for label in labels}


_NAME = _same("metadata.name")
_NAME_AND_NAMESPACE = _same("metadata.name", "metadata.namespace")

_FIELDS: Mapping[str, Mapping[str, Field]] = {
    "pods": {
        **_NAME_AND_NAMESPACE,
        **_same(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
        "spec.hostNetwork": Field("spec.hostNetwork", "false"),
        # Upstream selects on the pod's IPs; the primary one is what callers filter on.
        "status.podIPs": Field("status.podIP"),
        "spec.host": Field("spec.nodeName"),  # old v1 clients' name for spec.nodeName
    },
    "nodes": {**_NAME, "spec.unschedulable": Field("spec.unschedulable", "false")},
    "namespaces": {**_NAME, **_same("status.phase")},
    "events": {
        **_NAME_AND_NAMESPACE,
        **_same(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
        ),
        "source": Field("source.component"),
    },
    "resourceslices.resource.k8s.io": {
        **_NAME,
        **_same("spec.nodeName", "spec.driver", "spec.pool.name"),
    },
}


def _unsupported(rt: ResourceType, label: str) -> ApiError:
    if rt.key == "resourceslices.resource.k8s.io":
        return bad_request(
            f"field label not supported for {rt.api_version}, Kind={rt.kind}: {label}"
        )
    if rt.key in _FIELDS:
        return bad_request(f"field label not supported: {label}")
    return bad_request(
        f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


def selectable_field(rt: ResourceType, label: str) -> Field:
    """The field a selector label names on this kind; 400 Bad Request when it names none."""
    found = _FIELDS.get(rt.key, _NAME_AND_NAMESPACE).get(label)
    if found is None:
        raise _unsupported(rt, label)
    return found
