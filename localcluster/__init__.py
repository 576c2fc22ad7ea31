"""A local, in-memory Kubernetes API server for tests and demos. NEVER for production.

It is its own top-level package, not part of the shared core, because it sits above both
daemons: it starts the kubelet plugin and the controller as processes and may import them. It
ships in the image so an admin can dry-run claims against the driver version being deployed.

It exists so the driver, its controller and their tests can talk to "a cluster" through the
official `kubernetes` client without a real control plane: it speaks enough of the Kubernetes
REST protocol (CRUD, status subresources, patches, selectors, watches, finalizers, owner-based
garbage collection, discovery) for that client to work unchanged. It has no authentication, no
authorization, no persistence, no admission beyond optional per-resource validators, and it
keeps everything in one process's memory. See `apiserver.ApiServer` for the entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localcluster.apiserver import ApiServer
    from localcluster.resources import DEFAULT_RESOURCES, ResourceType

__all__ = ["DEFAULT_RESOURCES", "ApiServer", "ResourceType"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `dra-driver` loading the package's command modules (`localcluster.cli`)
    # does not start importing the HTTP server and every resource definition.
    if name == "ApiServer":
        from localcluster.apiserver import ApiServer  # noqa: PLC0415

        return ApiServer
    if name in ("DEFAULT_RESOURCES", "ResourceType"):
        from localcluster import resources  # noqa: PLC0415

        return getattr(resources, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
