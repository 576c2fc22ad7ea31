"""Default validators: reject what the real API server would reject, for the kinds we own.

Only ResourceSlices are checked, with the same limits module the driver uses before
publishing, so a harness-backed test fails the way a real cluster would. Pool-level checks
(slice count, cross-slice references) are dropped here: the real server validates one slice
at a time and accepts a pool that is temporarily inconsistent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.slices.limits import check_limits
from localcluster.resources import Validator


def validate_resource_slice(obj: Mapping[str, Any]) -> Sequence[tuple[str, str]]:
    """(field, message) for each per-slice limit the slice violates."""
    return [(v.path, v.message) for v in check_limits([obj]) if not v.message.startswith("pool ")]


DEFAULT_VALIDATORS: Mapping[str, Validator] = {
    "resourceslices.resource.k8s.io": validate_resource_slice,
}
