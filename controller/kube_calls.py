"""Every call the controller makes to the API server, in one place.

Reads and writes go through the official client's public methods (the chart's RBAC is derived
from them) with `_preload_content=False`, so bodies stay plain JSON: nothing the client's typed
models do not know is dropped, and no model objects are built for thousands of claims. Writes are
JSON merge patches that carry the resourceVersion they were decided on, which the API server turns
into a precondition: a write based on stale state fails with 409 instead of overwriting.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any, Final, cast

from kubernetes import client

from controller.informer import ListCall, Obj, resource_version

GROUP: Final = "resource.k8s.io"
VERSION: Final = "v1"
CLAIMS: Final = "resourceclaims"
SLICES: Final = "resourceslices"
CLASSES: Final = "deviceclasses"
# Spelled out, not imported from dra_driver.queues: the chart's RBAC test reads these calls'
# arguments from this file (a test checks the two spellings agree).
QUEUE_GROUP: Final = "gpu.dra-driver.dev"
QUEUE_VERSION: Final = "v1alpha1"
QUEUES: Final = "gpuqueues"
MERGE: Final = "application/merge-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
#: The API server refuses longer Event messages.
MAX_EVENT_MESSAGE: Final = 1024


def _json(response: Any) -> Obj:
    body: Obj = json.loads(response.data)
    return body


def _done(response: Any) -> None:
    """Read an answer we do not need: only a response read to its end gives its connection back
    to the pool. Left unread, the connection is dropped with the response, and every such call
    opened a new one (a TLS handshake against a real API server), at hundreds a second while a
    queue reclaims."""
    response.drain_conn()
    response.release_conn()


class ControllerApi:
    def __init__(self, api: client.ApiClient, component: str) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self.component = component

    # --- list and watch (the informers) ------------------------------------------------------

    def informer_calls(self) -> dict[str, tuple[ListCall, ListCall]]:
        """Resource → (list, watch) for the informers; each takes the request's options."""
        return {
            SLICES: (
                partial(
                    self._objects.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    SLICES,
                    _preload_content=False,
                ),
                partial(
                    self._objects.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    SLICES,
                    watch=True,
                    _preload_content=False,
                ),
            ),
            CLASSES: (
                partial(
                    self._objects.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    CLASSES,
                    _preload_content=False,
                ),
                partial(
                    self._objects.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    CLASSES,
                    watch=True,
                    _preload_content=False,
                ),
            ),
            CLAIMS: (
                partial(
                    self._objects.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    CLAIMS,
                    _preload_content=False,
                ),
                partial(
                    self._objects.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    CLAIMS,
                    watch=True,
                    _preload_content=False,
                ),
            ),
            "pods": (
                partial(self._core.list_pod_for_all_namespaces, _preload_content=False),
                partial(self._core.list_pod_for_all_namespaces, watch=True, _preload_content=False),
            ),
            "nodes": (
                partial(self._core.list_node, _preload_content=False),
                partial(self._core.list_node, watch=True, _preload_content=False),
            ),
            QUEUES: (
                partial(
                    self._objects.list_cluster_custom_object,
                    QUEUE_GROUP,
                    QUEUE_VERSION,
                    QUEUES,
                    _preload_content=False,
                ),
                partial(
                    self._objects.list_cluster_custom_object,
                    QUEUE_GROUP,
                    QUEUE_VERSION,
                    QUEUES,
                    watch=True,
                    _preload_content=False,
                ),
            ),
        }

    #: Resources from CRDs the chart installs but an older install may lack.
    OPTIONAL: Final = frozenset({QUEUES})

    def list_claims(self) -> tuple[list[Obj], int]:
        """Every claim as the API server has it now (the re-check before and after writing),
        and the list's resourceVersion: the claims it cannot show, being newer."""
        body = _json(
            self._objects.list_cluster_custom_object(GROUP, VERSION, CLAIMS, _preload_content=False)
        )
        return list(body.get("items") or []), resource_version(body)

    def get_claim(self, namespace: str, name: str) -> Obj:
        response = self._objects.get_namespaced_custom_object(
            GROUP, VERSION, namespace, CLAIMS, name, _preload_content=False
        )
        return _json(response)

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        """The ConfigMap, or None when there is none."""
        try:
            response = self._core.read_namespaced_config_map(
                name, namespace, _preload_content=False
            )
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return _json(response)

    def put_configmap(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str | None
    ) -> str:
        """Create the ConfigMap (`resource_version` None) or replace the one of that version
        (409 when someone else wrote it since); its new resourceVersion."""
        metadata = {"name": name, "namespace": namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(data)}
        # The typed signatures want a V1ConfigMap; the client sends a plain dict body as it is.
        if resource_version is None:
            response = cast(Any, self._core).create_namespaced_config_map(
                namespace, body, _preload_content=False
            )
        else:
            response = cast(Any, self._core).replace_namespaced_config_map(
                name, namespace, body, _preload_content=False
            )
        return str(_json(response)["metadata"]["resourceVersion"])

    def get_pod(self, namespace: str, name: str) -> Obj:
        response = self._core.read_namespaced_pod(name, namespace, _preload_content=False)
        return _json(response)

    # --- writes ------------------------------------------------------------------------------

    def patch_claim(self, claim: Mapping[str, Any], metadata: Mapping[str, Any]) -> Obj:
        meta = claim["metadata"]
        body = {"metadata": {**metadata, "resourceVersion": meta["resourceVersion"]}}
        response = self._objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            meta["namespace"],
            CLAIMS,
            meta["name"],
            body,
            _content_type=MERGE,
            _preload_content=False,
        )
        return _json(response)

    def patch_claim_status(self, claim: Mapping[str, Any], status: Mapping[str, Any]) -> Obj:
        meta = claim["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        response = self._objects.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            meta["namespace"],
            CLAIMS,
            meta["name"],
            body,
            _content_type=MERGE,
            _preload_content=False,
        )
        return _json(response)

    def patch_pod(self, pod: Mapping[str, Any], spec: Mapping[str, Any]) -> Obj:
        meta = pod["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": spec}
        response = self._core.patch_namespaced_pod(
            meta["name"], meta["namespace"], body, _content_type=MERGE, _preload_content=False
        )
        return _json(response)

    def patch_queue_status(self, name: str, status: Mapping[str, Any]) -> None:
        """A GpuQueue's status; a merge patch without a precondition, since only the leader
        writes it and each write is the whole picture."""
        response = self._objects.patch_cluster_custom_object_status(
            QUEUE_GROUP,
            QUEUE_VERSION,
            QUEUES,
            name,
            {"status": status},
            _content_type=MERGE,
            _preload_content=False,
        )
        _done(response)

    def evict_pod(self, pod: Mapping[str, Any]) -> None:
        """Through the Eviction API, so PodDisruptionBudgets hold (429 when one forbids it)."""
        meta = pod["metadata"]
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]),
            delete_options=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid=meta.get("uid"))
            ),
        )
        response = self._core.create_namespaced_pod_eviction(
            meta["name"], meta["namespace"], body, _preload_content=False
        )
        _done(response)

    def patch_pod_conditions(self, pod: Mapping[str, Any], conditions: list[Obj]) -> None:
        """Set these conditions by type; `status.conditions` merges on `type` (strategic
        merge), so conditions not named here, other writers' included, are left alone."""
        meta = pod["metadata"]
        response = self._core.patch_namespaced_pod_status(
            meta["name"],
            meta["namespace"],
            {"status": {"conditions": conditions}},
            _content_type=STRATEGIC,
            _preload_content=False,
        )
        _done(response)

    def post_pod_event(self, pod: Mapping[str, Any], kind: str, reason: str, text: str) -> None:
        meta = pod["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": text[:MAX_EVENT_MESSAGE],
            "type": kind,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        # The typed signature wants a CoreV1Event; the client sends a plain dict body as it is.
        response = cast(Any, self._core).create_namespaced_event(
            meta["namespace"], body, _preload_content=False
        )
        _done(response)
