"""`dra-controller` command line.

The daemon itself (watches, gate protocol, gangs, leader election) is not built yet; until it
is, this entry point says so plainly instead of pretending to run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dra_driver import __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dra-controller",
        description="GPU DRA allocation controller (cluster daemon).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.parse_args(argv)
    print(
        "dra-controller: the controller daemon is not available in this version; "
        "allocation runs through the kube-scheduler for now",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
