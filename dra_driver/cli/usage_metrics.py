"""Utilisation and memory per device from kubelet plugins' metrics endpoints, for
`dra-driver usage --metrics URL`.

The plugins export `dra_device_utilization_percent` and `dra_device_memory_used_bytes` per
allocated device, labelled with the claim and the device (see docs/telemetry.md); this reads
them in the Prometheus text format. An endpoint that cannot be read is skipped with a reason,
so one node that is down does not hide the others.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

UTILIZATION = "dra_device_utilization_percent"
MEMORY_USED = "dra_device_memory_used_bytes"
TIMEOUT_S = 5.0

DeviceRef = tuple[str, str, str]
"""(claim namespace, claim name, device name)."""


@dataclass(slots=True)
class DeviceFigures:
    utilization_percent: float | None = None
    memory_used_bytes: float | None = None


@dataclass(slots=True)
class Scrape:
    figures: dict[DeviceRef, DeviceFigures] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """One line per endpoint that could not be read: its URL and why."""


def parse(text: str, into: dict[DeviceRef, DeviceFigures]) -> None:
    """Add the device figures of one endpoint's exposition to `into`."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in (UTILIZATION, MEMORY_USED):
                continue
            labels = sample.labels
            ref = (
                labels.get("claim_namespace", ""),
                labels.get("claim_name", ""),
                labels.get("device", ""),
            )
            figures = into.setdefault(ref, DeviceFigures())
            if sample.name == UTILIZATION:
                figures.utilization_percent = float(sample.value)
            else:
                figures.memory_used_bytes = float(sample.value)


def scrape(urls: Iterable[str], timeout: float = TIMEOUT_S) -> Scrape:
    result = Scrape()
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                text = response.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            result.skipped.append(f"{url}: {reason}")
            continue
        try:
            parse(text, result.figures)
        except ValueError as err:
            result.skipped.append(f"{url}: not a Prometheus exposition ({err})")
    return result
