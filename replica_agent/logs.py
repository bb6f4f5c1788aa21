"""Logging: structlog for our events, and the same rendering for Faust's and aiokafka's.

JSON lines when stderr is not a terminal, readable lines when it is (or as configured).
Every line goes to stderr through one stdlib handler, so the Faust worker, which configures
logging itself, is given this configuration (`logging_config`) instead of its own.
"""

from __future__ import annotations

import logging
import logging.config
import sys
from typing import Any, Literal

import structlog

LogFormat = Literal["auto", "json", "console"]

#: Libraries whose INFO lines are about their own machinery, not about deltas.
_QUIET = ("faust", "mode", "aiokafka", "kafka", "py4j", "aiohttp")

_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def _renderer(log_format: LogFormat) -> Any:
    if log_format == "auto":
        log_format = "console" if sys.stderr.isatty() else "json"
    if log_format == "console":
        return structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    return structlog.processors.JSONRenderer()


def logging_config(log_format: LogFormat = "auto", level: str = "INFO") -> dict[str, Any]:
    """A `logging.config.dictConfig` mapping: one stderr handler rendering via structlog."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "podd": {
                "()": structlog.stdlib.ProcessorFormatter,
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    _renderer(log_format),
                ],
                "foreign_pre_chain": _SHARED,
            }
        },
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "podd",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": ["default"]},
        "loggers": {name: {"level": "WARNING"} for name in _QUIET},
    }


def configure_logging(log_format: LogFormat = "auto", level: str = "INFO") -> dict[str, Any]:
    """Configure structlog and stdlib logging; returns the stdlib configuration used."""
    config = logging_config(log_format, level)
    logging.config.dictConfig(config)
    structlog.configure(
        processors=[
            *_SHARED,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    return config
