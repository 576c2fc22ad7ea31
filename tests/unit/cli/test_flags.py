"""Flags as data: the parser built from a table reads each flag's environment variable as its
default, converts it like a command-line value (so a bad one is a usage error naming the flag),
and lets the command line win; the documentation describes every flag of both daemons."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from controller.cli import build_parser as controller_parser
from controller.flags import FLAGS as CONTROLLER_FLAGS
from dra_driver.cli.common_flags import COMMON
from dra_driver.cli.flag_types import duration, percent, port, seconds
from dra_driver.cli.flagdocs import describe, environment_variables
from dra_driver.cli.flags import Flag, Kind, build_parser, require
from kubeletplugin.cli import build_parser as plugin_parser
from kubeletplugin.cli import config_from_args
from kubeletplugin.flags import FLAGS as PLUGIN_FLAGS

TABLE = (
    Flag("--port", env="T_PORT", type=port, help="a port"),
    Flag("--wait", env="T_WAIT", type=seconds, default="15s", help="a duration"),
    Flag("--colour", env="T_COLOUR", choices=("red", "blue"), default="red", help="a choice"),
    Flag("--switch", env="T_SWITCH", kind=Kind.SWITCH, help="off unless given"),
    Flag("--toggle", env="T_TOGGLE", kind=Kind.TOGGLE, default="true", help="on unless told"),
    Flag("--name", env="T_NAME", required=True, help="needed"),
    Flag("--who", env="T_WHO", fallback=lambda: "computed", fallback_doc="a guess", help="who"),
    Flag("--plain", type=int, default="3", help="no environment"),
    Flag("--left", env="T_LEFT", exclusive="side", help="one side"),
    Flag("--right", env="T_RIGHT", kind=Kind.SWITCH, exclusive="side", help="the other"),
    Flag("--share", env="T_SHARE", type=float, help="a share in % of the whole"),
)


def parse(argv: list[str], **environ: str) -> argparse.Namespace:
    return build_parser("t", "test", "1", TABLE, environ).parse_args(argv)


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str], **environ: str) -> str:
    with pytest.raises(SystemExit) as done:
        parse(argv, **environ)
    assert done.value.code == 2
    return capsys.readouterr().err


def test_defaults_without_environment() -> None:
    args = parse([])
    assert (args.port, args.wait, args.colour) == (None, 15.0, "red")
    assert (args.switch, args.toggle) == (False, True)
    assert (args.who, args.plain, args.left, args.right) == ("computed", 3, None, False)


def test_environment_variable_is_the_default_and_goes_through_the_type() -> None:
    args = parse([], T_PORT="8080", T_WAIT="2s", T_COLOUR="blue", T_WHO="pod-1")
    assert (args.port, args.wait, args.colour, args.who) == (8080, 2.0, "blue", "pod-1")


def test_the_process_environment_is_read_when_none_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("T_PORT", "9090")
    assert build_parser("t", "test", "1", TABLE).parse_args([]).port == 9090


def test_an_empty_variable_counts_as_unset() -> None:
    args = parse([], T_PORT="", T_WAIT="", T_WHO="", T_TOGGLE="")
    assert (args.port, args.wait, args.who, args.toggle) == (None, 15.0, "computed", True)


def test_command_line_wins_over_environment() -> None:
    args = parse(
        ["--port=1", "--wait=3s", "--colour=red", "--who=me", "--no-toggle"],
        T_PORT="2",
        T_WAIT="9s",
        T_COLOUR="blue",
        T_WHO="pod-1",
        T_TOGGLE="true",
    )
    assert (args.port, args.wait, args.colour, args.who, args.toggle) == (
        1,
        3.0,
        "red",
        "me",
        False,
    )


@pytest.mark.parametrize(
    ("variable", "value", "flag"),
    [
        ("T_PORT", "99999", "--port"),
        ("T_PORT", "http", "--port"),
        ("T_WAIT", "soon", "--wait"),
        ("T_COLOUR", "green", "--colour"),
        ("T_SWITCH", "ture", "--switch"),
        ("T_TOGGLE", "maybe", "--toggle"),
    ],
)
def test_bad_environment_value_is_a_usage_error_naming_the_flag(
    variable: str, value: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error([], capsys, **{variable: value})
    assert f"argument {flag}" in err
    assert value in err


def test_a_bad_environment_value_does_not_matter_when_the_command_line_sets_the_flag() -> None:
    assert parse(["--port=80"], T_PORT="99999").port == 80


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), ("YES", True), ("false", False), ("0", False), ("off", False)],
)
def test_booleans_from_the_environment(value: str, expected: bool) -> None:
    args = parse([], T_SWITCH=value, T_TOGGLE=value)
    assert (args.switch, args.toggle) == (expected, expected)


def test_a_switch_on_the_command_line_wins_over_false_in_the_environment() -> None:
    args = parse(["--switch", "--toggle"], T_SWITCH="false", T_TOGGLE="false")
    assert (args.switch, args.toggle) == (True, True)


def test_required_flag_is_satisfied_by_command_line_or_environment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser("t", "test", "1", TABLE, {})
    with pytest.raises(SystemExit) as done:
        require(parser, parser.parse_args([]), TABLE)
    assert done.value.code == 2
    assert "--name (or T_NAME) is required" in capsys.readouterr().err
    require(parser, parser.parse_args(["--name=n"]), TABLE)
    env_parser = build_parser("t", "test", "1", TABLE, {"T_NAME": "n"})
    require(env_parser, env_parser.parse_args([]), TABLE)


def test_exclusive_flags_conflict_only_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "not allowed with" in usage_error(["--left=a", "--right"], capsys)
    args = parse(["--right"], T_LEFT="a")
    assert (args.left, args.right) == ("a", True)


def test_help_names_the_environment_variable_and_the_notes() -> None:
    helps = {f.name: f.full_help() for f in TABLE}
    assert helps["--port"] == "a port (env T_PORT)"
    assert helps["--name"] == "needed (env T_NAME; required)"
    assert helps["--who"] == "who (env T_WHO; default a guess)"
    assert helps["--plain"] == "no environment"


def test_help_renders_with_the_generated_notes() -> None:
    text = " ".join(build_parser("t", "test", "1", TABLE, {}).format_help().split())
    assert "a port (env T_PORT)" in text
    assert "a share in % of the whole (env T_SHARE)" in text


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "port"},
        {"kind": Kind.SWITCH, "type": int},
        {"choices": ("a",), "type": int},
        {"fallback": lambda: "x"},
    ],
)
def test_inconsistent_flags_are_refused(bad: dict[str, object]) -> None:
    fields = {"name": "--x", "help": "x", **bad}
    with pytest.raises(ValueError):
        Flag(**fields)  # type: ignore[arg-type]


def test_description_of_the_table() -> None:
    docs = {d.flag: d for d in describe(TABLE)}
    assert docs["--toggle / --no-toggle"].default == "true"
    assert docs["--switch"].default == "false"
    assert docs["--who"].default == "a guess"
    assert docs["--who"].meaning == "who (default a guess)"
    assert docs["--name"].meaning == "needed (required)"
    assert docs["--port"].default == ""
    assert docs["--plain"].env is None


@pytest.mark.parametrize(
    ("flags", "make_parser"),
    [(PLUGIN_FLAGS, plugin_parser), (CONTROLLER_FLAGS, controller_parser)],
)
def test_docs_describe_every_daemon_flag_with_its_environment_variable(
    flags: tuple[Flag, ...], make_parser: object
) -> None:
    assert callable(make_parser)
    parser: argparse.ArgumentParser = make_parser()
    options = [
        " / ".join(a.option_strings)
        for a in parser._actions
        if a.option_strings and a.dest not in ("help", "version")
    ]
    docs = describe(flags)
    assert [d.flag for d in docs] == options
    for doc, flag in zip(docs, flags, strict=True):
        assert doc.env == flag.env
        if flag.env:
            assert f"(env {flag.env}" in (parser._option_string_actions[flag.name].help or "")
    assert environment_variables(flags) == {f.env for f in flags if f.env}
    assert len({f.env for f in flags if f.env}) == len([f for f in flags if f.env])


@pytest.mark.parametrize("flags", [PLUGIN_FLAGS, CONTROLLER_FLAGS])
def test_both_daemons_take_the_common_flags_the_same_way(flags: tuple[Flag, ...]) -> None:
    by_name = {f.name: f for f in flags}
    for common in COMMON:
        assert dataclasses.replace(by_name[common.name], help=common.help) == common


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1800", 1800.0),
        ("0", 0.0),
        ("2.5", 2.5),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("90s", 90.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
    ],
)
def test_durations_in_seconds_or_go_form(text: str, expected: float) -> None:
    assert duration(text) == expected


@pytest.mark.parametrize("text", ["", "-5", "30 m", "1d", "m", "nan", "inf", "30m-1s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


@pytest.mark.parametrize(
    ("text", "ok"),
    [("0", True), ("100", True), ("5.5", True), ("101", False), ("-1", False), ("x", False)],
)
def test_percentages_are_within_0_to_100(text: str, ok: bool) -> None:
    if ok:
        assert percent(text) == float(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            percent(text)


def test_the_plugins_telemetry_flags() -> None:
    args = plugin_parser().parse_args(
        ["--node-name", "n", "--fake-gpus", "A100:1", "--idle-after", "1h30m"]
    )
    assert (args.telemetry_interval, args.idle_threshold, args.idle_after) == (10.0, 5.0, 5400.0)
    assert str(args.proc_root) == "/proc"
    config = config_from_args(args)
    assert (config.telemetry_interval_s, config.idle_threshold_percent, config.idle_after_s) == (
        10.0,
        5.0,
        5400.0,
    )
    with pytest.raises(SystemExit):
        plugin_parser().parse_args(["--node-name", "n", "--idle-threshold", "120"])
