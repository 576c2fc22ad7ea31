"""Command line for the configuration JSON Schema.

``python -m api.schema`` prints the schema; ``--write`` refreshes the copy
committed next to the types (the tests fail until it is refreshed after a
model change); ``--check`` exits non-zero when that copy is stale, for CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from api.v1alpha1.schema import config_json_schema

COMMITTED_SCHEMA_PATH = Path(__file__).parent / "v1alpha1" / "config.schema.json"


def render_schema(schema: dict[str, Any] | None = None) -> str:
    """The exact text committed to the repository: stable key order, final newline."""
    return json.dumps(schema or config_json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m api.schema",
        description="Print the JSON Schema of the opaque device configuration.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--write", action="store_true", help=f"write it to {COMMITTED_SCHEMA_PATH.name}"
    )
    action.add_argument(
        "--check", action="store_true", help="fail if the committed copy is out of date"
    )
    args = parser.parse_args(argv)
    text = render_schema()
    if args.write:
        COMMITTED_SCHEMA_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {COMMITTED_SCHEMA_PATH}", file=sys.stderr)
    elif args.check:
        current = COMMITTED_SCHEMA_PATH.read_text(encoding="utf-8")
        if current != text:
            print(
                f"{COMMITTED_SCHEMA_PATH} is out of date; run: python -m api.schema --write",
                file=sys.stderr,
            )
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
