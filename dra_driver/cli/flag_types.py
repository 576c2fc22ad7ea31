"""Converters for flag values. A flag's default reaches them as the string its environment variable
holds, so each one must reject a bad value with `argparse.ArgumentTypeError`: argparse then
reports it as a usage error against the flag, whichever place the value came from.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

from api.device_type import DeviceType
from api.quantity import parse_byte_quantity
from dra_driver.durations import parse_go_duration

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def boolean(text: str) -> bool:
    """Strict, so that a misspelt `DRA_NVML=ture` fails instead of silently meaning off."""
    word = text.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; use true or false")


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port {text!r} is not a number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range 0..65535")
    return value


def seconds(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) if raw.endswith("s") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 15s") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {text!r}")
    return value


def duration(text: str) -> float:
    """Seconds, from a plain number of seconds (`1800`) or a Go duration (`30m`, `1h30m`,
    `90s`), as the chart's other duration values are written; zero or more."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        if not raw:
            raise argparse.ArgumentTypeError("an empty duration") from None
        try:
            value = parse_go_duration(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration: give seconds (1800) or a Go duration (30m, 1h30m)"
            ) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a duration must be 0 or more, got {text!r}")
    return value


def optional_duration(text: str) -> float | None:
    """A duration as `duration`, or None for an empty value (the feature is off)."""
    return duration(text) if text.strip() else None


def byte_quantity(text: str) -> int:
    """Bytes, as a Kubernetes quantity (`4Gi`) or a plain count."""
    try:
        return parse_byte_quantity(text.strip(), "value").num_bytes
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"a percentage must be within 0..100, got {text!r}")
    return value


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """argparse checks `choices` only for values on the command line, not for a string default,
    so a flag with choices checks them in its converter as well."""

    def check(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {text!r} (choose from {', '.join(choices)})"
            )
        return text

    return check


def shapes(text: str) -> frozenset[DeviceType]:
    """A comma list of device shapes, at least one; used by the plugin and `dra-driver devices`."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    known = {shape.value: shape for shape in DeviceType}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--shapes: unknown shape(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(known)}"
        )
    return frozenset(known[n] for n in names)
