"""Which node wins when the scored placement finds several equally good: a fixed pseudo-random
order of the nodes.

FGD's scheduler gives equal points to the lowest node name, and its simulator prefixes every
name with a random number, so in the paper's runs ties fall in a random order fixed for the run.
Taken literally (the lowest name), the rule depends on how a cluster names its nodes; real
clusters often name them by pool or GPU model, and on the openb traces, whose nodes are listed
by model, name order cost 0.3 points of allocation on two traces of three. Filling the fuller
node (the rule before) packs pods that could go anywhere onto the nodes that model-pinned pods
need, and with every common shape weighed it collapsed on gpuspec20 (docs/performance/traces.md).

Ordering nodes by a hash of their names keeps FGD's random order without its dependence on
names, and stays the same across processes and restarts, so `simulate` and the controller
break ties alike. SHA-256 rather than Python's `hash`, which is salted per process.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable


class Ties(enum.Enum):
    """How scored placement breaks equal FGD points (docs/allocation.md)."""

    SPREAD = "spread"
    """A fixed pseudo-random order of the nodes (`spread_order`): the default."""
    FULLER = "fuller"
    """The least free device room after the pod, then node name order (the rule before)."""
    NAME = "name"
    """Node name order alone: FGD's own rule, random only when the names are."""


def spread_order(nodes: Iterable[str]) -> list[str]:
    """The nodes in the order equal points are broken by: by the SHA-256 of the name (then the
    name, should two digests ever collide)."""
    return sorted(nodes, key=lambda n: (hashlib.sha256(n.encode()).digest(), n))
