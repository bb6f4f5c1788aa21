"""Logging for the commands whose stdout is their output: log lines go to stderr."""

from __future__ import annotations

import sys
from typing import Any

import structlog


def _stderr_logger(*_: Any) -> structlog.PrintLogger:
    # Looked up per logger, not bound once: a caller may replace sys.stderr (tests do).
    return structlog.PrintLogger(sys.stderr)


def log_to_stderr() -> None:
    structlog.configure(logger_factory=_stderr_logger)
