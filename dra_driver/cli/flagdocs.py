"""The daemons' flags described for people: docs/configuration.md is generated from this
(hack/gen-config-docs.py), and the chart tests use it to prove that every environment variable
the chart sets is one a daemon reads.

It reads the flag tables, not a parser, so what it says does not depend on the environment it
runs in (a parser's defaults do).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dra_driver.cli.flags import Flag, Kind


@dataclass(frozen=True, slots=True)
class FlagDoc:
    flag: str
    """How it is written: `--name`, or `--name / --no-name` for a toggle."""
    env: str | None
    default: str
    """As the environment would give it, or how a computed default is worked out; "" for none."""
    meaning: str
    """The help, with its notes (required, computed default) but not the environment variable."""


def _default(flag: Flag) -> str:
    if flag.default is not None:
        return flag.default
    if flag.kind is not Kind.VALUE:
        return "false"
    return flag.fallback_doc


def describe_flag(flag: Flag) -> FlagDoc:
    notes = flag.notes
    meaning = f"{flag.help} ({'; '.join(notes)})" if notes else flag.help
    return FlagDoc(
        flag=" / ".join(flag.option_strings),
        env=flag.env,
        default=_default(flag),
        meaning=meaning,
    )


def describe(flags: Iterable[Flag]) -> list[FlagDoc]:
    """Every flag of the table, in table order (the order of `--help`)."""
    return [describe_flag(flag) for flag in flags]


def environment_variables(flags: Iterable[Flag]) -> set[str]:
    return {flag.env for flag in flags if flag.env}


__all__ = ["FlagDoc", "describe", "describe_flag", "environment_variables"]
