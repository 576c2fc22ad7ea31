"""Over-commit: best-effort batch work on lent GPUs, with lending off and then on, in one run.

    .venv/bin/python -m tests.bench.bench_overcommit [--day 120] [--days 1] [--lend-after 2]
        [--control-plane embedded|upstream]

The local cluster: 2 nodes x 8 fake H100 (MIG mode off), the plugins sampling every second
with `--idle-threshold=10` and, with lending on, `--lend-after`. 16 owner services hold a whole
GPU each (kube-scheduler's path: ungated pods, DeviceClass gpu), each following the daily
curve `daily:peak=80,valley=5,day=<day>,phase=i/16,busy=0.4`: a compressed day in which each
owner is busy for 40 % of it, at its own hours, and sits at 5 % the rest. A backlog of
best-effort batch jobs (DeviceClass gpu-opportunistic, 60 % SM and 48 GiB each) is kept 16
deep; a job is done once it has computed `--work` GPU-seconds (its SM share times its running
seconds), and is then deleted and replaced; a job taken back loses what it computed.

Everything is read the way the plugin reads it: the fake GPUs' processes and their curves, as
the backend's usage sample reports them, every `--poll` seconds over `--days` days after every
owner runs. Reported per mode:

- mean fleet SM utilisation: each GPU's SM percent (its processes', at most 100), averaged over
  GPUs and time;
- batch GPU-seconds done (jobs finished) and lost (jobs taken back);
- take-backs: the plugins' `dra_gpu_take_backs_total`;
- the owners' interference time: from the moment an owner's curve crossed the idle threshold
  with a borrower on its GPU to the first look that finds no borrower process there (p50, p99,
  max); the target is one sampling interval plus 2 s;
- owner memory headroom: each GPU's memory less everything its processes hold, at its minimum
  over the run (never below zero);
- allocation violations: the independent checker over every claim, every `--check` seconds,
  counting what it finds on allocations it sees for the first time (a device double-booked
  shows there); a taint counts only if the previous look's slices had it too, since one the
  plugin adds after an allocation does not make that allocation wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake.load_curve import LoadCurve
from dra_driver.backends.fake.state import FileStateStore
from dra_driver.checker.rules import check_allocations
from dra_driver.deviceclasses import device_classes
from dra_driver.logging_setup import configure_logging
from localcluster.cluster import TELEMETRY_INTERVAL_S, LocalCluster

DRIVER = DEFAULT_DRIVER_NAME
NODES, GPUS_PER_NODE = 2, 8
OWNERS = NODES * GPUS_PER_NODE
THRESHOLD = 10.0
PEAK, VALLEY, BUSY = 80.0, 5.0, 0.4
BORROWER_PERCENT = 60.0
BORROWER_MEMORY = "48Gi"
BACKLOG = OWNERS
GPU_MEMORY = 80 * 1024**3
GROUP, VERSION = "resource.k8s.io", "v1"


def _template(name: str, device_class: str, capacity: dict[str, str] | None = None) -> Any:
    request: dict[str, Any] = {"deviceClassName": device_class}
    if capacity:
        request["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


def _pod(name: str, template: str, load: str) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {f"{DRIVER}/fake-utilization": load},
        },
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def owner_curve(index: int, day_s: float) -> str:
    return LoadCurve.daily(PEAK, VALLEY, day_s, index / OWNERS, BUSY).to_wire()


@dataclass
class Figures:
    lending: bool
    seconds: float = 0.0
    sm_area: float = 0.0
    done_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    jobs_done: int = 0
    jobs_taken_back: int = 0
    interference: list[float] = field(default_factory=list)
    min_headroom: float = float("inf")
    violations: int = 0
    violation_texts: list[str] = field(default_factory=list)
    checks: int = 0
    take_backs: float = 0.0

    def row(self) -> dict[str, Any]:
        spread = sorted(self.interference)

        def quantile(q: float) -> float | None:
            if not spread:
                return None
            return round(spread[min(len(spread) - 1, int(q * len(spread)))], 2)

        return {
            "lending": self.lending,
            "measured_s": round(self.seconds, 1),
            "fleet_sm_percent": round(self.sm_area / (self.seconds * OWNERS), 2),
            "batch_gpu_s_done": round(self.done_gpu_s, 1),
            "batch_gpu_s_lost": round(self.lost_gpu_s, 1),
            "jobs_done": self.jobs_done,
            "jobs_taken_back": self.jobs_taken_back,
            "take_backs": int(self.take_backs),
            "interference_p50_s": quantile(0.5),
            "interference_p99_s": quantile(0.99),
            "interference_max_s": round(max(spread), 2) if spread else None,
            "interference_target_s": TELEMETRY_INTERVAL_S + 2.0,
            "min_owner_headroom_gib": round(self.min_headroom / 1024**3, 2),
            "allocations_checked": self.checks,
            "allocation_violations": self.violations,
            "first_violations": self.violation_texts[:3],
        }


@dataclass
class _Gpu:
    uuid: str
    owner_uid: str | None = None
    owner_curve: LoadCurve | None = None
    borrowers_since: float | None = None
    crossed_at: float | None = None


def _percent(process: Any, now: float) -> float:
    if process.curve:
        return LoadCurve.from_wire(process.curve).percent_at(now, process.started_at or now)
    return float(process.sm_percent)


def _crossing(curve: LoadCurve, before: float, after: float) -> float:
    """When the curve rose through the threshold between two looks (bisection)."""
    low, high = before, after
    for _ in range(30):
        middle = (low + high) / 2
        if curve.percent_at(middle, 0) >= THRESHOLD:
            high = middle
        else:
            low = middle
    return high


def _take_backs(cluster: LocalCluster) -> float:
    total = 0.0
    for node in cluster.nodes:
        if node.metrics_port is None:
            continue
        url = f"http://127.0.0.1:{node.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith("dra_gpu_take_backs_total"):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def run_mode(lending: bool, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    gpus = workdir / "gpus.yaml"
    gpus.write_text(
        f"gpus:\n  - profile: H100-SXM5-80GB\n    count: {GPUS_PER_NODE}\n    migEnabled: false\n"
    )
    figures = Figures(lending)
    verbose = sys.stderr.isatty()
    async with LocalCluster(
        nodes=NODES,
        gpus=str(gpus),
        lend_after=args.lend_after if lending else None,
        plugin_args=(f"--idle-threshold={THRESHOLD:g}",),
        plugin_metrics=True,
        control_plane=args.control_plane,
    ) as cluster:
        await cluster.wait_registered()
        assert cluster.api is not None
        core = client.CoreV1Api(cluster.api)
        custom = client.CustomObjectsApi(cluster.api)
        cluster.apply(
            [
                *device_classes(DRIVER),
                _template("whole", "gpu.dra-driver.dev"),
                _template(
                    "batch",
                    "gpu-opportunistic.dra-driver.dev",
                    {"memory": BORROWER_MEMORY, "compute": f"{BORROWER_PERCENT:g}"},
                ),
                *(_pod(f"owner-{i}", "whole", owner_curve(i, args.day)) for i in range(OWNERS)),
            ]
        )
        while True:
            pods = await asyncio.to_thread(core.list_namespaced_pod, "default")
            running = [p for p in pods.items if p.status.phase == "Running"]
            if len(running) == OWNERS:
                break
            await asyncio.sleep(0.5)
        stores = [FileStateStore(n.fake_state_dir, n.name) for n in cluster.nodes]
        jobs: dict[str, float] = {}  # borrower pod name -> GPU-seconds computed
        uids: dict[str, str] = {}
        next_job = 0
        gpus_by_uuid: dict[str, _Gpu] = {}
        started = last = time.time()
        last_check = 0.0
        checked: set[str] = set()
        previous_slices: list[Any] = []
        end = started + args.days * args.day
        while (now := time.time()) < end:
            dt = now - last
            last = now
            listed = (await asyncio.to_thread(core.list_namespaced_pod, "default")).items
            by_name = {p.metadata.name: p for p in listed}
            owners = {p.metadata.uid: p for p in listed if p.metadata.name.startswith("owner-")}
            for name in list(jobs):
                if name not in by_name or by_name[name].metadata.deletion_timestamp:
                    figures.jobs_taken_back += 1
                    figures.lost_gpu_s += jobs.pop(name)
            while len(jobs) < BACKLOG:
                name = f"batch-{next_job}"
                next_job += 1
                await asyncio.to_thread(
                    cluster.apply, [_pod(name, "batch", f"{BORROWER_PERCENT:g}")]
                )
                jobs[name] = 0.0
            for name in jobs:
                pod = by_name.get(name)
                if pod is not None:
                    uids[pod.metadata.uid] = name
            processes = []
            for store in stores:
                with store.transaction() as state:
                    for uuid in state.gpus:
                        gpus_by_uuid.setdefault(uuid, _Gpu(uuid))
                    processes.extend(state.processes)
            load: dict[str, float] = {u: 0.0 for u in gpus_by_uuid}
            held: dict[str, float] = {u: 0.0 for u in gpus_by_uuid}
            borrowed: dict[str, bool] = {u: False for u in gpus_by_uuid}
            for process in processes:
                percent = _percent(process, now)
                load[process.uuid] = load.get(process.uuid, 0.0) + percent
                held[process.uuid] = held.get(process.uuid, 0.0) + percent / 100 * GPU_MEMORY
                job = uids.get(process.pod_uid)
                if job is not None and job in jobs:
                    borrowed[process.uuid] = True
                    jobs[job] += percent / 100 * dt
                elif process.pod_uid in owners:
                    gpu = gpus_by_uuid[process.uuid]
                    if gpu.owner_curve is None and process.curve:
                        gpu.owner_uid = process.pod_uid
                        gpu.owner_curve = LoadCurve.from_wire(process.curve)
            figures.seconds += dt
            figures.sm_area += sum(min(100.0, v) for v in load.values()) * dt
            for memory in held.values():
                figures.min_headroom = min(figures.min_headroom, GPU_MEMORY - memory)
            for gpu in gpus_by_uuid.values():
                curve = gpu.owner_curve
                if curve is None:
                    continue
                busy = curve.percent_at(now, 0) >= THRESHOLD
                if borrowed[gpu.uuid] and busy and gpu.crossed_at is None:
                    gpu.crossed_at = _crossing(curve, now - dt, now)
                elif not borrowed[gpu.uuid] and gpu.crossed_at is not None:
                    figures.interference.append(now - gpu.crossed_at)
                    gpu.crossed_at = None
                elif not busy:
                    gpu.crossed_at = None
            for name, computed in list(jobs.items()):
                if computed >= args.work:
                    figures.jobs_done += 1
                    figures.done_gpu_s += computed
                    del jobs[name]
                    await asyncio.to_thread(
                        core.delete_namespaced_pod, name, "default", grace_period_seconds=0
                    )
            if now - last_check >= args.check:
                last_check = now
                listed_objects: Any = {
                    plural: (
                        await asyncio.to_thread(
                            custom.list_cluster_custom_object, GROUP, VERSION, plural
                        )
                    )["items"]
                    for plural in ("resourceslices", "deviceclasses", "resourceclaims")
                }
                # Each allocation is judged against the slices as they are when it is first
                # seen: a taint the plugin adds later (a take-back) does not make it wrong.
                fresh = {
                    f"{c['metadata']['namespace']}/{c['metadata']['name']}"
                    for c in listed_objects["resourceclaims"]
                    if (c.get("status") or {}).get("allocation")
                    and c["metadata"]["uid"] not in checked
                }
                checked.update(
                    c["metadata"]["uid"]
                    for c in listed_objects["resourceclaims"]
                    if (c.get("status") or {}).get("allocation")
                )
                figures.checks += len(fresh)
                found = check_allocations(
                    listed_objects["resourceslices"],
                    listed_objects["deviceclasses"],
                    listed_objects["resourceclaims"],
                )
                # A taint counts only if it was there at the previous look too, before the
                # allocation appeared: one the plugin adds after it does not make it wrong.
                before = {
                    (v.claim, v.message)
                    for v in check_allocations(
                        previous_slices,
                        listed_objects["deviceclasses"],
                        listed_objects["resourceclaims"],
                    )
                    if v.rule == "taint"
                }
                previous_slices = listed_objects["resourceslices"]
                for violation in found:
                    if violation.claim is not None and violation.claim not in fresh:
                        continue
                    if (
                        violation.rule == "taint"
                        and (violation.claim, violation.message) not in before
                    ):
                        continue
                    figures.violations += 1
                    figures.violation_texts.append(
                        f"{violation.claim}: {violation.rule}: {violation.message}"
                    )
            if verbose:
                elapsed = now - started
                print(
                    f"\rlending {'on ' if lending else 'off'} {elapsed:5.0f}/"
                    f"{end - started:.0f} s, jobs done {figures.jobs_done}, "
                    f"taken back {figures.jobs_taken_back}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            await asyncio.sleep(args.poll)
        if verbose:
            print(file=sys.stderr)
        figures.take_backs = await asyncio.to_thread(_take_backs, cluster)
    return figures.row()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--day", type=float, default=120.0, help="seconds of a compressed day")
    parser.add_argument("--days", type=float, default=1.0, help="days measured per mode")
    parser.add_argument("--lend-after", type=float, default=2.0, help="the plugins' --lend-after")
    parser.add_argument("--work", type=float, default=20.0, help="GPU-seconds a batch job needs")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between looks")
    parser.add_argument("--check", type=float, default=0.5, help="seconds between checker runs")
    parser.add_argument("--control-plane", choices=("embedded", "upstream"), default=None)
    args = parser.parse_args()
    configure_logging(level="warning")
    rows = []
    for lending in (False, True):
        with tempfile.TemporaryDirectory(prefix="bench-overcommit-") as workdir:
            rows.append(asyncio.run(run_mode(lending, args, Path(workdir))))
        print(json.dumps(rows[-1]), flush=True)
    off, on = rows
    ratio = on["fleet_sm_percent"] / off["fleet_sm_percent"] if off["fleet_sm_percent"] else None
    print(
        json.dumps(
            {
                "fleet_sm_ratio_on_over_off": None if ratio is None else round(ratio, 2),
                "day_s": args.day,
                "days": args.days,
                "lend_after_s": args.lend_after,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
