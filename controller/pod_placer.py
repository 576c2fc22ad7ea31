"""The shared pod placer over the controller's view: where `simulate --mode scored` would put
the pod, given the same objects and the same workload.

The choice of node and devices for a pod is `dra_driver.simulation.replay.Cluster.place_pod`,
the code `simulate`, `explain --pod` and the trace benchmark run. This module only keeps its
inputs in step with the view between decisions:

- device usage is the view's own `Usage` object (assumed and observed allocations, holds), and
  allocations are recorded through the view's own placer, so nothing is copied and its per-node
  counts stay right; the placer reads which nodes' usage changed from the usage's change log
  (`NodeTable.catch_up`), as the replay does;
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
        self.cluster = Cluster(
            placer.snapshot,
            list(nodes),
            PodPolicy.SCORED,
            usage=placer.usage,
            workload=workload,
            placer=placer,
        )
        self.workload = workload
        self._load = load
        self._known = set(self.cluster.nodes)
        load.changed.clear()
        for node in self.cluster.nodes:
            self.cluster.set_used(node, load.on(node))

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
        """Copy the pods' requests of the nodes whose totals changed since the last decision
        (device usage the placer reads from the usage's change log itself)."""
        changed, self._load.changed = self._load.changed, set()
        for node in changed & self._known:
            self.cluster.set_used(node, self._load.on(node))
