"""Work out which opaque config applies to each device allocated to a claim.

Kubernetes copies the class's and the claim's config entries into the
claim's allocation status but leaves their meaning to the driver. The rules
follow the DRA convention: class settings are a baseline that claim
settings override, entries later in the list override earlier ones, and an
override replaces the whole config object (merging fields would make the
result depend on entries the user cannot see in the claim).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from api.device_type import DeviceType
from api.errors import ConfigError, Problem, describe_json_value
from api.v1alpha1 import (
    DeviceConfig,
    decode_config,
    default_config_for,
    kind_misfit,
    lending_misfit,
    strategy_misfit,
)


class ConfigSource(StrEnum):
    """Where a config entry came from; class entries apply first."""

    FROM_CLASS = "FromClass"
    FROM_CLAIM = "FromClaim"


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of our driver.

    ``request`` is the request name as the allocation records it:
    ``"req"``, or ``"req/sub"`` when a firstAvailable subrequest was chosen.
    """

    request: str
    device: str
    device_type: DeviceType


@dataclass(frozen=True)
class ConfigOrigin:
    """The config entry a setting came from; ``index`` counts from 0 in the
    status list, as ``config[index]`` in error messages."""

    index: int
    source: ConfigSource


@dataclass(frozen=True)
class ResolvedConfig:
    """The effective config of one device; ``origin`` is None for a default."""

    config: DeviceConfig
    origin: ConfigOrigin | None


@dataclass(frozen=True)
class _Entry:
    origin: ConfigOrigin
    requests: tuple[str, ...]
    config: DeviceConfig

    @property
    def label(self) -> str:
        return f"config entry {self.origin.index} ({self.origin.source})"


def resolve_device_configs(
    entries: Sequence[Mapping[str, Any]],
    devices: Sequence[AllocatedDevice],
    driver_name: str,
) -> dict[AllocatedDevice, ResolvedConfig]:
    """Map every device to its effective config.

    ``entries`` is ``status.allocation.devices.config`` as plain camelCase
    dicts; entries for other drivers are ignored. Every problem with our own
    entries is raised together as one ConfigError.
    """
    problems: list[Problem] = []
    ours = _our_entries(entries, driver_name, problems)
    ours.sort(key=lambda entry: entry.origin.source is not ConfigSource.FROM_CLASS)
    chosen: dict[AllocatedDevice, _Entry] = {}
    for entry in ours:
        for device in devices:
            if _applies(entry, device, problems):
                chosen[device] = entry
    if problems:
        raise ConfigError(problems)
    resolved: dict[AllocatedDevice, ResolvedConfig] = {}
    for device in devices:
        winner = chosen.get(device)
        if winner is None:
            resolved[device] = ResolvedConfig(default_config_for(device.device_type), None)
        else:
            resolved[device] = ResolvedConfig(winner.config, winner.origin)
    return resolved


def request_covers(named: str, allocated: str) -> bool:
    """Whether a config naming request ``named`` reaches a result of ``allocated``.

    Naming a request covers whichever of its subrequests was chosen; naming
    a subrequest covers only that one.
    """
    return allocated == named or allocated.startswith(f"{named}/")


def _applies(entry: _Entry, device: AllocatedDevice, problems: list[Problem]) -> bool:
    misfit = (
        kind_misfit(entry.config, device.device_type)
        or strategy_misfit(entry.config, device.device_type)
        or lending_misfit(entry.config, device.device_type)
    )
    if not entry.requests:
        # An entry for all requests only speaks to devices it can describe.
        return misfit is None
    named = next((n for n in entry.requests if request_covers(n, device.request)), None)
    if named is None:
        return False
    if misfit is not None:
        where = (
            f"names request {_quoted(named)}, which was allocated "
            f"{device.device_type.display_name} device {_quoted(device.device)}"
        )
        problems.append(
            Problem(
                field=f"config[{entry.origin.index}].requests",
                reason=misfit,
                message=f"{entry.label} {where}; {misfit}",
            )
        )
        return False
    return True


def _our_entries(
    entries: Sequence[Mapping[str, Any]], driver_name: str, problems: list[Problem]
) -> list[_Entry]:
    ours: list[_Entry] = []
    for index, raw in enumerate(entries):
        field = f"config[{index}]"
        if not isinstance(raw, Mapping):
            problems.append(Problem(field, f"must be an object, got {describe_json_value(raw)}"))
            continue
        opaque = raw.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver_name:
            continue
        entry = _parse_entry(index, raw, opaque, problems)
        if entry is not None:
            ours.append(entry)
    return ours


def _parse_entry(
    index: int, raw: Mapping[str, Any], opaque: Mapping[str, Any], problems: list[Problem]
) -> _Entry | None:
    field = f"config[{index}]"
    found_before = len(problems)
    source_value = raw.get("source")
    known_sources = ", ".join(_quoted(s.value) for s in ConfigSource)
    if source_value not in tuple(ConfigSource):
        problems.append(
            Problem(
                f"{field}.source",
                f"must be one of {known_sources}, got {describe_json_value(source_value)}",
            )
        )
        source = None
    else:
        source = ConfigSource(source_value)
    requests = raw.get("requests") or []
    if not isinstance(requests, list | tuple) or not all(isinstance(r, str) for r in requests):
        problems.append(
            Problem(
                f"{field}.requests",
                f"must be a list of request names, got {describe_json_value(requests)}",
            )
        )
    label = f"config entry {index} ({source or source_value})"
    parameters: Any = opaque.get("parameters")  # decode_config reports a wrong type
    try:
        config = decode_config(parameters)
    except ConfigError as err:
        problems.extend(
            Problem(
                field=_parameters_field(field, problem.field),
                reason=problem.message,
                message=f"{label} has invalid parameters: {problem.message}",
            )
            for problem in err.problems
        )
        return None
    if source is None or len(problems) > found_before:
        return None
    return _Entry(ConfigOrigin(index, source), tuple(requests), config)


def _parameters_field(entry_field: str, inner: str) -> str:
    base = f"{entry_field}.opaque.parameters"
    return base if inner == "parameters" else f"{base}.{inner}"


def _quoted(text: str) -> str:
    return json.dumps(text)
