"""`dra-kubelet-plugin`'s flags. The chart sets them through the environment, because per-node
values such as the node name and the pod UID come from the downward API."""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath

from dra_driver.cli import common_flags as common
from dra_driver.cli.flag_types import (
    byte_quantity,
    duration,
    optional_duration,
    percent,
    shapes,
)
from dra_driver.cli.flags import Flag, Kind

GPU_SOURCE = "gpu-source"
"""The flags that choose where the GPUs come from; at most one may be given."""

FLAGS: tuple[Flag, ...] = (
    dataclasses.replace(common.DRIVER_NAME, help="driver name and attribute domain"),
    Flag(
        "--node-name",
        env="NODE_NAME",
        required=True,
        help="this node's name, also the pool name",
    ),
    common.KUBECONFIG,
    Flag(
        "--plugin-dir",
        env="DRA_PLUGIN_DIR",
        type=Path,
        help="directory of the DRA socket; default /var/lib/kubelet/plugins/<driver>",
    ),
    Flag(
        "--registry-dir",
        env="DRA_REGISTRY_DIR",
        type=Path,
        default="/var/lib/kubelet/plugins_registry",
        help="kubelet's plugin registration directory",
    ),
    Flag(
        "--cdi-root",
        env="CDI_ROOT",
        type=Path,
        default="/var/run/cdi",
        help="where per-claim CDI specs are written",
    ),
    Flag(
        "--state-dir",
        env="DRA_STATE_DIR",
        type=Path,
        help="where the checkpoint lives; default the plugin dir",
    ),
    Flag(
        "--host-state-dir",
        env="DRA_HOST_STATE_DIR",
        type=Path,
        help="the state directory as the host sees it, when the plugin's container mounts it at "
        "another path; MPS pipe directories are mounted into containers from there; default "
        "the state dir",
    ),
    Flag(
        "--mps-control",
        env="DRA_MPS_CONTROL",
        type=Path,
        help="the nvidia-cuda-mps-control binary that runs a GPU's MPS control daemon; default "
        "usr/bin/nvidia-cuda-mps-control under the driver root (/ with --nvml), or a built-in "
        "stand-in with --fake-gpus",
    ),
    Flag(
        "--fake-gpus",
        env="DRA_FAKE_GPUS",
        exclusive=GPU_SOURCE,
        metavar="PROFILE:COUNT",
        help="fake GPUs, e.g. H100-SXM5-80GB:8, or a YAML file",
    ),
    Flag(
        "--nvml",
        env="DRA_NVML",
        kind=Kind.SWITCH,
        exclusive=GPU_SOURCE,
        help="the real GPUs through NVML",
    ),
    Flag(
        "--fake-state-dir",
        env="DRA_FAKE_STATE_DIR",
        type=Path,
        help="where fake GPUs keep their state across restarts; default <state-dir>/fake-gpus",
    ),
    Flag(
        "--driver-root",
        env="DRA_DRIVER_ROOT",
        type=Path,
        help="where this process sees the host's NVIDIA driver files: / for a driver installed "
        "on the host, the mount of /run/nvidia/driver for a driver container; default / with "
        "--nvml, and no driver files at all with --fake-gpus",
    ),
    Flag(
        "--container-driver-root",
        env="DRA_CONTAINER_DRIVER_ROOT",
        type=PurePosixPath,
        help="the driver root as the container runtime sees it: the host path written into "
        "CDI mounts and hooks; default --driver-root",
    ),
    Flag(
        "--dev-root",
        env="DRA_DEV_ROOT",
        type=Path,
        default="/dev",
        help="where this process sees the host's device nodes",
    ),
    Flag(
        "--proc-root",
        env="DRA_PROC_ROOT",
        type=Path,
        default="/proc",
        help="where this process sees the host's /proc: the MIG capability files, and the "
        "cgroups of the processes on the GPUs, which say which pod each belongs to (telemetry)",
    ),
    Flag(
        "--shapes",
        env="DRA_SHAPES",
        type=shapes,
        default="gpu,mig,timeslice,shared,gpu-opportunistic",
        help="device shapes to publish, comma-separated from gpu,mig,timeslice,shared,"
        "gpu-opportunistic (published only where --lend-after is set)",
    ),
    Flag(
        "--timeslice-shares",
        env="DRA_TIMESLICE_SHARES",
        type=int,
        default="4",
        help="time-slice share devices per GPU",
    ),
    common.METRICS_PORT,
    dataclasses.replace(
        common.HEALTHCHECK_PORT, help="serve the gRPC liveness check on this TCP port"
    ),
    Flag(
        "--pod-uid",
        env="POD_UID",
        help="socket names carry this UID, for overlapping rolling updates",
    ),
    Flag(
        "--health-poll-interval",
        type=float,
        default="5.0",
        help="seconds between GPU health checks",
    ),
    Flag(
        "--delete-slices-on-exit",
        env="DRA_DELETE_SLICES_ON_EXIT",
        kind=Kind.SWITCH,
        help="delete this node's ResourceSlices on a clean shutdown",
    ),
    Flag(
        "--claim-cache",
        env="DRA_CLAIM_CACHE",
        kind=Kind.SWITCH,
        help="answer prepare from a watched copy of every ResourceClaim when it can, instead of "
        "a GET per claim; needs list and watch on resourceclaims in all namespaces, and every "
        "node then watches every claim, so it is off by default",
    ),
    Flag(
        "--telemetry-interval",
        env="DRA_TELEMETRY_INTERVAL",
        type=duration,
        default="10",
        help="seconds (or a Go duration) between GPU usage samples for the per-device metrics "
        "and the Idle condition in claims' status; 0 turns telemetry off",
    ),
    Flag(
        "--idle-threshold",
        env="DRA_IDLE_THRESHOLD",
        type=percent,
        default="5",
        help="SM utilisation in percent (0..100) below which a prepared device counts as idle",
    ),
    Flag(
        "--idle-after",
        env="DRA_IDLE_AFTER",
        type=duration,
        default="30m",
        help="how long a device stays below the idle threshold before its claim's status says "
        "Idle=True: seconds or a Go duration such as 30m or 1h30m",
    ),
    Flag(
        "--lend-after",
        env="DRA_LEND_AFTER",
        type=optional_duration,
        default="",
        help="lend a GPU to best-effort borrowers (DeviceClass gpu-opportunistic) once its owner "
        "has been below the idle threshold this long, or while nobody holds it: seconds or a "
        "Go duration; empty (the default) lends nothing (docs/overcommit.md; needs telemetry)",
    ),
    Flag(
        "--lend-headroom",
        env="DRA_LEND_HEADROOM",
        type=byte_quantity,
        default="4Gi",
        help="GPU memory kept free for a lent GPU's owner: a borrower may pin at most what the "
        "owner leaves free less this, and is taken back when less than half of it is free",
    ),
    common.LOG_FORMAT,
    common.LOG_LEVEL,
)

__all__ = ["FLAGS", "GPU_SOURCE", "shapes"]
