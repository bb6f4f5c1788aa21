"""Errors of the agent layer (the root is `protocol.errors.PoddError`)."""

from __future__ import annotations

from protocol.errors import PoddError


class AgentError(PoddError):
    """The agent cannot run as configured."""


class SpoolError(AgentError):
    """The staging directory holds something the agent cannot read back."""


class FatalAgentError(Exception):
    """The agent must stop; a restart recovers from staging and the registry."""
