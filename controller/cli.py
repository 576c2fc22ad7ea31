"""`dra-controller` command line.

The flags themselves are data, in `controller.flags`; this module turns them into settings and
runs the daemon.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import structlog

from controller.config import (
    ControllerConfig,
    LeaderElection,
    default_finalizer,
    default_gang_label,
    default_gang_size_label,
    default_gate,
    default_lease_name,
)
from controller.daemon import run_controller
from controller.flags import FLAGS
from dra_driver import __version__
from dra_driver.allocator import AllocationMode
from dra_driver.cli import flags
from dra_driver.logging_setup import configure_logging
from dra_driver.workload_profile import ProfileEntry, profile_file

log = structlog.get_logger(__name__)


def build_parser() -> argparse.ArgumentParser:
    return flags.build_parser(
        prog="dra-controller",
        description="GPU DRA allocation controller: allocates the claims of pods that carry its "
        "scheduling gate, with placement scoring, gangs and deallocation.",
        version=__version__,
        flags=FLAGS,
    )


def config_from_args(args: argparse.Namespace) -> ControllerConfig:
    driver: str = args.driver_name
    leader = LeaderElection(
        enabled=args.leader_elect,
        lease_name=args.lease_name or default_lease_name(driver),
        lease_namespace=args.lease_namespace,
        identity=args.identity,
        lease_duration_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_period_s=args.retry_period,
    )
    leader.validate()
    return ControllerConfig(
        driver_name=driver,
        kubeconfig=args.kubeconfig,
        gate_name=args.gate_name or default_gate(driver),
        finalizer=args.finalizer or default_finalizer(driver),
        gang_label=args.gang_label or default_gang_label(driver),
        gang_size_label=args.gang_size_label or default_gang_size_label(driver),
        mode=AllocationMode(args.mode),
        leader=leader,
        metrics_port=args.metrics_port,
        healthcheck_port=args.healthcheck_port,
        resync_s=args.resync_period,
        settle_s=args.settle_time,
        report_interval_s=args.report_interval,
        default_queue=args.default_queue,
        reclaim_hold_s=args.reclaim_hold,
        workload_profile=_profile(args.workload_profile),
        workload_configmap=_configmap(args.workload_configmap, leader.lease_name),
    )


def _profile(path: str | None) -> tuple[ProfileEntry, ...] | None:
    """The configured profile, read once at start: a bad file stops the controller with the
    file and field named, rather than placing by something else."""
    return tuple(profile_file(path, "--workload-profile")) if path else None


def _configmap(name: str | None, lease_name: str) -> str | None:
    if name == "-":
        return None
    return name or f"{lease_name}-workload"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)  # refuse bad settings before logging is set up
        configure_logging(args.log_format, args.log_level)
    except ValueError as err:
        parser.error(str(err))
    try:
        return run_controller(config)
    except Exception as err:
        log.error("controller failed", error=str(err))
        print(f"dra-controller: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
