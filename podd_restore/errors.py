"""Errors of the restore (`PoddError` is the root)."""

from __future__ import annotations

from protocol.errors import PoddError


class RestoreError(PoddError):
    """The restore cannot go on; the message says where (topic, partition, offset, delta)."""


class RestoreStopped(RestoreError):
    """The restore stopped at a delta it cannot apply (a gap, an incomplete increment)."""
