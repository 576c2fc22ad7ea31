"""`dra-kubelet-plugin` command line.

Every flag also reads an environment variable (named in its help), because the Helm chart sets
per-node values such as the node name and the pod UID through the downward API, which only
reaches a container as environment.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from dra_driver import DEFAULT_DRIVER_NAME, __version__
from dra_driver.cli.env_flags import env, port
from dra_driver.logging_setup import configure_logging
from dra_driver.signals import install_signal_handlers
from dra_driver.slices import Shape
from kubeletplugin.daemon import PluginConfig, PluginDaemon
from kubeletplugin.mps.daemon import DEFAULT_MPS_CONTROL

log = structlog.get_logger(__name__)


def _shapes(text: str) -> frozenset[Shape]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    known = {shape.value: shape for shape in Shape}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--shapes: unknown shape(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(known)}"
        )
    return frozenset(known[n] for n in names)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-kubelet-plugin",
        description="GPU DRA kubelet plugin: publishes this node's GPUs and prepares claims.",
    )
    add = parser.add_argument
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add(
        "--driver-name",
        default=env("DRA_DRIVER_NAME", DEFAULT_DRIVER_NAME),
        help="driver name and attribute domain (env DRA_DRIVER_NAME)",
    )
    add(
        "--node-name",
        default=env("NODE_NAME"),
        help="this node's name, also the pool name (env NODE_NAME; required)",
    )
    add(
        "--kubeconfig",
        default=env("KUBECONFIG"),
        help="kubeconfig file; in-cluster config when absent (env KUBECONFIG)",
    )
    add(
        "--plugin-dir",
        type=Path,
        default=env("DRA_PLUGIN_DIR"),
        help="directory of the DRA socket; default /var/lib/kubelet/plugins/<driver> "
        "(env DRA_PLUGIN_DIR)",
    )
    add(
        "--registry-dir",
        type=Path,
        default=env("DRA_REGISTRY_DIR", "/var/lib/kubelet/plugins_registry"),
        help="kubelet's plugin registration directory (env DRA_REGISTRY_DIR)",
    )
    add(
        "--cdi-root",
        type=Path,
        default=env("CDI_ROOT", "/var/run/cdi"),
        help="where per-claim CDI specs are written (env CDI_ROOT)",
    )
    add(
        "--state-dir",
        type=Path,
        default=env("DRA_STATE_DIR"),
        help="where the checkpoint lives; default the plugin dir (env DRA_STATE_DIR)",
    )
    add(
        "--host-state-dir",
        type=Path,
        default=env("DRA_HOST_STATE_DIR"),
        help="the state directory as the host sees it, when the plugin's container mounts it at "
        "another path; MPS pipe directories are mounted into containers from there; default "
        "the state dir (env DRA_HOST_STATE_DIR)",
    )
    add(
        "--mps-control",
        type=Path,
        default=env("DRA_MPS_CONTROL"),
        help=f"the nvidia-cuda-mps-control binary that runs a GPU's MPS control daemon; default "
        f"{DEFAULT_MPS_CONTROL}, or a built-in stand-in with --fake-gpus (env DRA_MPS_CONTROL)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--fake-gpus",
        default=env("DRA_FAKE_GPUS"),
        metavar="PROFILE:COUNT",
        help="fake GPUs, e.g. H100-SXM5-80GB:8, or a YAML file (env DRA_FAKE_GPUS)",
    )
    source.add_argument(
        "--nvml",
        action="store_true",
        default=env("DRA_NVML", "") in ("1", "true"),
        help="the real GPUs through NVML (env DRA_NVML=true)",
    )
    add(
        "--fake-state-dir",
        type=Path,
        default=env("DRA_FAKE_STATE_DIR"),
        help="where fake GPUs keep their state across restarts; default <state-dir>/fake-gpus "
        "(env DRA_FAKE_STATE_DIR)",
    )
    add(
        "--shapes",
        type=_shapes,
        default=_shapes(env("DRA_SHAPES", "gpu,mig,timeslice,shared") or ""),
        help="device shapes to publish, comma-separated from gpu,mig,timeslice,shared "
        "(env DRA_SHAPES)",
    )
    add(
        "--timeslice-shares",
        type=int,
        default=env("DRA_TIMESLICE_SHARES", "4"),
        help="time-slice share devices per GPU (env DRA_TIMESLICE_SHARES)",
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
        help="serve the gRPC liveness check on this TCP port (env DRA_HEALTHCHECK_PORT)",
    )
    add(
        "--pod-uid",
        default=env("POD_UID"),
        help="socket names carry this UID, for overlapping rolling updates (env POD_UID)",
    )
    add("--health-poll-interval", type=float, default=5.0, help="seconds between GPU health checks")
    add(
        "--delete-slices-on-exit",
        action="store_true",
        default=env("DRA_DELETE_SLICES_ON_EXIT", "") in ("1", "true"),
        help="delete this node's ResourceSlices on a clean shutdown "
        "(env DRA_DELETE_SLICES_ON_EXIT)",
    )
    add(
        "--claim-cache",
        action="store_true",
        default=env("DRA_CLAIM_CACHE", "") in ("1", "true"),
        help="answer prepare from a watched copy of every ResourceClaim when it can, instead of "
        "a GET per claim; needs list and watch on resourceclaims in all namespaces, and every "
        "node then watches every claim, so it is off by default (env DRA_CLAIM_CACHE)",
    )
    add("--log-format", default=env("DRA_LOG_FORMAT", "auto"), help="json, console or auto")
    add("--log-level", default=env("DRA_LOG_LEVEL", "info"))
    return parser


def config_from_args(args: argparse.Namespace) -> PluginConfig:
    plugin_dir: Path = args.plugin_dir or Path(f"/var/lib/kubelet/plugins/{args.driver_name}")
    state_dir: Path = args.state_dir or plugin_dir
    return PluginConfig(
        node_name=args.node_name,
        driver_name=args.driver_name,
        kubeconfig=args.kubeconfig,
        plugin_dir=plugin_dir,
        registry_dir=args.registry_dir,
        cdi_root=args.cdi_root,
        state_dir=state_dir,
        fake_gpus=args.fake_gpus,
        fake_state_dir=args.fake_state_dir or (state_dir / "fake-gpus"),
        nvml=args.nvml,
        shapes=args.shapes,
        timeslice_shares=args.timeslice_shares,
        metrics_port=args.metrics_port,
        healthcheck_port=args.healthcheck_port,
        pod_uid=args.pod_uid,
        health_poll_s=args.health_poll_interval,
        delete_slices_on_exit=args.delete_slices_on_exit,
        claim_cache=args.claim_cache,
        mps_control=args.mps_control,
        host_state_dir=args.host_state_dir,
    )


async def _serve(config: PluginConfig) -> None:
    stop = asyncio.Event()
    install_signal_handlers(asyncio.get_running_loop(), stop)
    daemon = await asyncio.to_thread(PluginDaemon, config)
    await daemon.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.node_name:
        parser.error("--node-name (or NODE_NAME) is required")
    if not args.fake_gpus and not args.nvml:
        parser.error("choose the GPUs: --fake-gpus PROFILE:COUNT or --nvml")
    if args.timeslice_shares < 0:
        parser.error("--timeslice-shares must be 0 or more")
    try:
        configure_logging(args.log_format, args.log_level)
    except ValueError as err:
        parser.error(str(err))
    config = config_from_args(args)
    try:
        asyncio.run(_serve(config))
    except Exception as err:
        log.error("kubelet plugin failed", error=str(err))
        print(f"dra-kubelet-plugin: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
