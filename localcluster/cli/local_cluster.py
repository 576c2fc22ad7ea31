"""`dra-driver local-cluster`: the embedded cluster with fake GPUs, for demos and experiments.

Without `--demo` it runs until interrupted and prints the kubeconfig path, so the `kubernetes`
client (or any tool that reads a kubeconfig) can create claims and pods against it. With
`--demo PATH...` it applies the example objects, prints what every pod got and exits: 0 when
every pod was prepared and released, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from dra_driver.logging_setup import configure_logging
from localcluster.defaults import (
    DEFAULT_GPUS,
    DEFAULT_WATCH_HISTORY,
    DEMO_GPUS,
    DEMO_IDLE_AFTER_S,
)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


async def _serve(args: argparse.Namespace) -> int:
    from dra_driver.deviceclasses import device_classes  # noqa: PLC0415 - see `run`
    from localcluster.cluster import LocalCluster  # noqa: PLC0415

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with LocalCluster(
        nodes=args.nodes,
        gpus=args.gpus or DEFAULT_GPUS,
        watch_history=args.watch_history,
        idle_after=args.idle_after,
        lend_after=args.lend_after,
        plugin_metrics=True,
        control_plane=args.control_plane,
    ) as cluster:
        await cluster.wait_registered()
        cluster.apply(device_classes(cluster.driver_name))  # what the chart would install
        print(f"API server: {cluster.url} ({cluster.control_plane} control plane)", flush=True)
        print(f"kubeconfig: {cluster.kubeconfig}", flush=True)
        for node in cluster.nodes:
            print(
                f"{node.name}: plugin log {node.log_path}, "
                f"metrics http://127.0.0.1:{node.metrics_port}/metrics",
                flush=True,
            )
        print("Press Ctrl-C to stop.", file=sys.stderr, flush=True)
        await stop.wait()
    return 0


def run(args: argparse.Namespace) -> int:
    # The report is the output; the stand-ins' own logs would drown it unless asked for.
    configure_logging("console", "info" if args.verbose else "warning")
    # Imported here, not at the top: every `dra-driver` command registers this module, and
    # only this one needs the API server and the plugin processes.
    from localcluster.demo import run_demo  # noqa: PLC0415

    if args.demo:
        return asyncio.run(
            run_demo(
                args.demo,
                nodes=args.nodes,
                gpus=args.gpus or DEMO_GPUS,
                timeout_s=args.timeout,
                out=sys.stdout,
                watch_history=args.watch_history,
                idle_after=args.idle_after,
                control_plane=args.control_plane,
            )
        )
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_serve(args))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "local-cluster",
        help="run the embedded local cluster with fake GPUs (demos and tests, not production)",
        description=(
            "Run the in-memory API server, stand-ins for the scheduler, the claim controller "
            "and kubelet, and one kubelet plugin process per node on fake GPUs."
        ),
    )
    parser.add_argument("--nodes", type=_positive, default=2, help="number of nodes (default 2)")
    parser.add_argument(
        "--gpus",
        metavar="PROFILE:COUNT",
        help=f"fake GPUs of every node, or a YAML file of them (default {DEFAULT_GPUS}; with "
        f"--demo, {DEMO_GPUS}: eight H100, two with MIG mode off)",
    )
    parser.add_argument(
        "--demo",
        type=Path,
        nargs="+",
        metavar="PATH",
        help="apply these YAML files (or directories of them) after the chart's DeviceClasses, "
        "check that every pod got what it asked for, report, and exit",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the demo pods"
    )
    parser.add_argument(
        "--watch-history",
        type=_positive,
        default=DEFAULT_WATCH_HISTORY,
        metavar="EVENTS",
        help="writes the API server keeps for watches; older watches get 410 Gone and list "
        f"again (default {DEFAULT_WATCH_HISTORY})",
    )
    parser.add_argument(
        "--idle-after",
        type=_seconds,
        metavar="SECONDS",
        help="every plugin's --idle-after: how long a device must stay unused before its "
        "claim's status says Idle=True (default: the plugin's, 30 minutes; the demo uses "
        f"{DEMO_IDLE_AFTER_S:g} s); the plugins sample usage every second",
    )
    parser.add_argument(
        "--lend-after",
        type=_seconds,
        metavar="SECONDS",
        help="every plugin's --lend-after: lend a GPU to best-effort borrowers (DeviceClass "
        "gpu-opportunistic) once its owner has been idle this long, or while nobody holds it "
        "(default: lend nothing; docs/overcommit.md)",
    )
    parser.add_argument(
        "--control-plane",
        choices=("embedded", "upstream"),
        help="embedded: the in-memory API server and stand-ins (starts in a second); upstream: "
        "etcd, kube-apiserver, kube-controller-manager and kube-scheduler 1.37 built by "
        "hack/upstream.sh, with the daemons logged in as the chart's ServiceAccounts "
        "(default: $DRA_CONTROL_PLANE, else embedded)",
    )
    parser.add_argument("--verbose", action="store_true", help="log what the stand-ins do")
    parser.set_defaults(run=run)
