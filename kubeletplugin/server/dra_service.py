"""The DRA node service, v1 and v1beta1, on top of a :class:`NodeDriver`.

Kubelet's rules shape this module: an RPC-level error discards the whole batch, a claim missing
from a prepare response is silently asked for again, and every unprepared claim needs an entry.
So driver failures are always reported per claim, with the claim named, and never as an RPC
error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
import structlog

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1, wire
from dra_driver.kubeletapi.types import ClaimRef, PrepareOutcome
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.server.contract import NodeDriver

log = structlog.get_logger(__name__)

VERSIONS = (DRA_V1, DRA_V1BETA1)


def _split_claims(
    claims: Sequence[ClaimRef],
) -> tuple[list[ClaimRef], dict[str, str]]:
    """Claims worth passing to the driver (unique, with a UID), and errors for the rest."""
    valid: list[ClaimRef] = []
    seen: set[str] = set()
    errors: dict[str, str] = {}
    for claim in claims:
        if not claim.uid:
            errors[""] = f"claim {claim.namespace}/{claim.name} has no uid in the request"
        elif claim.uid not in seen:
            seen.add(claim.uid)
            valid.append(claim)
    return valid, errors


class DraService:
    """Translates kubelet's calls for :class:`NodeDriver` and enforces the response rules."""

    def __init__(self, driver: NodeDriver, metrics: PluginMetrics) -> None:
        self._driver = driver
        self._metrics = metrics

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareOutcome]:
        valid, invalid = _split_claims(claims)
        result = {uid: PrepareOutcome(error=error) for uid, error in invalid.items()}
        if valid:
            try:
                answer: Mapping[str, PrepareOutcome] = await self._driver.prepare(valid)
            except Exception as exc:
                log.exception("prepare failed", claims=[c.describe() for c in valid])
                answer = {
                    c.uid: PrepareOutcome(error=f"preparing claim {c.describe()} failed: {exc}")
                    for c in valid
                }
            for claim in valid:
                outcome = answer.get(claim.uid)
                if outcome is None:
                    log.error("driver gave no prepare result", claim=claim.describe())
                    outcome = PrepareOutcome(
                        error=f"no prepare result for claim {claim.describe()}; will retry"
                    )
                result[claim.uid] = outcome
            extra = set(answer) - set(result)
            if extra:
                log.warning("driver returned results for claims not asked for", uids=sorted(extra))
        for outcome in result.values():
            self._metrics.record_prepare(outcome.error)
        return result

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        valid, result = _split_claims(claims)
        if valid:
            try:
                answer: Mapping[str, str] = await self._driver.unprepare(valid)
            except Exception as exc:
                log.exception("unprepare failed", claims=[c.describe() for c in valid])
                answer = {c.uid: f"unpreparing claim {c.describe()} failed: {exc}" for c in valid}
            for claim in valid:
                error = answer.get(claim.uid)
                if error is None:
                    log.error("driver gave no unprepare result", claim=claim.describe())
                    error = f"no unprepare result for claim {claim.describe()}; will retry"
                result[claim.uid] = error
        for error in result.values():
            self._metrics.record_unprepare(error)
        return result

    def handlers(self) -> list[Any]:
        """Generic handlers for both versions, to be served on the one DRA socket."""
        return [self._handler(version) for version in VERSIONS]

    def _handler(self, version: str) -> Any:
        module = wire.dra_module(version)

        async def node_prepare(request: Any, context: Any) -> wire.DraPrepareResponse:
            with self._timed("NodePrepareResources", version):
                outcomes = await self.prepare(wire.claim_refs(request.claims))
                return wire.prepare_response(version, outcomes)

        async def node_unprepare(request: Any, context: Any) -> wire.DraUnprepareResponse:
            with self._timed("NodeUnprepareResources", version):
                errors = await self.unprepare(wire.claim_refs(request.claims))
                return wire.unprepare_response(version, errors)

        return grpc.method_handlers_generic_handler(
            wire.dra_service_name(version),
            {
                "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                    node_prepare,
                    request_deserializer=module.NodePrepareResourcesRequest.FromString,
                    response_serializer=module.NodePrepareResourcesResponse.SerializeToString,
                ),
                "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                    node_unprepare,
                    request_deserializer=module.NodeUnprepareResourcesRequest.FromString,
                    response_serializer=module.NodeUnprepareResourcesResponse.SerializeToString,
                ),
            },
        )

    def _timed(self, method: str, version: str) -> _Timer:
        return _Timer(lambda seconds: self._metrics.observe_request(method, version, seconds))


class _Timer:
    """Context manager reporting elapsed seconds, also when the body raises."""

    def __init__(self, report: Callable[[float], None]) -> None:
        self._report = report
        self._start = 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._report(time.perf_counter() - self._start)


__all__ = ["VERSIONS", "DraService"]
