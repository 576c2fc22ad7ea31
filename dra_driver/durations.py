"""Go-style durations ("90s", "30m", "1h30m"), read and written one way everywhere: the chart's
values and flags, GpuQueue specs, and the messages that say how long a device sat idle."""

from __future__ import annotations

import re
from typing import Final

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str) -> float:
    """A Go duration ("90s", "30m", "1h30m", "1.5h") in seconds; only "0" may go without a
    unit, as Go's time.ParseDuration has it. ValueError says why not. Negative durations are
    refused: nothing here waits a negative time."""
    if text == "0":
        return 0.0
    position = 0
    total = 0.0
    while position < len(text):
        part = _PART.match(text, position)
        if part is None:
            break
        total += float(part.group(1)) * _UNIT_S[part.group(2)]
        position = part.end()
    if not text or position != len(text):
        raise ValueError(f'{text!r} is not a duration such as "90s", "30m" or "1h30m"')
    return total


def format_duration(seconds: float) -> str:
    """Seconds as a short Go-style duration ("1h30m", "45s"); whole seconds, except that a
    time under a second keeps its fraction ("0.5s") rather than reading as none."""
    whole = max(0, int(seconds))
    if whole == 0 and seconds > 0:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return text + (f"{secs}s" if secs or not text else "")


__all__ = ["format_duration", "parse_go_duration"]
