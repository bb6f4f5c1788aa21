"""A load's result, and what a COMMIT whose connection broke turned out to be.

A COMMIT the server received lands even when the client is gone; one it never received did
not happen. `settle_lost_commit` tells them apart by the registry, read once the backend
that received the COMMIT has ended.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import psycopg
import structlog

from podd_runtime.backoff import Backoff, retry
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

    def read() -> LoadResult:
        stored = _registry_after(dsn, backend, manifest.datamart, manifest.delta_num)
        if stored is None:
            raise TransientLoadError(f"COMMIT failed and did not happen: {exc}") from exc
        # Ours only if it carries our requestId: another writer's row for this delta
        # means our COMMIT did not land (the delta is applied all the same).
        ours = stored.request_id == manifest.request_id
        return LoadResult.from_registry(stored, already_applied=not ours)

    def again(_number: int, error: BaseException, _wait: float) -> None:
        if isinstance(error, psycopg.OperationalError):
            log.warning("COMMIT state unknown: reading the registry again", error=str(error))

    try:
        return retry(
            read,
            retry_on=(psycopg.OperationalError, _PendingCommit),
            backoff=Backoff(0.1, cap=5.0),
            deadline_seconds=settle_seconds,
            on_retry=again,
        )
    except psycopg.OperationalError as unread:
        raise CommitStateUnknownError(
            f"delta {manifest.delta_num}: the connection broke during COMMIT "
            f"({exc}) and the registry could not be read for "
            f"{settle_seconds:g} s ({unread})"
        ) from unread
    except _PendingCommit:
        raise CommitStateUnknownError(
            f"delta {manifest.delta_num}: the backend that received the COMMIT is "
            f"still running after {settle_seconds:g} s"
        ) from exc


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
