"""Formatting of byte and count quantities the way Kubernetes prints them canonically."""

from __future__ import annotations

_BINARY = (
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
)


def format_quantity(value: int) -> str:
    """Largest binary suffix that represents `value` exactly, else the plain integer.

    Kubernetes would print 85521080320 as "81559Mi"; writing the canonical form ourselves keeps
    published objects byte-identical to what a read-back returns, so the publisher can compare.
    """
    if value < 0:
        raise ValueError(f"quantity must not be negative, got {value}")
    for suffix, unit in _BINARY:
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)
