"""`dra-driver queues`: the GpuQueues as a tree, with what each is guaranteed, may use, holds,
borrows and has waiting, and whether the controller accepted it.

It reads only what the controller writes into each queue's status, so it shows the controller's
view, not a fresh computation; a queue without status has not been seen by a controller yet.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from dra_driver.cli import common_flags
from dra_driver.cli.flags import add_flags

KUBECONFIG = dataclasses.replace(
    common_flags.KUBECONFIG,
    help="kubeconfig file; ~/.kube/config when it exists, else the in-cluster config",
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "queues",
        help="list the GpuQueues as a tree, with their quotas and usage",
        description=(
            "List the GpuQueues, children indented under their parent: namespaces, guaranteed "
            "and limit (gpu/memory), weight, reclaim policy, and from the status the controller "
            "writes what each uses, borrows and has pending, and whether it is valid; IDLE counts "
            "the devices whose claims' status says they are idle. The reasons for invalid "
            "queues follow the table."
        ),
    )
    add_flags(parser, [KUBECONFIG, common_flags.DRIVER_NAME])
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: registering the command must not load the Kubernetes client.
    from dra_driver.cli.claim_idleness import held_devices, idle_by_namespace  # noqa: PLC0415
    from dra_driver.cli.queue_list import QueueListError, list_claims, list_queues  # noqa: PLC0415
    from dra_driver.cli.queue_table import render_json, render_table, tree_rows  # noqa: PLC0415

    try:
        queues = list_queues(args.kubeconfig)
    except QueueListError as err:
        print(f"dra-driver queues: {err}", file=sys.stderr)
        return 1
    claims = list_claims(args.kubeconfig)
    if claims is None:
        print("dra-driver queues: cannot read the ResourceClaims; IDLE is unknown", file=sys.stderr)
        idle = None
    else:
        idle = idle_by_namespace(held_devices(claims, args.driver_name))
    rows = tree_rows(queues, idle)
    sys.stdout.write(render_json(rows) if args.output == "json" else render_table(rows))
    sys.stdout.flush()
    return 0
