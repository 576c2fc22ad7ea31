"""Start-up repair: make the node agree with the checkpoint before serving kubelet.

The checkpoint is the plugin's memory of side effects; after a crash the GPUs, the CDI directory
and the API server may each disagree with it. Recovery converges all three, in the order that
never loses track of a side effect: roll back claims that were being prepared (their instances
may exist whether or not they were recorded), drop completed claims that changed no GPU and whose
CDI spec is gone (unprepare deletes the spec first and writes their removal lazily), unprepare
claims whose ResourceClaim is gone or was replaced, delete CDI specs that no claim owns, apply
each GPU's time-slice setting again, and make the MPS control daemons match the claims that need
them (adopting a daemon that outlived the plugin rather than starting a second one).
An API server that cannot be reached is not a reason to unprepare anything: such claims stay, and
kubelet's own unprepare cleans them up later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
import urllib3
from kubernetes import client

from dra_driver.checkpoint import CheckpointStore, ClaimState
from kubeletplugin.prepare.claims import ClaimSource
from kubeletplugin.prepare.preparer import Preparer, record_minors, spec_only_record_is_stale

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class RecoveryReport:
    rolled_back: list[str] = field(default_factory=list)
    unprepared: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    orphan_specs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


async def recover(
    preparer: Preparer,
    store: CheckpointStore,
    claims: ClaimSource,
    boot_id: str,
    *,
    warn: Callable[[str], None] | None = None,
) -> RecoveryReport:
    report = RecoveryReport()
    loaded = await asyncio.to_thread(store.load, boot_id)
    if loaded.problem:
        report.problems.append(loaded.problem)
        log.warning("checkpoint reset", problem=loaded.problem)
        if warn is not None:
            warn(loaded.problem)
    preparer.adopt(loaded.checkpoint)
    minors = record_minors(loaded.checkpoint.claims)
    try:
        await preparer.mps.stop_unclaimed(referenced_only=True)
    except Exception as err:
        log.warning("cannot stop MPS control daemons that no claim needs", error=str(err))
    spec_uids = set(await asyncio.to_thread(preparer.cdi_specs))
    for uid, record in list(loaded.checkpoint.claims.items()):
        label = f"{record.namespace}/{record.name}"
        if spec_only_record_is_stale(record, spec_uids):
            await preparer.undo(record)
            report.unprepared.append(uid)
            log.info("dropped a claim whose CDI spec is gone", claim=label, uid=uid)
            continue
        if record.state is ClaimState.PREPARE_STARTED:
            try:
                await preparer.undo(record)
            except Exception as err:  # kept as started: kubelet's retry rolls it back again
                log.warning("cannot roll back a half-prepared claim", claim=label, error=str(err))
                report.kept.append(uid)
                continue
            report.rolled_back.append(uid)
            log.info("rolled back a claim left half-prepared", claim=label, uid=uid)
            continue
        try:
            current = await asyncio.to_thread(claims.get, record.namespace, record.name)
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            log.warning("cannot check whether a claim still exists", claim=label, error=str(err))
            report.kept.append(uid)
            continue
        current_uid = ((current or {}).get("metadata") or {}).get("uid")
        if current_uid != uid:
            try:
                await preparer.undo(record)
            except Exception as err:  # kubelet retries its unprepare; never a crash loop
                log.warning("cannot unprepare a claim that is gone", claim=label, error=str(err))
                report.kept.append(uid)
                continue
            report.unprepared.append(uid)
            log.info("unprepared a claim that no longer exists", claim=label, uid=uid)
        else:
            report.kept.append(uid)
    known = set(preparer.checkpoint.claims)
    specs = await asyncio.to_thread(preparer.cdi_specs)
    for uid, path in specs.items():
        if uid not in known:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            report.orphan_specs.append(uid)
    try:
        await preparer.reapply_timeslices(minors)
    except Exception as err:
        log.warning("cannot apply time-slice settings again", error=str(err))
    try:
        # Stop what the claims unprepared above left, then adopt or start what the rest need:
        # a daemon that survived the restart keeps its clients.
        await preparer.mps.stop_unclaimed(referenced_only=False)
        await preparer.mps.ensure()
    except Exception as err:  # the periodic check tries again; serving kubelet must not wait
        log.warning("cannot bring MPS control daemons in line with the claims", error=str(err))
    await preparer.flush()
    return report
