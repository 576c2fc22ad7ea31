"""How much of its device a fake process uses over time (tests and the local cluster only).

A constant percent is enough to tell a busy GPU from an idle one, but not to watch what happens
when a pod goes idle after a while, or when many owners use their GPUs at different hours. So a
fake process follows a curve, written in the same text the pod's annotation carries (the wire
form kept in the fake state is that text, canonicalised):

- ``"80"``: a constant percent (``"0"``: the pod never touches its GPU);
- ``"0:5,20:80"``: steps, ``OFFSET:PERCENT`` with offsets in seconds from when the load starts;
- ``"daily:peak=80,valley=5,day=120,phase=0.25"``: a cosine between ``valley`` and ``peak``
  over a compressed day of ``day`` seconds, highest at fraction ``phase`` of the day; with
  ``busy=0.4`` the rise and fall take only that fraction of the day, centred on the peak, and
  the rest of the day stays at ``valley`` (a service busy in its working hours, idle at night).

Steps count from the load's start because a test wants "busy, then idle after 20 s" whatever
the hour. The daily curve counts from the epoch instead (wall-clock seconds modulo ``day``), so
that pods started at different moments still share one day: their phases then say who is busy
at which hour, as owners in different time zones would be.

Numbers are plain decimals (``12.5``; no sign, exponent or space), as the annotation always
took them, so that a value reads the same to a person and to the parser.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

DAILY_PREFIX = "daily:"
#: What `LoadCurve.parse` accepts, for error messages that tell the writer how to fix a value.
VALID_FORMS = (
    'a percent from 0 to 100 ("80", "12.5"), '
    'steps OFFSET:PERCENT from the load\'s start, offsets in seconds, the first 0 ("0:5,20:80"), '
    "or daily:peak=PERCENT,valley=PERCENT,day=SECONDS[,phase=FRACTION][,busy=FRACTION] "
    '("daily:peak=80,valley=5,day=120,phase=0.25")'
)
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")
_DAILY_KEYS = ("peak", "valley", "day", "phase", "busy")


@dataclass(frozen=True, slots=True)
class DailyWave:
    """A cosine between `valley` and `peak` percent over a day of `day_s` seconds, highest at
    fraction `phase` of the day (0 <= phase < 1; the day starts at multiples of `day_s` since
    the epoch)."""

    peak: float
    valley: float
    day_s: float
    phase: float = 0.0
    busy: float = 1.0
    """Fraction of the day (0 < busy <= 1) the curve spends above `valley`, centred on `phase`."""


@dataclass(frozen=True, slots=True)
class LoadCurve:
    """A percent of SM time and memory as a function of time.

    Exactly one shape: `steps` (offset in seconds from the load's start, percent), the first at
    offset 0, or `wave` with `steps` empty. A constant is a single step, so that a constant
    written as ``"0:30"`` and one written as ``"30"`` are the same curve."""

    steps: tuple[tuple[float, float], ...] = ((0.0, 0.0),)
    wave: DailyWave | None = None

    def __post_init__(self) -> None:
        # Validated here rather than only in `parse`, so that a curve built in code cannot
        # write a wire form that would not read back. -0.0 becomes 0.0 for the same reason.
        steps = tuple((_finite(o, "step offset"), _percent(p)) for o, p in self.steps)
        object.__setattr__(self, "steps", steps)
        if self.wave is not None:
            if steps:
                raise ValueError("a curve is either steps or a daily wave, not both")
            object.__setattr__(self, "wave", _checked_wave(self.wave))
            return
        if not steps:
            raise ValueError("a curve needs at least one step")
        if steps[0][0] != 0:
            raise ValueError(f"the first step must start at 0 s, not {_text(steps[0][0])}")
        for (before, _), (after, _) in itertools.pairwise(steps):
            if after <= before:
                raise ValueError(
                    f"step offsets must increase: {_text(after)} after {_text(before)}"
                )

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def constant(cls, percent: float) -> LoadCurve:
        return cls(steps=((0.0, percent),))

    @classmethod
    def from_steps(cls, steps: Sequence[tuple[float, float]]) -> LoadCurve:
        return cls(steps=tuple(steps))

    @classmethod
    def daily(
        cls, peak: float, valley: float, day_s: float, phase: float = 0.0, busy: float = 1.0
    ) -> LoadCurve:
        return cls(steps=(), wave=DailyWave(peak, valley, day_s, phase, busy))

    @classmethod
    def parse(cls, text: str) -> LoadCurve:
        """The curve a fake-utilization value describes.

        Raises ValueError saying what is wrong and which forms are valid; the caller adds whose
        value it was (a pod and its annotation), which this module does not know."""
        try:
            return _parse(text)
        except ValueError as error:
            raise ValueError(f"{error}; expected {VALID_FORMS}") from None

    @classmethod
    def from_wire(cls, text: str) -> LoadCurve:
        return cls.parse(text)

    # ---- reading -----------------------------------------------------------------------------

    @property
    def is_constant(self) -> bool:
        return self.wave is None and len(self.steps) == 1

    @property
    def is_zero(self) -> bool:
        """Never above 0 %: the pod runs no process at all, as one that never touches its GPU
        has none (a process at 0 % would still show up in NVML's process list)."""
        if self.wave is not None:
            return self.wave.peak == 0
        return all(percent == 0 for _, percent in self.steps)

    def percent_at(self, now_epoch_s: float, started_epoch_s: float) -> float:
        """The percent at `now_epoch_s` for a load started at `started_epoch_s`.

        Before the start (a clock that stepped back) the first step holds: the curve never
        invents a figure from outside its own values."""
        wave = self.wave
        if wave is not None:
            position = math.fmod(now_epoch_s, wave.day_s) / wave.day_s
            # Distance from the peak, in fractions of the day, the short way round.
            away = math.fmod(position - wave.phase + 1.5, 1.0) - 0.5
            if abs(away) >= wave.busy / 2:
                return wave.valley
            height = (1 + math.cos(2 * math.pi * away / wave.busy)) / 2
            return wave.valley + (wave.peak - wave.valley) * height
        offsets = [offset for offset, _ in self.steps]
        index = bisect.bisect_right(offsets, now_epoch_s - started_epoch_s) - 1
        return self.steps[max(index, 0)][1]

    def to_wire(self) -> str:
        """The canonical text of the curve; `parse` reads it back to an equal curve."""
        wave = self.wave
        if wave is not None:
            busy = "" if wave.busy == 1 else f",busy={_text(wave.busy)}"
            return (
                f"{DAILY_PREFIX}peak={_text(wave.peak)},valley={_text(wave.valley)},"
                f"day={_text(wave.day_s)},phase={_text(wave.phase)}{busy}"
            )
        if self.is_constant:
            return _text(self.steps[0][1])
        return ",".join(f"{_text(offset)}:{_text(percent)}" for offset, percent in self.steps)

    def __str__(self) -> str:
        return self.to_wire()


def _parse(text: str) -> LoadCurve:
    if text.startswith(DAILY_PREFIX):
        return _parse_daily(text[len(DAILY_PREFIX) :])
    if ":" not in text:
        return LoadCurve.constant(_number(text, "percent"))
    steps: list[tuple[float, float]] = []
    for item in text.split(","):
        offset, colon, percent = item.partition(":")
        if not colon:
            raise ValueError(f"step {item!r} is not OFFSET:PERCENT")
        steps.append((_number(offset, "step offset"), _number(percent, "percent")))
    return LoadCurve.from_steps(steps)


def _parse_daily(text: str) -> LoadCurve:
    values: dict[str, float] = {}
    for item in text.split(","):
        key, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"daily part {item!r} is not KEY=VALUE")
        if key not in _DAILY_KEYS:
            raise ValueError(f"daily key {key!r} is unknown (known: {', '.join(_DAILY_KEYS)})")
        if key in values:
            raise ValueError(f"daily key {key!r} is given twice")
        values[key] = _number(value, key)
    missing = [key for key in ("peak", "valley", "day") if key not in values]
    if missing:
        raise ValueError(f"daily curve lacks {', '.join(missing)}")
    return LoadCurve.daily(
        values["peak"],
        values["valley"],
        values["day"],
        values.get("phase", 0),
        values.get("busy", 1),
    )


def _number(text: str, what: str) -> float:
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"{what} {text!r} is not a plain decimal number")
    return float(text)


def _finite(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {_text(value)}")
    return float(value) + 0.0


def _percent(value: float, what: str = "percent") -> float:
    number = _finite(value, what)
    if number > 100:
        raise ValueError(f"{what} must be from 0 to 100, got {_text(number)}")
    return number


def _checked_wave(wave: DailyWave) -> DailyWave:
    peak, valley = _percent(wave.peak, "peak"), _percent(wave.valley, "valley")
    day_s, phase = _finite(wave.day_s, "day"), _finite(wave.phase, "phase")
    if valley > peak:
        raise ValueError(f"valley {_text(valley)} is above peak {_text(peak)}")
    if day_s == 0:
        raise ValueError("day must be longer than 0 s")
    if phase >= 1:
        raise ValueError(
            f"phase must be a fraction of the day, from 0 to below 1, got {_text(phase)}"
        )
    busy = _finite(wave.busy, "busy")
    if not 0 < busy <= 1:
        raise ValueError(
            f"busy must be a fraction of the day above 0 and up to 1, got {_text(busy)}"
        )
    return DailyWave(peak, valley, day_s, phase, busy)


def _text(value: float) -> str:
    """A plain decimal that reads back to the same float: `repr` holds the shortest such digits,
    and Decimal spells an exponent out in full (1e-05 as 0.00001)."""
    if not math.isfinite(value):
        return repr(value)
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
