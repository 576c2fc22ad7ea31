"""The shared pod placer over the controller's view: where `simulate --mode scored` would put
the pod, given the same objects and the same workload.

The choice of node and devices for a pod is `dra_driver.simulation.replay.Cluster.place_pod`,
the code `simulate`, `explain --pod` and the trace benchmark run. This module only keeps its
inputs in step with the view between decisions:

- device usage is the view's own `Usage` object (assumed and observed allocations, holds), and
  allocations are recorded through the view's own placer, so nothing is copied and its per-node
  counts stay right; the nodes whose usage changed are read from the usage's change log;
- what the pods on each node request is the view's `NodeLoad`: the nodes whose totals changed
  are copied into the placer's ledger before each decision (`NodeLoad.changed`);
- the workload is `WorkloadSource`'s, made again with every new snapshot.

The controller still chooses which nodes a pod may use (selectors, affinity, taints, room for
its CPU and memory, a node its claims already pin it to): the placer ranks only those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controller.node_load import NodeLoad
from dra_driver.allocator import Placer
from dra_driver.simulation.replay import Cluster, PodPlacement, PodPolicy
from dra_driver.simulation.workload import Workload


class PodPlacer:
    def __init__(
        self,
        placer: Placer,
        nodes: Iterable[Mapping[str, Any]],
        load: NodeLoad,
        workload: Workload,
    ) -> None:
        usage = placer.usage
        self.cluster = Cluster(
            placer.snapshot,
            list(nodes),
            PodPolicy.SCORED,
            usage=usage,
            workload=workload,
            placer=placer,
        )
        self.workload = workload
        self._load = load
        self._known = set(self.cluster.nodes)
        load.changed.clear()
        for node in self.cluster.nodes:
            self.cluster.set_used(node, load.on(node))
        self._log = (usage.changes_epoch, len(usage.changes))

    def place(
        self,
        pod: Mapping[str, Any],
        claims: Sequence[Mapping[str, Any]],
        nodes: Iterable[str],
        *,
        retry: bool,
    ) -> PodPlacement:
        """The pod's node and its claims' allocations among `nodes` (recorded in the usage, as
        the allocator's placer records them); `retry`: the pod was counted in the workload
        before. Raises InputError / AllocationError as the allocator does."""
        self._sync()
        return self.cluster.place_pod(pod, claims, retry=retry, among=nodes, take=False)

    def warm(self) -> None:
        """Work out every node's device state (and which of its devices share counters) now
        rather than in the first decisions."""
        self._sync()
        self.cluster.table.build()
        index = self.cluster.index
        for node in self.cluster.nodes:
            index.conflicts(index.rooms.node(node))

    def _sync(self) -> None:
        """Bring the nodes that changed since the last decision up to date."""
        usage = self.cluster.usage
        epoch, seen = self._log
        changed: Iterable[str]
        if epoch != usage.changes_epoch or "*" in usage.changes[seen:]:
            changed = self._known
            self._load.changed.clear()
        else:
            changed = self._load.changed | set(usage.changes[seen:])
            self._load.changed = set()
        self._log = (usage.changes_epoch, len(usage.changes))
        for node in changed:
            if node in self._known:
                self.cluster.set_used(node, self._load.on(node))
