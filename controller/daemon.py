"""The controller daemon (being built): until then it refuses to start rather than pretend."""

from __future__ import annotations

import sys

from controller.config import ControllerConfig


def run_controller(config: ControllerConfig) -> int:
    print(
        f"dra-controller: the allocation loop for {config.driver_name} is not available yet",
        file=sys.stderr,
    )
    return 2
