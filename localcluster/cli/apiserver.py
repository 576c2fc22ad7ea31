"""`dra-driver apiserver`: run the local test/demo API server until interrupted.

It gives demos and manual experiments "a cluster" in one command: point `KUBECONFIG` at the
file it writes and the driver, the controller or any official-client script talk to it. It is
the in-memory harness from `localcluster`, not a real control plane.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from dra_driver.cli.flag_types import port
from localcluster.defaults import DEFAULT_WATCH_HISTORY


def _events(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--watch-history: {text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--watch-history: must be at least 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    # Imported here: registering the command must not load the HTTP server.
    from localcluster.apiserver import ApiServer  # noqa: PLC0415

    log = None
    if args.request_log is not None:
        try:
            log = args.request_log.open("a", buffering=1)
        except OSError as err:
            print(f"--request-log: cannot write {args.request_log}: {err}", file=sys.stderr)
            return 2
    stop = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, _stop)
    with (
        contextlib.closing(log) if log is not None else contextlib.nullcontext(),
        ApiServer(port=args.port, history=args.watch_history, request_log=log) as server,
    ):
        print(f"API server listening on {server.url}", flush=True)
        if args.kubeconfig_out is not None:
            path = server.write_kubeconfig(args.kubeconfig_out)
            print(f"kubeconfig written to {path}", flush=True)
        print("Press Ctrl-C to stop.", file=sys.stderr, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    signal.signal(signal.SIGTERM, previous)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "apiserver",
        help="run an in-memory Kubernetes API server for tests and demos (not production)",
        description=(
            "Serve an in-memory Kubernetes API (core v1, resource.k8s.io/v1, "
            "coordination.k8s.io/v1) on 127.0.0.1 over plain HTTP with no authentication, "
            "until interrupted. For tests and demos only."
        ),
    )
    parser.add_argument(
        "--port", type=port, default=0, help="port to listen on (default 0: any free port)"
    )
    parser.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=None,
        metavar="PATH",
        help="write a kubeconfig pointing at the server to PATH",
    )
    parser.add_argument(
        "--watch-history",
        type=_events,
        default=DEFAULT_WATCH_HISTORY,
        metavar="EVENTS",
        help="writes kept for watches to resume from; a watch from an older resourceVersion "
        f"gets 410 Gone and must list again (default {DEFAULT_WATCH_HISTORY})",
    )
    parser.add_argument(
        "--request-log",
        type=Path,
        default=None,
        metavar="PATH",
        help="append a line per request to PATH (Unix time, method, path, `watch` for a watch), "
        "to count what a client sends",
    )
    parser.set_defaults(run=run)
