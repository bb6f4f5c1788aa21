"""Errors of the Kafka plumbing (the root is `protocol.errors.PoddError`)."""

from __future__ import annotations

from protocol.errors import PoddError


class BrokerError(PoddError):
    """The broker cannot be started, or the connection settings cannot be used."""
