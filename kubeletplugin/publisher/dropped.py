"""Fields the API server silently dropped from a slice: the sign of a disabled feature gate.

An API server without partitionable devices or consumable capacity accepts the slice but
removes `sharedCounters`, `consumesCounters`, `allowMultipleAllocations` and capacity request
policies. The devices that rely on them would then be handed out without the mutual exclusion
the counters provide, so the plugin must notice and fall back to the plain layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_DEVICE_FIELDS = ("consumesCounters", "allowMultipleAllocations")


def dropped_fields(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """Paths of fields present in `sent` and missing from `stored`, feature fields only."""
    missing: list[str] = []
    sent_spec = sent.get("spec") or {}
    stored_spec = stored.get("spec") or {}
    if sent_spec.get("sharedCounters") and not stored_spec.get("sharedCounters"):
        missing.append("spec.sharedCounters")
    stored_devices = {d.get("name"): d for d in stored_spec.get("devices") or []}
    for index, device in enumerate(sent_spec.get("devices") or []):
        kept = stored_devices.get(device.get("name")) or {}
        for name in _DEVICE_FIELDS:
            if device.get(name) and not kept.get(name):
                missing.append(f"spec.devices[{index}].{name}")
        for capacity, value in (device.get("capacity") or {}).items():
            stored_capacity = (kept.get("capacity") or {}).get(capacity) or {}
            if value.get("requestPolicy") and not stored_capacity.get("requestPolicy"):
                missing.append(f"spec.devices[{index}].capacity[{capacity}].requestPolicy")
    return missing
