"""Which namespaces' GpuQueues refuse to lend their pods' GPUs, read through the API now and then.

A GpuQueue with `spec.lending: Never` keeps the GPUs of its pods closed to borrowers, as an
owner's `lending: Never` keeps its claim's: those of its namespaces, and of every queue below it
(an organisation that refuses speaks for its teams, as its limit binds them). Namespaces map to
queues as the controller maps them (`QueueTree`), so a queue the controller refuses refuses
nothing here either: its namespaces fall to the default queue, which lends.

The lender decides at every telemetry sample, but queues change rarely and every node would list
them, so they are listed at most every `REREAD_S`, and only while the node holds an owner claim
(a node with nothing to lend from asks for nothing). One thing reads them sooner: an owner claim
prepared since the last list started. Without that, a queue written just before its pod came
would be unknown for up to `REREAD_S`, and the GPU could be lent before the refusal arrived; so
such a claim counts as refusing until a list that knew of it is back. Lending on a guess is what
a refusal forbids; waiting one list is cheap.

The list runs in a thread, in the background: a slow API server never holds up a sample, and so
never a take-back. A list that fails, the CRD missing (404) included, changes nothing: the last
answer stays (none at first), so a refusal survives an API server's restart, and the failure is
logged once until a list works again. The claims it waited for count by that last answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final

import structlog
from kubernetes import client

from api.device_type import DeviceType
from dra_driver.checkpoint.model import ClaimRecord
from dra_driver.queues.spec import GROUP, LENDING_NEVER, PLURAL, VERSION
from dra_driver.queues.tree import QueueTree

log = structlog.get_logger(__name__)

REREAD_S: Final = 30.0
"""How often a node that holds owner claims lists the GpuQueues again."""
LIST_TIMEOUT_S: Final = 10.0
"""A list that hangs would keep every later one from starting, and new owners closed."""

ListQueues = Callable[[], Iterable[Mapping[str, Any]]]


def refusing_namespaces(objects: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The namespaces whose pods' GPUs may not be lent: those of every valid queue that says
    `lending: Never` or lies below one that does, each namespace going to the queue the
    controller gives it (the older of two queues naming it; the default queue when the queue
    naming it is invalid)."""
    tree = QueueTree.build(objects)
    found: set[str] = set()
    for name, spec in tree.queues.items():
        if any(tree.queues[queue].lending == LENDING_NEVER for queue in tree.path(name)):
            found.update(n for n in spec.namespaces if tree.queue_for(n) == name)
    return frozenset(found)


def owners(claims: Mapping[str, ClaimRecord]) -> frozenset[str]:
    """UIDs of the claims that hold a GPU of their own (a whole GPU or a share of one), as the
    lender counts owners; a borrower's claim refuses nothing, so it never calls for a list."""
    return frozenset(
        uid
        for uid, record in claims.items()
        if any(
            d.minor is not None and d.device_type is not DeviceType.OPPORTUNISTIC
            for d in record.devices
        )
    )


class ApiQueues:
    """Lists the GpuQueues (cluster-scoped) through the API: `list` on gpuqueues, which the
    chart's kubelet-plugin ClusterRole grants for this alone."""

    def __init__(self, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)

    def __call__(self) -> list[Mapping[str, Any]]:
        listed: Any = self._objects.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=LIST_TIMEOUT_S
        )
        return list(listed.get("items") or [])


class QueueLending:
    """The namespaces whose queue refuses to lend, as last listed, and the lists themselves."""

    def __init__(
        self,
        list_queues: ListQueues,
        *,
        every_s: float = REREAD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list = list_queues
        self._every_s = every_s
        self._clock = clock
        self.namespaces: frozenset[str] = frozenset()
        """The last answer: none until a list works."""
        self._known: frozenset[str] = frozenset()
        """The owner claims there were when the last finished list started."""
        self._next_at: float | None = None
        self._failing = False
        self._task: asyncio.Task[None] | None = None

    def wanted(self, owned: Collection[str]) -> bool:
        """A list is due: the node holds owner claims, and the last list started `every_s`
        ago or more, or did not know of some of them."""
        if not owned:
            return False
        if self._next_at is None or self._clock() >= self._next_at:
            return True
        return not self._known.issuperset(owned)

    def refresh(self, claims: Mapping[str, ClaimRecord]) -> None:
        """Start a list in the background when one is wanted and none is under way."""
        owned = owners(claims)
        if (self._task is None or self._task.done()) and self.wanted(owned):
            self._task = asyncio.create_task(self.read(owned), name="list-gpuqueues")

    async def read(self, owned: Collection[str]) -> None:
        """One list, in a thread; `owned` are the owner claims it answers for."""
        self._next_at = self._clock() + self._every_s
        try:
            answer = await asyncio.to_thread(self._answer)
        except Exception as err:
            self._failed(err)
        else:
            if self._failing:
                log.info("GpuQueues listed again", refusing=sorted(answer))
            self._failing = False
            self.namespaces = answer
        self._known = frozenset(owned)

    def _answer(self) -> frozenset[str]:
        return refusing_namespaces(self._list())

    def _failed(self, err: Exception) -> None:
        if self._failing:
            return
        self._failing = True
        missing = isinstance(err, client.ApiException) and err.status == 404
        log.warning(
            "listing GpuQueues failed: the queues that refuse to lend stay those of the last "
            "list that worked (none before one did); logged once until a list works again",
            error=(
                "the GpuQueue CRD is not installed (404)"
                if missing
                else f"{type(err).__name__}: {err}"
            ),
            refusing=sorted(self.namespaces),
        )

    def refusing(self, claims: Mapping[str, ClaimRecord]) -> frozenset[str]:
        """UIDs of the claims whose namespace's queue refuses to lend, and of the owner claims
        no finished list knew of yet."""
        queued = {uid for uid, record in claims.items() if record.namespace in self.namespaces}
        return frozenset(queued) | (owners(claims) - self._known)

    async def flush(self) -> None:
        """Wait for the list under way (tests, shutdown)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        await self.flush()


__all__ = ["REREAD_S", "ApiQueues", "QueueLending", "owners", "refusing_namespaces"]
