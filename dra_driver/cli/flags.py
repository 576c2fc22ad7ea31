"""The daemons' flags as data, and the argparse parser built from them.

Every flag of a daemon also reads an environment variable, because the Helm chart sets per-pod
and per-node values (the node name, the pod's name, UID and namespace) through the downward API,
which only reaches a container as environment. Declaring each flag once, as a `Flag`, lets the
parser, the `(env NAME)` note in `--help`, the generated configuration reference and the chart
tests all read the same record instead of one parsing the other.

A default taken from the environment is handed to argparse as the string the environment holds,
so argparse runs it through the flag's converter exactly like a value typed on the command line,
and a bad value is a usage error (exit 2) naming the flag rather than a crash while the parser is
built. An empty variable counts as unset: templated manifests often render an absent value as "".
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from dra_driver.cli.flag_types import boolean, one_of


class Kind(Enum):
    VALUE = "value"
    """Takes a value: `--name VALUE`."""
    SWITCH = "switch"
    """Only turns something on: `--name`, like `store_true`."""
    TOGGLE = "toggle"
    """Either way: `--name` / `--no-name`, like `BooleanOptionalAction`."""


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    """The option, with its dashes: `--driver-name`."""
    help: str
    """What it means, without the `(env ...)` note: that is generated."""
    env: str | None = None
    default: str | None = None
    """As the environment would give it; booleans as "true" or "false"."""
    type: Callable[[str], Any] | None = None
    kind: Kind = Kind.VALUE
    choices: tuple[str, ...] = ()
    required: bool = False
    """Checked after parsing (`require`), since argparse's own check ignores the environment."""
    fallback: Callable[[], str] | None = None
    """Computes the default when neither the environment nor `default` gives one."""
    fallback_doc: str = ""
    """How the documentation names the computed default, e.g. "the host name"."""
    exclusive: str | None = None
    """Flags sharing this group name may not be given together on the command line."""
    metavar: str | None = None

    def __post_init__(self) -> None:
        if not self.name.startswith("--"):
            raise ValueError(f"flag {self.name!r} must start with --")
        if self.kind is not Kind.VALUE and (self.type or self.choices or self.metavar):
            raise ValueError(f"{self.name}: a boolean flag takes no type, choices or metavar")
        if self.choices and self.type:
            raise ValueError(f"{self.name}: choices are strings; give choices or a type")
        if self.fallback and not self.fallback_doc:
            raise ValueError(f"{self.name}: a computed default needs fallback_doc for the docs")

    @property
    def dest(self) -> str:
        return self.name[2:].replace("-", "_")

    @property
    def option_strings(self) -> tuple[str, ...]:
        if self.kind is Kind.TOGGLE:
            return (self.name, f"--no-{self.name[2:]}")
        return (self.name,)

    @property
    def notes(self) -> tuple[str, ...]:
        """What `--help` adds after the meaning, besides the environment variable."""
        notes: list[str] = []
        if self.required:
            notes.append("required")
        if self.fallback_doc:
            notes.append(f"default {self.fallback_doc}")
        return tuple(notes)

    def full_help(self) -> str:
        notes = ([f"env {self.env}"] if self.env else []) + list(self.notes)
        return f"{self.help} ({'; '.join(notes)})" if notes else self.help

    def default_text(self, environ: Mapping[str, str]) -> str | None:
        """The unconverted default: the environment's value, else `default`, else `fallback`."""
        from_env = environ.get(self.env, "") if self.env else ""
        if from_env:
            return from_env
        if self.default is not None:
            return self.default
        if self.kind is not Kind.VALUE:
            return "false"
        return self.fallback() if self.fallback else None

    def converter(self) -> Callable[[str], Any] | None:
        if self.kind is not Kind.VALUE:
            return boolean
        if self.choices:
            return one_of(self.choices)
        return self.type


class _Switch(argparse.Action):
    """`store_true` that keeps a converter, so a string default from the environment is checked
    and converted at the end of parsing like any other value."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: Any = None,
        type: Callable[[str], Any] | None = None,
        required: bool = False,
        help: str | None = None,
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=default, required=required, help=help
        )
        self.type = type

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True)


class _Toggle(argparse.BooleanOptionalAction):
    """`BooleanOptionalAction` that keeps a converter for its string default (see `_Switch`); set
    after construction because newer Pythons deprecate passing `type` to it."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: Any = None,
        type: Callable[[str], Any] | None = None,
        required: bool = False,
        help: str | None = None,
    ) -> None:
        super().__init__(option_strings, dest, default=default, required=required, help=help)
        self.type = type


def add_flags(
    parser: argparse.ArgumentParser,
    flags: Iterable[Flag],
    environ: Mapping[str, str] | None = None,
) -> None:
    env = os.environ if environ is None else environ
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for flag in flags:
        target: argparse._ActionsContainer = parser
        if flag.exclusive:
            if flag.exclusive not in groups:
                groups[flag.exclusive] = parser.add_mutually_exclusive_group()
            target = groups[flag.exclusive]
        options: dict[str, Any] = {
            "dest": flag.dest,
            "default": flag.default_text(env),
            "type": flag.converter(),
            "help": flag.full_help().replace("%", "%%"),  # argparse %-formats help
        }
        if flag.kind is Kind.SWITCH:
            options["action"] = _Switch
        elif flag.kind is Kind.TOGGLE:
            options["action"] = _Toggle
        else:
            if flag.choices:
                options["choices"] = flag.choices
            if flag.metavar:
                options["metavar"] = flag.metavar
        target.add_argument(flag.name, **options)


def build_parser(
    prog: str,
    description: str,
    version: str,
    flags: Iterable[Flag],
    environ: Mapping[str, str] | None = None,
) -> argparse.ArgumentParser:
    """A parser for `flags`, with defaults read from `environ` (the process environment when
    None) now, so build it when the command runs."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version}")
    add_flags(parser, flags, environ)
    return parser


def require(
    parser: argparse.ArgumentParser, args: argparse.Namespace, flags: Iterable[Flag]
) -> None:
    """Exit with a usage error for the first required flag that neither the command line nor the
    environment set."""
    for flag in flags:
        if flag.required and not getattr(args, flag.dest, None):
            source = f" (or {flag.env})" if flag.env else ""
            parser.error(f"{flag.name}{source} is required")


__all__ = ["Flag", "Kind", "add_flags", "build_parser", "require"]
