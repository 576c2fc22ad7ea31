"""GPU queues: guaranteed shares, limits, borrowing, fair order and reclaim.

Pure logic over numbers, shared by the controller (which admits gated pods in this order and
evicts for reclaim) and `dra-driver simulate` (which replays a workload with the same rules).
"""

from dra_driver.queues.amounts import allocation_amounts, capacity, device_amounts
from dra_driver.queues.fairness import Ledger
from dra_driver.queues.reclaim import Running, Unit, borrowed_units, choose_victims
from dra_driver.queues.spec import (
    GROUP,
    KIND,
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
    "allocation_amounts",
    "borrowed_units",
    "capacity",
    "choose_victims",
    "device_amounts",
    "parse_queue",
]
