"""The daemons' command lines as data: flag, environment variable, default and help.

docs/configuration.md is generated from this (hack/gen-config-docs.py) and the chart tests use it
to prove that every environment variable the chart sets is one a daemon reads. The environment
variable of a flag is not visible on the parsed ``argparse`` action (the parser reads it into the
default while it is built), so it is read from the source of ``build_parser``: the string given to
an environment helper (``env("NAME")``, ``env_flag(...)``) inside the flag's ``default=``.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

ENV_HELPERS = frozenset({"env", "env_flag"})
"""The helpers of `dra_driver.cli.env_flags` that read a flag's default from the environment."""


@dataclass(frozen=True, slots=True)
class Flag:
    flag: str
    env: str | None
    default: str
    help: str


def _env_by_flag(build_parser: Callable[[], argparse.ArgumentParser]) -> dict[str, str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(build_parser)))
    found: dict[str, str] = {}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and call.args):
            continue
        first = call.args[0]
        if not (isinstance(first, ast.Constant) and str(first.value).startswith("--")):
            continue
        for keyword in call.keywords:
            if keyword.arg != "default":
                continue
            for inner in ast.walk(keyword.value):
                if (
                    isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Name)
                    and inner.func.id in ENV_HELPERS
                    and inner.args
                    and isinstance(inner.args[0], ast.Constant)
                ):
                    found[str(first.value)] = str(inner.args[0].value)
    return found


def _default_text(action: argparse.Action) -> str:
    if action.default is None or action.default is argparse.SUPPRESS:
        return ""
    if isinstance(action.default, frozenset):
        return ",".join(sorted(str(getattr(v, "value", v)) for v in action.default))
    return str(action.default)


def describe(build_parser: Callable[[], argparse.ArgumentParser]) -> list[Flag]:
    """Every option of the parser (``--help`` and ``--version`` left out), in parser order.

    Defaults are the ones seen by a parser built in the current environment, so run it with a
    clean environment for documentation.
    """
    env = _env_by_flag(build_parser)
    flags: list[Flag] = []
    for action in build_parser()._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        name = action.option_strings[-1] if action.option_strings else action.dest
        if isinstance(action, argparse.BooleanOptionalAction):
            name = " / ".join(action.option_strings)
        flags.append(
            Flag(
                name,
                env.get(action.option_strings[0] if action.option_strings else ""),
                _default_text(action),
                action.help or "",
            )
        )
    return flags


def environment_variables(build_parser: Callable[[], argparse.ArgumentParser]) -> set[str]:
    return set(_env_by_flag(build_parser).values())


__all__ = ["Flag", "describe", "environment_variables"]
