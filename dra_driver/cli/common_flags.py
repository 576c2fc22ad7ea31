"""The flags both daemons take, declared once so that their names, environment variables and
defaults cannot drift apart between the controller and the kubelet plugin (the chart sets them
the same way for both). A daemon whose meaning differs in detail, such as which protocol its
health check speaks, restates only the help with `dataclasses.replace`.
"""

from __future__ import annotations

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.cli.flag_types import port
from dra_driver.cli.flags import Flag

DRIVER_NAME = Flag(
    "--driver-name",
    env="DRA_DRIVER_NAME",
    default=DEFAULT_DRIVER_NAME,
    help="driver name",
)
KUBECONFIG = Flag(
    "--kubeconfig",
    env="KUBECONFIG",
    help="kubeconfig file; in-cluster config when absent",
)
METRICS_PORT = Flag(
    "--metrics-port",
    env="DRA_METRICS_PORT",
    type=port,
    help="serve Prometheus metrics on this port",
)
HEALTHCHECK_PORT = Flag(
    "--healthcheck-port",
    env="DRA_HEALTHCHECK_PORT",
    type=port,
    help="serve the health check on this port",
)
LOG_FORMAT = Flag(
    "--log-format",
    env="DRA_LOG_FORMAT",
    default="auto",
    help="json, console or auto",
)
LOG_LEVEL = Flag(
    "--log-level",
    env="DRA_LOG_LEVEL",
    default="info",
    help="debug, info, warning, error",
)

COMMON: tuple[Flag, ...] = (
    DRIVER_NAME,
    KUBECONFIG,
    METRICS_PORT,
    HEALTHCHECK_PORT,
    LOG_FORMAT,
    LOG_LEVEL,
)
"""Every daemon's table holds a flag of each of these names, with the same environment variable,
default and type (a unit test checks it)."""

__all__ = [
    "COMMON",
    "DRIVER_NAME",
    "HEALTHCHECK_PORT",
    "KUBECONFIG",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "METRICS_PORT",
]
