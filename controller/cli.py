"""`dra-controller` command line.

Every flag also reads an environment variable (named in its help), so the Helm chart can set the
pod's name and namespace from the downward API for the Lease identity.
"""

from __future__ import annotations

import argparse
import socket
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
from dra_driver import DEFAULT_DRIVER_NAME, __version__
from dra_driver.allocator import AllocationMode
from dra_driver.cli.env_flags import env, env_flag, port, seconds
from dra_driver.logging_setup import configure_logging

log = structlog.get_logger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-controller",
        description="GPU DRA allocation controller: allocates the claims of pods that carry its "
        "scheduling gate, with placement scoring, gangs and deallocation.",
    )
    add = parser.add_argument
    add("--version", action="version", version=f"%(prog)s {__version__}")
    add(
        "--driver-name",
        default=env("DRA_DRIVER_NAME", DEFAULT_DRIVER_NAME),
        help="driver name whose devices this controller allocates (env DRA_DRIVER_NAME)",
    )
    add(
        "--kubeconfig",
        default=env("KUBECONFIG"),
        help="kubeconfig file; in-cluster config when absent (env KUBECONFIG)",
    )
    add(
        "--gate-name",
        default=env("DRA_GATE_NAME"),
        help="scheduling gate that hands a pod to this controller; default "
        "<driver>/allocation (env DRA_GATE_NAME)",
    )
    add(
        "--finalizer",
        default=env("DRA_FINALIZER"),
        help="finalizer put on the claims this controller allocates; default "
        "<driver>/allocation (env DRA_FINALIZER)",
    )
    add(
        "--gang-label",
        default=env("DRA_GANG_LABEL"),
        help="pod label naming the pod's gang; default <driver>/gang (env DRA_GANG_LABEL)",
    )
    add(
        "--gang-size-label",
        default=env("DRA_GANG_SIZE_LABEL"),
        help="pod label giving the gang's size; default <driver>/gang-size "
        "(env DRA_GANG_SIZE_LABEL)",
    )
    add(
        "--mode",
        choices=[m.value for m in AllocationMode],
        default=env("DRA_ALLOCATION_MODE", AllocationMode.SCORED.value),
        help="scored (topology and fragmentation aware) or first-fit (the kube-scheduler's "
        "choice) (env DRA_ALLOCATION_MODE)",
    )
    add(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=env_flag("DRA_LEADER_ELECT", True),
        help="run only while holding the Lease, so replicas can stand by (env DRA_LEADER_ELECT)",
    )
    add(
        "--lease-name",
        default=env("DRA_LEASE_NAME"),
        help="name of the coordination.k8s.io Lease; default <driver with dashes>-controller "
        "(env DRA_LEASE_NAME)",
    )
    add(
        "--lease-namespace",
        default=env("POD_NAMESPACE", "default"),
        help="namespace of the Lease (env POD_NAMESPACE)",
    )
    add(
        "--identity",
        default=env("POD_NAME") or socket.gethostname(),
        help="this replica's name in the Lease (env POD_NAME; default the host name)",
    )
    add(
        "--lease-duration",
        type=seconds,
        default=env("DRA_LEASE_DURATION", "15s"),
        help="seconds a standby waits after the last renewal before taking over "
        "(env DRA_LEASE_DURATION)",
    )
    add(
        "--renew-deadline",
        type=seconds,
        default=env("DRA_RENEW_DEADLINE", "10s"),
        help="seconds the leader keeps trying to renew before it stops leading "
        "(env DRA_RENEW_DEADLINE)",
    )
    add(
        "--retry-period",
        type=seconds,
        default=env("DRA_RETRY_PERIOD", "2s"),
        help="seconds between attempts to acquire or renew the Lease (env DRA_RETRY_PERIOD)",
    )
    add(
        "--metrics-port",
        type=port,
        default=env("DRA_METRICS_PORT"),
        help="serve Prometheus metrics on this port (env DRA_METRICS_PORT)",
    )
    add(
        "--healthcheck-port",
        type=port,
        default=env("DRA_HEALTHCHECK_PORT"),
        help="serve HTTP /healthz (liveness) and /readyz on this port (env DRA_HEALTHCHECK_PORT)",
    )
    add(
        "--resync-period",
        type=seconds,
        default=env("DRA_RESYNC_PERIOD", "30s"),
        help="retry pods that did not fit at least this often (env DRA_RESYNC_PERIOD)",
    )
    add(
        "--settle-time",
        type=seconds,
        default=env("DRA_SETTLE_TIME", "0.2s"),
        help="seconds written allocations are watched for a colliding allocation by another "
        "allocator before the gate is lifted (env DRA_SETTLE_TIME)",
    )
    add("--log-format", default=env("DRA_LOG_FORMAT", "auto"), help="json, console or auto")
    add("--log-level", default=env("DRA_LOG_LEVEL", "info"), help="debug, info, warning, error")
    return parser


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
    )


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
