"""Turning SIGTERM/SIGINT into an orderly shutdown.

Kubelet treats the registration socket's removal as deregistration, so the daemon must get the
chance to stop its servers and remove the sockets instead of dying on the default handler.
"""

from __future__ import annotations

import asyncio
import signal

import structlog

log = structlog.get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install_signal_handlers(loop: asyncio.AbstractEventLoop, stop_event: asyncio.Event) -> None:
    """Set ``stop_event`` on SIGTERM or SIGINT; the daemon awaits it and then shuts down."""

    def _on_signal(signum: signal.Signals) -> None:
        log.info("stop signal received", signal=signum.name)
        stop_event.set()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, _on_signal, signum)


def remove_signal_handlers(loop: asyncio.AbstractEventLoop) -> None:
    for signum in STOP_SIGNALS:
        loop.remove_signal_handler(signum)


__all__ = ["install_signal_handlers", "remove_signal_handlers"]
