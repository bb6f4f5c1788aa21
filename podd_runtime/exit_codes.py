"""One mapping from what stopped a command to its exit code and its one line on stderr.

Every command's `main` runs its work through `run_command`: the project's errors carry their
code (`PoddError.exit_code`, see `protocol.exit_codes`); the libraries' errors are mapped
here, the same way for every command. A message names what failed; a DSN's password or a
setting's value never reaches it (settings errors hide their input; psycopg's messages name
host and port only).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import psycopg
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from protocol.errors import PoddError
from protocol.exit_codes import ExitCode

__all__ = ["HANDLED", "ExitCode", "describe", "exit_code_for", "explain", "run_command"]

#: What a command stops on, besides the project's own errors.
HANDLED: tuple[type[BaseException], ...] = (
    PoddError,
    ValidationError,
    KafkaError,
    psycopg.Error,
    OSError,
    KeyboardInterrupt,
)


def exit_code_for(error: BaseException) -> ExitCode:
    if isinstance(error, PoddError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    return ExitCode.CANNOT_RUN


def explain(error: BaseException) -> tuple[str | None, str]:
    """What failed (None: the error says it all), and the error's own words."""
    if isinstance(error, ValidationError):
        return "invalid settings", str(error)
    if isinstance(error, KafkaError):
        return "the Kafka broker cannot be used", f"{type(error).__name__}: {error}"
    if isinstance(error, psycopg.Error):
        return "the replica database cannot be used", str(error).strip()
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", "processes stopped"
    if exit_code_for(error) in (ExitCode.FAILED, ExitCode.BAD_INPUT):
        return "stopped", str(error)
    return None, str(error)


def describe(error: BaseException) -> str:
    """The line a command prints for `error` (after its name)."""
    what, words = explain(error)
    return words if what is None else f"{what}: {words}"


def run_command(prog: str, work: Callable[[], int]) -> int:
    """`work()`'s exit code; if one of `HANDLED` stops it, its code, and one line on stderr."""
    try:
        return work()
    except HANDLED as error:
        print(f"{prog}: {describe(error)}", file=sys.stderr)
        return int(exit_code_for(error))
