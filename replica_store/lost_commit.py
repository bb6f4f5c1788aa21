"""A load's result, and what a COMMIT whose connection broke turned out to be.

A COMMIT the server received lands even when the client is gone; one it never received did
not happen. `settle_lost_commit` tells them apart by the registry, read once the backend
that received the COMMIT has ended.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any

import psycopg
import structlog

from replica_store.errors import CommitStateUnknownError, TransientLoadError
from replica_store.registry import RegistryEntry, registry_entry
from replica_store.transfer import StagedTransfer

log = structlog.get_logger("spark_loader")


@dataclass(frozen=True)
class LoadResult(RegistryEntry):
    """The registry entry of the applied delta, and whether this load found it applied."""

    already_applied: bool = False

    @classmethod
    def from_registry(cls, entry: RegistryEntry, *, already_applied: bool) -> LoadResult:
        values = {f.name: getattr(entry, f.name) for f in fields(RegistryEntry)}
        return cls(**values, already_applied=already_applied)


def settle_lost_commit(
    dsn: str,
    settle_seconds: float,
    transfer: StagedTransfer,
    exc: Exception,
    backend: tuple[Any, ...] | None,
) -> LoadResult:
    """The connection broke during COMMIT: the registry says whether it happened.

    The registry is read only once the old backend has ended (a COMMIT the server
    received lands even when the client is gone), with backoff while the server cannot
    be reached, for at most `settle_seconds`: a late-landing commit is never
    taken for a failed one, so an applied delta is never answered LOAD_FAILED."""
    manifest = transfer.manifest
    deadline = time.monotonic() + settle_seconds
    delay = 0.1
    while True:
        try:
            stored = _registry_after(dsn, backend, manifest.datamart, manifest.delta_num)
            if stored is not None:
                # Ours only if it carries our requestId: another writer's row for this
                # delta means our COMMIT did not land (the delta is applied all the same).
                ours = stored.request_id == manifest.request_id
                return LoadResult.from_registry(stored, already_applied=not ours)
            raise TransientLoadError(f"COMMIT failed and did not happen: {exc}") from exc
        except psycopg.OperationalError as again:
            if time.monotonic() + delay > deadline:
                raise CommitStateUnknownError(
                    f"delta {manifest.delta_num}: the connection broke during COMMIT "
                    f"({exc}) and the registry could not be read for "
                    f"{settle_seconds:g} s ({again})"
                ) from again
            log.warning("COMMIT state unknown: reading the registry again", error=str(again))
        except _PendingCommit:
            if time.monotonic() + delay > deadline:
                raise CommitStateUnknownError(
                    f"delta {manifest.delta_num}: the backend that received the COMMIT is "
                    f"still running after {settle_seconds:g} s"
                ) from exc
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _registry_after(
    dsn: str, backend: tuple[Any, ...] | None, datamart: str, delta_num: int
) -> RegistryEntry | None:
    """The registry entry once `backend` has ended; `_PendingCommit` while it runs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if backend is not None:
            running = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND backend_start = %s",
                backend,
            ).fetchone()
            if running is not None:
                raise _PendingCommit
        return registry_entry(conn, datamart, delta_num)


class _PendingCommit(Exception):
    """The backend that received a COMMIT has not ended yet."""
