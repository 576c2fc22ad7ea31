"""Names the allocation controller puts on objects, derived from the driver name.

They live in the shared core because more than the controller reads them: the local cluster's
demo tells which pods the controller allocated by its finalizer, and examples carry its gate.
"""

from __future__ import annotations


def default_gate(driver_name: str) -> str:
    return f"{driver_name}/allocation"


def default_finalizer(driver_name: str) -> str:
    return f"{driver_name}/allocation"


def default_gang_label(driver_name: str) -> str:
    return f"{driver_name}/gang"


def default_gang_size_label(driver_name: str) -> str:
    return f"{driver_name}/gang-size"
