"""`dra-kubelet-plugin` command line.

The flags themselves are data, in `kubeletplugin.flags`; this module turns them into settings and
runs the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from dra_driver import __version__
from dra_driver.cli import flags
from dra_driver.logging_setup import configure_logging
from dra_driver.signals import install_signal_handlers
from kubeletplugin.daemon import PluginConfig, PluginDaemon
from kubeletplugin.flags import FLAGS

log = structlog.get_logger(__name__)


def build_parser() -> argparse.ArgumentParser:
    return flags.build_parser(
        prog="dra-kubelet-plugin",
        description="GPU DRA kubelet plugin: publishes this node's GPUs and prepares claims.",
        version=__version__,
        flags=FLAGS,
    )


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
        driver_root=args.driver_root,
        container_driver_root=args.container_driver_root,
        dev_root=args.dev_root,
        proc_root=args.proc_root,
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
        telemetry_interval_s=args.telemetry_interval,
        idle_threshold_percent=args.idle_threshold,
        idle_after_s=args.idle_after,
        lend_after_s=args.lend_after,
        lend_headroom_bytes=args.lend_headroom,
    )


async def _serve(config: PluginConfig) -> None:
    stop = asyncio.Event()
    install_signal_handlers(asyncio.get_running_loop(), stop)
    daemon = await asyncio.to_thread(PluginDaemon, config)
    await daemon.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    flags.require(parser, args, FLAGS)
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
