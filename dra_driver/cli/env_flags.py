"""Flag helpers both daemons share: every flag also reads an environment variable (the Helm chart
sets per-pod values that way), and a bad value must fail as a usage error naming the flag.

Defaults taken from the environment are passed to argparse as strings, so argparse runs them
through the flag's `type` like a value on the command line and reports a bad one against the
flag, instead of failing while the parser is built.
"""

from __future__ import annotations

import argparse
import os


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.lower() in ("1", "true", "yes")


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
