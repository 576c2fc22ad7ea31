"""Which control plane the local cluster and the API-level tests run against.

``embedded`` is this package's in-memory API server (a second to start, no Go); ``upstream`` is
etcd with kube-apiserver, kube-controller-manager and kube-scheduler, built by
`hack/upstream.sh`. `DRA_CONTROL_PLANE` picks one for every `LocalCluster` and `api_server()` that
does not name one, so the same tests run on both (`hack/test.sh` runs the upstream tier that way).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client

CONTROL_PLANES = ("embedded", "upstream")

#: kube-controller-manager's controllers beside an API server on its own (see `api_server`).
API_SERVER_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "disruption-controller",
)


def default_control_plane() -> str:
    """`DRA_CONTROL_PLANE` (``embedded`` or ``upstream``), ``embedded`` when unset."""
    chosen = os.environ.get("DRA_CONTROL_PLANE") or "embedded"
    if chosen not in CONTROL_PLANES:
        raise ValueError(
            f"DRA_CONTROL_PLANE={chosen!r}: must be one of {', '.join(CONTROL_PLANES)}"
        )
    return chosen


class Server(Protocol):
    """What tests need of an API server, whichever it is."""

    @property
    def url(self) -> str: ...

    def write_kubeconfig(self, path: str | Path) -> Path: ...

    def configuration(self) -> client.Configuration: ...

    def api_client(self) -> client.ApiClient: ...


@contextlib.contextmanager
def api_server(control_plane: str | None = None, **embedded: Any) -> Iterator[Server]:
    """An API server for one test or module: the embedded one (with `embedded` as its
    arguments) or the real one in a directory of its own, removed afterwards.

    The real one comes with what the embedded server does inside itself and nothing more:
    kube-controller-manager's garbage collector (dependents of a deleted owner go), namespace
    controller (a deleted namespace's objects go) and disruption controller (a
    PodDisruptionBudget's status, which an eviction reads), but no kube-scheduler and no
    resourceclaim controller, which would act on the objects a test sets up by hand; and new
    Nodes are not tainted `not-ready` (no node lifecycle controller would take it off)."""
    chosen = control_plane or default_control_plane()
    if chosen == "embedded":
        from localcluster.apiserver import ApiServer  # noqa: PLC0415

        with ApiServer(port=0, **embedded) as server:
            yield server
        return
    from localcluster.upstream.control_plane import UpstreamControlPlane  # noqa: PLC0415

    with (
        tempfile.TemporaryDirectory(prefix="dra-cp-", dir="/tmp") as directory,
        UpstreamControlPlane(
            Path(directory),
            controllers=API_SERVER_CONTROLLERS,
            scheduler=False,
            taint_new_nodes=False,
        ) as plane,
    ):
        yield plane
