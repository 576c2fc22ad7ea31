"""The one error driver discovery raises.

A node whose driver files cannot be found must not start handing out GPUs: a container would get
its device nodes but no `libcuda.so.1` and fail far from the cause. Every message therefore names
the path that is missing or unreadable.
"""

from __future__ import annotations


class DriverRootError(Exception):
    """The driver installation under a driver root is missing, unreadable or incomplete."""
