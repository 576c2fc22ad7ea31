"""GPU queues: guaranteed shares, limits, borrowing, fair order and reclaim.

Pure logic over numbers, shared by the controller (which admits gated pods in this order and
evicts for reclaim) and `dra-driver simulate` (which replays a workload with the same rules).

What allocations amount to (`dra_driver.queues.amounts`) is imported from its module, not from
here: it reads the allocator's types, and the kubelet plugin, which reads GpuQueues only to learn
which of them refuse to lend, never loads the allocator.
"""

from dra_driver.queues.fairness import Ledger
from dra_driver.queues.reclaim import Running, Unit, borrowed_units, choose_victims
from dra_driver.queues.spec import (
    GROUP,
    KIND,
    LENDING_ALLOWED,
    LENDING_NEVER,
    PLURAL,
    RECLAIM_BORROWED,
    RECLAIM_NEVER,
    VERSION,
    ZERO,
    Amounts,
    Bounds,
    QueueSpec,
    QueueSpecError,
    parse_queue,
)
from dra_driver.queues.tree import DEFAULT_QUEUE, QueueTree

__all__ = [
    "DEFAULT_QUEUE",
    "GROUP",
    "KIND",
    "LENDING_ALLOWED",
    "LENDING_NEVER",
    "PLURAL",
    "RECLAIM_BORROWED",
    "RECLAIM_NEVER",
    "VERSION",
    "ZERO",
    "Amounts",
    "Bounds",
    "Ledger",
    "QueueSpec",
    "QueueSpecError",
    "QueueTree",
    "Running",
    "Unit",
    "borrowed_units",
    "choose_victims",
    "parse_queue",
]
