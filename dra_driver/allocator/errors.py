"""The two ways an allocation attempt ends without a result.

Kubernetes distinguishes "does not fit" (try another node, or wait) from a fatal error (a selector
that fails at runtime, an `All` request over a pool in flux): the first is a normal outcome and is
returned as a reason, the second must reach the user unchanged, so it is an exception.
"""

from __future__ import annotations


class AllocationError(Exception):
    """Fatal for the claims being allocated: no node can be tried past it."""

    def __init__(self, claim: str, message: str) -> None:
        super().__init__(f"claim {claim}: {message}")
        self.claim = claim
        self.message = message


class InputError(ValueError):
    """An input object is malformed; the message names the object and the field."""
