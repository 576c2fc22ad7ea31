"""`dra-controller`'s flags. The chart sets them through the environment; POD_NAME and
POD_NAMESPACE come from the downward API and give the Lease its holder and namespace."""

from __future__ import annotations

import dataclasses
import socket

from dra_driver.allocator import AllocationMode
from dra_driver.cli import common_flags as common
from dra_driver.cli.flag_types import seconds
from dra_driver.cli.flags import Flag, Kind

FLAGS: tuple[Flag, ...] = (
    dataclasses.replace(
        common.DRIVER_NAME, help="driver name whose devices this controller allocates"
    ),
    common.KUBECONFIG,
    Flag(
        "--gate-name",
        env="DRA_GATE_NAME",
        help="scheduling gate that hands a pod to this controller; default <driver>/allocation",
    ),
    Flag(
        "--finalizer",
        env="DRA_FINALIZER",
        help="finalizer put on the claims this controller allocates; default <driver>/allocation",
    ),
    Flag(
        "--gang-label",
        env="DRA_GANG_LABEL",
        help="pod label naming the pod's gang; default <driver>/gang",
    ),
    Flag(
        "--gang-size-label",
        env="DRA_GANG_SIZE_LABEL",
        help="pod label giving the gang's size; default <driver>/gang-size",
    ),
    Flag(
        "--mode",
        env="DRA_ALLOCATION_MODE",
        choices=tuple(m.value for m in AllocationMode),
        default=AllocationMode.SCORED.value,
        help="scored (topology and fragmentation aware) or first-fit (the kube-scheduler's choice)",
    ),
    Flag(
        "--leader-elect",
        env="DRA_LEADER_ELECT",
        kind=Kind.TOGGLE,
        default="true",
        help="run only while holding the Lease, so replicas can stand by",
    ),
    Flag(
        "--lease-name",
        env="DRA_LEASE_NAME",
        help="name of the coordination.k8s.io Lease; default <driver with dashes>-controller",
    ),
    Flag(
        "--lease-namespace",
        env="POD_NAMESPACE",
        default="default",
        help="namespace of the Lease",
    ),
    Flag(
        "--identity",
        env="POD_NAME",
        fallback=socket.gethostname,
        fallback_doc="the host name",
        help="this replica's name in the Lease",
    ),
    Flag(
        "--lease-duration",
        env="DRA_LEASE_DURATION",
        type=seconds,
        default="15s",
        help="seconds a standby waits after the last renewal before taking over",
    ),
    Flag(
        "--renew-deadline",
        env="DRA_RENEW_DEADLINE",
        type=seconds,
        default="10s",
        help="seconds the leader keeps trying to renew before it stops leading",
    ),
    Flag(
        "--retry-period",
        env="DRA_RETRY_PERIOD",
        type=seconds,
        default="2s",
        help="seconds between attempts to acquire or renew the Lease",
    ),
    common.METRICS_PORT,
    dataclasses.replace(
        common.HEALTHCHECK_PORT,
        help="serve HTTP /healthz (liveness) and /readyz on this port",
    ),
    Flag(
        "--resync-period",
        env="DRA_RESYNC_PERIOD",
        type=seconds,
        default="30s",
        help="retry pods that did not fit at least this often",
    ),
    Flag(
        "--default-queue",
        env="DRA_DEFAULT_QUEUE",
        default="default",
        help="queue of pods whose namespace no GpuQueue names (no guarantee, no limit, served "
        "last); a GpuQueue of this name is refused",
    ),
    Flag(
        "--reclaim-hold",
        env="DRA_RECLAIM_HOLD",
        type=seconds,
        default="60s",
        help="seconds devices freed by reclaim are kept for the pod they were freed for",
    ),
    Flag(
        "--report-interval",
        env="DRA_REPORT_INTERVAL",
        type=seconds,
        default="10s",
        help="a waiting pod is told a changed reason (Event and condition) at most this often; "
        "its first reason goes out when the allocation work pauses, at most 5 s later",
    ),
    Flag(
        "--settle-time",
        env="DRA_SETTLE_TIME",
        type=seconds,
        default="0.2s",
        help="seconds written allocations are watched for a colliding allocation by another "
        "allocator before the gate is lifted",
    ),
    Flag(
        "--workload-profile",
        env="DRA_WORKLOAD_PROFILE",
        help="scored mode: weigh placement by this workload profile file (shapes and counts, "
        "see docs/allocation.md) instead of learning it from the pods placed",
    ),
    Flag(
        "--workload-configmap",
        env="DRA_WORKLOAD_CONFIGMAP",
        help="ConfigMap (in the Lease's namespace) that keeps the learned workload profile "
        "across restarts and leader changes; default <lease name>-workload, - to keep none",
    ),
    common.LOG_FORMAT,
    common.LOG_LEVEL,
)

__all__ = ["FLAGS"]
