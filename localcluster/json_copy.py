"""Copies of JSON documents, for the store's defensive copies.

Every read, write and watch event of the embedded API server copies an object so that no caller
can change what is stored. The objects are decoded JSON (dicts, lists and immutable scalars), so
a copy need not track shared or cyclic references as `copy.deepcopy` does; skipping that makes
each copy about three times cheaper, which matters to a server that copies on every request.
"""

from __future__ import annotations

from typing import TypeVar, cast

T = TypeVar("T")


def copy_json(value: T) -> T:
    """A copy of `value` in which every dict and list is new; other values are shared (JSON's
    scalars are immutable)."""
    if isinstance(value, dict):
        return cast(T, {key: copy_json(item) for key, item in value.items()})
    if isinstance(value, list):
        return cast(T, [copy_json(item) for item in value])
    return value
