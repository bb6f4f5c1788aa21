"""Errors of the restore (`PoddError` is the root)."""

from __future__ import annotations

from typing import ClassVar

from protocol.errors import PoddError
from protocol.exit_codes import ExitCode


class RestoreError(PoddError):
    """The restore cannot go on; the message says where (topic, partition, offset, delta)."""

    exit_code: ClassVar[ExitCode] = ExitCode.FAILED


class RestoreStopped(RestoreError):
    """The restore stopped at a delta it cannot apply (a gap, an incomplete increment)."""
