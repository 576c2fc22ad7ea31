"""`dra-driver`: one command with subcommands.

The core's own commands are listed here; others (the local cluster's `apiserver` and
`local-cluster`) come from the `dra_driver.commands` entry-point group, so the shared core never
imports the test harness. Registering a command imports only its small command module: the
heavy parts (the HTTP server, the daemons) load when that command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from dra_driver import __version__
from dra_driver.cli import cdi, devices, offline, queues, usage

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

BUILTIN: dict[str, Register] = {
    "cdi": cdi.register,
    "devices": devices.register,
    "explain": offline.register_explain,
    "queues": queues.register,
    "simulate": offline.register_simulate,
    "usage": usage.register,
}


def _registered() -> dict[str, Register]:
    commands = dict(BUILTIN)
    for entry in entry_points(group="dra_driver.commands"):
        if entry.name not in commands:
            commands[entry.name] = entry.load()
    return commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-driver",
        description="GPU DRA driver tools: inspect what a node publishes, and more.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _name, register in sorted(_registered().items()):
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except BrokenPipeError:
        # The reader went away (`| head`): not our failure, and no traceback for it. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
