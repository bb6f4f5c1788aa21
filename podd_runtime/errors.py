"""Errors of the runtime helpers (the root is `protocol.errors.PoddError`)."""

from __future__ import annotations

from protocol.errors import PoddError


class AgentChildError(PoddError):
    """A `replica-agent` child process exited early or did not come up in time."""


class SparkClusterError(PoddError):
    """A standalone Spark master or worker did not start."""


class DirectoryInUseError(PoddError):
    """Another process holds the lock on a directory this process must own alone."""
