"""A local, in-memory Kubernetes API server for tests and demos. NEVER for production.

It exists so the driver, its controller and their tests can talk to "a cluster" through the
official `kubernetes` client without a real control plane: it speaks enough of the Kubernetes
REST protocol (CRUD, status subresources, patches, selectors, watches, finalizers, owner-based
garbage collection, discovery) for that client to work unchanged. It has no authentication, no
authorization, no persistence, no admission beyond optional per-resource validators, and it
keeps everything in one process's memory. See `apiserver.ApiServer` for the entry point.
"""

from __future__ import annotations

from dra_driver.localcluster.apiserver import ApiServer
from dra_driver.localcluster.resources import DEFAULT_RESOURCES, ResourceType

__all__ = ["DEFAULT_RESOURCES", "ApiServer", "ResourceType"]
