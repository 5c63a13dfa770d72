"""structlog set-up: JSON lines in a cluster (for log pipelines), readable console locally."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure"]


def configure(fmt: str = "auto", level: str = "info") -> None:
    """``fmt``: "json", "console", or "auto" (console on a terminal, JSON otherwise)."""
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
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
    # Libraries (aiohttp, asyncio) log through stdlib logging: keep them quiet.
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
