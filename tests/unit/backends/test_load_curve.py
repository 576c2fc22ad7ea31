"""Load curves of fake processes: the annotation's text, its wire form and the percent over
time."""

from __future__ import annotations

import itertools
import math

import pytest

from dra_driver.backends.fake.load_curve import VALID_FORMS, DailyWave, LoadCurve

# A moment well after the epoch, a whole number of every test day (120 s, 86400 s) after it.
EPOCH_DAY = 1_700_006_400.0
assert EPOCH_DAY % 86400 == 0 and EPOCH_DAY % 120 == 0


# ---- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80", LoadCurve.constant(80)),
        ("0", LoadCurve.constant(0)),
        ("12.5", LoadCurve.constant(12.5)),
        ("007", LoadCurve.constant(7)),
        ("100", LoadCurve.constant(100)),
        # One step at 0 is a constant, however it is written.
        ("0:30", LoadCurve.constant(30)),
        ("0:5,20:80", LoadCurve.from_steps([(0, 5), (20, 80)])),
        ("0.0:5,0.5:0,1.25:100", LoadCurve.from_steps([(0, 5), (0.5, 0), (1.25, 100)])),
        (
            "daily:peak=80,valley=5,day=120,phase=0.25",
            LoadCurve.daily(peak=80, valley=5, day_s=120, phase=0.25),
        ),
        # Keys in any order; phase defaults to 0.
        ("daily:day=60,valley=0,peak=100", LoadCurve.daily(peak=100, valley=0, day_s=60)),
        ("daily:peak=40,valley=40,day=1", LoadCurve.daily(peak=40, valley=40, day_s=1)),
    ],
)
def test_valid_values_parse(text: str, expected: LoadCurve) -> None:
    assert LoadCurve.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "percent '' is not a plain decimal number"),
        ("lots", "percent 'lots' is not a plain decimal number"),
        ("-1", "percent '-1' is not a plain decimal number"),
        ("+5", "percent '+5' is not a plain decimal number"),
        ("1e2", "percent '1e2' is not a plain decimal number"),
        (" 80", "percent ' 80' is not a plain decimal number"),
        ("5%", "percent '5%' is not a plain decimal number"),
        ("nan", "percent 'nan' is not a plain decimal number"),
        ("100.5", "percent must be from 0 to 100, got 100.5"),
        ("101", "percent must be from 0 to 100, got 101"),
        ("5:10", "the first step must start at 0 s, not 5"),
        ("0:5,20:80,20:10", "step offsets must increase: 20 after 20"),
        ("0:5,20:80,10:10", "step offsets must increase: 10 after 20"),
        ("0:5,20", "step '20' is not OFFSET:PERCENT"),
        ("0:5,", "step '' is not OFFSET:PERCENT"),
        ("0:5, 20:80", "step offset ' 20' is not a plain decimal number"),
        ("0:5,20:101", "percent must be from 0 to 100, got 101"),
        ("0:5,20:x", "percent 'x' is not a plain decimal number"),
        ("0:5:6", "percent '5:6' is not a plain decimal number"),
        ("-1:5", "step offset '-1' is not a plain decimal number"),
        ("daily:", "daily part '' is not KEY=VALUE"),
        ("daily:peak=80,valley=5", "daily curve lacks day"),
        ("daily:day=10", "daily curve lacks peak, valley"),
        ("daily:peak=80,valley=5,day=120,noon=3", "daily key 'noon' is unknown"),
        ("daily:peak=80,peak=70,valley=5,day=120", "daily key 'peak' is given twice"),
        ("daily:peak=80,valley=5,day=120,phase", "daily part 'phase' is not KEY=VALUE"),
        ("daily:peak=101,valley=5,day=120", "peak must be from 0 to 100, got 101"),
        ("daily:peak=80,valley=90,day=120", "valley 90 is above peak 80"),
        ("daily:peak=80,valley=5,day=0", "day must be longer than 0 s"),
        ("daily:peak=80,valley=5,day=-3", "day '-3' is not a plain decimal number"),
        ("daily:peak=80,valley=5,day=120,phase=1", "phase must be a fraction of the day"),
        ("daily:peak=80,valley=5,day=120,phase=.5", "phase '.5' is not a plain decimal number"),
        ("Daily:peak=80,valley=5,day=120", "step offset 'Daily' is not a plain decimal number"),
    ],
)
def test_invalid_values_say_what_is_wrong_and_what_is_valid(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        LoadCurve.parse(text)
    message = str(refused.value)
    assert message.startswith(problem)
    assert message.endswith(f"; expected {VALID_FORMS}")
    for form in ('"80"', '"0:5,20:80"', '"daily:peak=80,valley=5,day=120,phase=0.25"'):
        assert form in message


@pytest.mark.parametrize(
    "build",
    [
        lambda: LoadCurve.constant(math.nan),
        lambda: LoadCurve.constant(-0.5),
        lambda: LoadCurve.constant(True),
        lambda: LoadCurve.from_steps([]),
        lambda: LoadCurve.from_steps([(0, 5), (math.inf, 6)]),
        lambda: LoadCurve(steps=((0.0, 5.0),), wave=DailyWave(80, 5, 120)),
        lambda: LoadCurve.daily(peak=80, valley=5, day_s=math.inf),
        lambda: LoadCurve.daily(peak=80, valley=5, day_s=120, phase=-0.1),
    ],
)
def test_curves_built_in_code_are_checked_too(build: object) -> None:
    """Otherwise a curve could be stored whose wire form does not read back."""
    assert callable(build)
    with pytest.raises(ValueError):
        build()


def test_negative_zero_is_zero() -> None:
    curve = LoadCurve.constant(-0.0)
    assert curve.to_wire() == "0"
    assert math.copysign(1, curve.percent_at(0, 0)) == 1


# ---- what is zero and what is constant -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "zero", "constant"),
    [
        ("0", True, True),
        ("0:0", True, True),
        ("0:0,10:0", True, False),
        ("daily:peak=0,valley=0,day=10", True, False),
        ("0.001", False, True),
        ("0:0,10:1", False, False),
        ("daily:peak=1,valley=0,day=10", False, False),
    ],
)
def test_only_a_curve_never_above_zero_is_zero(text: str, zero: bool, constant: bool) -> None:
    curve = LoadCurve.parse(text)
    assert (curve.is_zero, curve.is_constant) == (zero, constant)


# ---- steps -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "percent"),
    [
        (-5.0, 5.0),  # a clock that stepped back: the first step holds
        (0.0, 5.0),
        (19.999, 5.0),
        (20.0, 80.0),  # a step starts exactly at its offset
        (20.5, 80.0),
        (29.999, 80.0),
        (30.0, 0.0),
        (1e9, 0.0),  # the last step holds for ever
    ],
)
def test_steps_count_from_the_start(elapsed: float, percent: float) -> None:
    curve = LoadCurve.parse("0:5,20:80,30:0")
    started = 1_700_000_123.25
    assert curve.percent_at(started + elapsed, started) == percent


def test_a_constant_ignores_time() -> None:
    curve = LoadCurve.parse("42")
    assert {curve.percent_at(now, 1000.0) for now in (0.0, 1000.0, 1e12)} == {42.0}


# ---- the daily curve -------------------------------------------------------------------------


def test_daily_curve_peaks_at_its_phase_and_bottoms_half_a_day_later() -> None:
    curve = LoadCurve.parse("daily:peak=80,valley=5,day=120,phase=0.25")
    assert curve.percent_at(EPOCH_DAY + 30, 0) == pytest.approx(80)  # 0.25 of 120 s
    assert curve.percent_at(EPOCH_DAY + 90, 0) == pytest.approx(5)  # half a day later
    # Halfway up at the day's start and a quarter day after the peak.
    assert curve.percent_at(EPOCH_DAY, 0) == pytest.approx(42.5)
    assert curve.percent_at(EPOCH_DAY + 60, 0) == pytest.approx(42.5)
    # Smooth and within its bounds all day, and the same again the next day.
    values = [curve.percent_at(EPOCH_DAY + s / 10, 0) for s in range(1200)]
    assert min(values) >= 5 - 1e-9 and max(values) <= 80 + 1e-9
    assert max(abs(b - a) for a, b in itertools.pairwise(values)) < 0.5
    assert curve.percent_at(EPOCH_DAY + 120 + 30, 0) == pytest.approx(80)


def test_daily_curve_without_phase_peaks_when_the_day_starts() -> None:
    curve = LoadCurve.parse("daily:peak=60,valley=10,day=86400")
    assert curve.percent_at(EPOCH_DAY, 0) == pytest.approx(60)
    assert curve.percent_at(EPOCH_DAY + 43200, 0) == pytest.approx(10)


def test_the_daily_curve_follows_the_wall_clock_not_the_start() -> None:
    """Pods started at different moments replay one shared day: two pods with the same curve
    read the same percent at the same moment, and pods with other phases peak at other hours."""
    curve = LoadCurve.parse("daily:peak=80,valley=5,day=120,phase=0.25")
    now = EPOCH_DAY + 30
    readings = [curve.percent_at(now, started) for started in (0.0, now - 7.5, now, now + 50)]
    assert readings == [pytest.approx(80)] * 4

    evening = LoadCurve.parse("daily:peak=80,valley=5,day=120,phase=0.75")
    assert evening.percent_at(now, now) == pytest.approx(5)
    assert evening.percent_at(EPOCH_DAY + 90, now) == pytest.approx(80)


# ---- the wire form ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("curve", "wire"),
    [
        (LoadCurve.constant(80), "80"),
        (LoadCurve.constant(12.5), "12.5"),
        (LoadCurve.constant(0), "0"),
        (LoadCurve.from_steps([(0, 30)]), "30"),
        (LoadCurve.from_steps([(0, 5), (20, 80)]), "0:5,20:80"),
        (LoadCurve.from_steps([(0, 5), (1e-05, 1 / 3)]), "0:5,0.00001:0.3333333333333333"),
        (LoadCurve.from_steps([(0, 5), (1e16, 6)]), "0:5,10000000000000000:6"),
        (
            LoadCurve.daily(peak=80, valley=5, day_s=120, phase=0.25),
            "daily:peak=80,valley=5,day=120,phase=0.25",
        ),
        (
            LoadCurve.daily(peak=80, valley=5, day_s=86400),
            "daily:peak=80,valley=5,day=86400,phase=0",
        ),
    ],
)
def test_the_wire_form_is_plain_text_that_reads_back(curve: LoadCurve, wire: str) -> None:
    assert curve.to_wire() == wire
    assert str(curve) == wire
    assert LoadCurve.from_wire(wire) == curve
    assert LoadCurve.from_wire(curve.to_wire()).percent_at(1e9 + 7, 1e9) == curve.percent_at(
        1e9 + 7, 1e9
    )


def test_the_wire_form_of_a_value_is_the_value_made_canonical() -> None:
    assert LoadCurve.parse("0.0:05.50,20.000:80").to_wire() == "0:5.5,20:80"
    assert LoadCurve.parse("daily:valley=5,day=120,peak=80").to_wire() == (
        "daily:peak=80,valley=5,day=120,phase=0"
    )


def test_a_daily_curve_busy_part_of_the_day_stays_at_its_valley_the_rest() -> None:
    curve = LoadCurve.parse("daily:peak=80,valley=5,day=100,phase=0.5,busy=0.4")
    assert curve.to_wire() == "daily:peak=80,valley=5,day=100,phase=0.5,busy=0.4"
    at = 1_000_000.0  # a multiple of the day: position 0
    assert curve.percent_at(at + 50, 0) == pytest.approx(80)  # the peak, at phase 0.5
    assert curve.percent_at(at + 40, 0) == pytest.approx(5 + 75 / 2)  # a quarter of busy away
    assert curve.percent_at(at + 30, 0) == pytest.approx(5)  # the edge of the busy part
    assert curve.percent_at(at + 10, 0) == 5  # outside it: the valley
    assert curve.percent_at(at + 95, 0) == 5
    # A busy part that wraps round the day's start.
    wrapped = LoadCurve.daily(80, 5, 100, phase=0.0, busy=0.4)
    assert wrapped.percent_at(at + 95, 0) > 5
    assert wrapped.percent_at(at + 50, 0) == 5
    # busy=1 is the whole-day cosine.
    whole = LoadCurve.daily(80, 5, 100, phase=0.5)
    assert LoadCurve.daily(80, 5, 100, 0.5, busy=1).percent_at(at + 20, 0) == pytest.approx(
        whole.percent_at(at + 20, 0)
    )


@pytest.mark.parametrize("busy", ["0", "1.5"])
def test_a_busy_fraction_outside_the_day_is_refused(busy: str) -> None:
    with pytest.raises(ValueError, match=r"busy must be a fraction of the day above 0 and up to 1"):
        LoadCurve.parse(f"daily:peak=80,valley=5,day=100,busy={busy}")
