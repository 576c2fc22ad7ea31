"""`dra-kubelet-plugin` command line.

The daemon itself (gRPC servers, prepare/unprepare, publisher loop) is not built yet; until it
is, this entry point says so plainly instead of pretending to run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dra_driver import __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dra-kubelet-plugin",
        description="GPU DRA kubelet plugin (node daemon).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.parse_args(argv)
    print(
        "dra-kubelet-plugin: the node daemon is not available in this version; "
        "`dra-driver devices` shows what it would publish",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
