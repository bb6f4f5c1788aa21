"""Errors of the origin side (the root is `protocol.errors.PoddError`)."""

from __future__ import annotations

from typing import ClassVar

from protocol.errors import PoddError
from protocol.exit_codes import ExitCode


class OriginError(PoddError):
    """The origin cannot go on: bad settings, an unreadable source, a broker that is gone."""


class ReplicaRefused(OriginError):
    """The replica answered an error the origin cannot fix by resending."""

    exit_code: ClassVar[ExitCode] = ExitCode.FAILED

    def __init__(self, delta_num: int, code: str, message: str) -> None:
        super().__init__(f"delta {delta_num}: the replica answered {code}: {message}")
        self.delta_num = delta_num
        self.code = code


class NoAnswer(OriginError):
    """The replica did not answer within the timeout."""
