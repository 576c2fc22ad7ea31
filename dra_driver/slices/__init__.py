"""Turning an inventory into resource.k8s.io/v1 ResourceSlice objects, within API limits."""

from dra_driver.slices.builder import SliceSettings, build_resource_slices
from dra_driver.slices.limits import LimitViolation, SliceLimitError, check_limits, enforce_limits

__all__ = [
    "LimitViolation",
    "SliceLimitError",
    "SliceSettings",
    "build_resource_slices",
    "check_limits",
    "enforce_limits",
]
