"""structlog configuration shared by both daemons.

JSON lines in production (log collectors parse them), a readable console format in a terminal.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "auto", level: str = "info") -> None:
    """Configure structlog once per process. `fmt` is json, console, or auto (tty → console)."""
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"--log-level: unknown level {level!r}; use debug, info, warning, error")
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    if fmt not in ("auto", "json", "console"):
        raise ValueError(f"--log-format: unknown format {fmt!r}; use json, console or auto")
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
