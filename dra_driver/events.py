"""Kubernetes Events for things an administrator must see without reading logs.

A reset checkpoint or a publisher that fell back to the plain slice layout changes what the
cluster can do; `kubectl describe node` is where an administrator looks, so these become Events on
the Node. Posting is best effort: an Event that cannot be written is logged, never fatal.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, cast

import structlog
from kubernetes import client

log = structlog.get_logger(__name__)

# Event messages are cut to this length by the API server's validation (1 KiB).
MAX_MESSAGE = 1024


class NodeEvents:
    def __init__(
        self, api: client.ApiClient, node_name: str, node_uid: str, component: str
    ) -> None:
        self._api = api
        self._node = node_name
        self._uid = node_uid
        self._component = component

    def warning(self, reason: str, message: str) -> None:
        self.post("Warning", reason, message)

    def post(self, kind: str, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Node", "name": self._node, "uid": self._uid}
        post_event(
            self._api, "default", involved, kind, reason, message, self._component, self._node
        )


def post_event(
    api: client.ApiClient,
    namespace: str,
    involved: dict[str, str],
    kind: str,
    reason: str,
    message: str,
    component: str,
    host: str,
) -> None:
    """One Event about `involved` (in `namespace`), best effort: a failure is logged."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": kind,
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        core = client.CoreV1Api(api)
        cast(Any, core).create_namespaced_event(namespace, body)
    except (client.ApiException, OSError) as err:
        log.warning("cannot post an Event", reason=reason, message=message, error=str(err))
