"""Errors of the replica store and of loading into it (`PoddError` is the root)."""

from __future__ import annotations

from protocol.errors import ErrorCode, PoddError, ProtocolError


class LoaderError(PoddError):
    """Something the loader could not do."""


class LoadFailedError(ProtocolError):
    """The replica store refused the load after retries; the replica is unchanged."""

    code = ErrorCode.LOAD_FAILED


class CommitStateUnknownError(LoaderError):
    """The connection broke during COMMIT and the registry could not be read afterwards.

    Whether the delta was applied is unknown until the registry can be read again; nothing
    may be answered before that.
    """


class StoreMismatchError(LoaderError):
    """Existing replica tables disagree with the logical schema."""


class UnsupportedSchemaError(LoaderError):
    """The store cannot hold this logical schema as it is (a name the ADQM store refuses)."""


class StagedTransferError(LoaderError):
    """A staged transfer on disk is incomplete or malformed."""


class EmbeddedPostgresError(LoaderError):
    """The embedded PostgreSQL server could not be started or stopped."""


class TransientLoadError(LoaderError):
    """A failure worth another attempt of the load (a lost connection, a failed Spark job);
    the loader retries, then answers `LoadFailedError`."""


class DatamartInUseError(LoaderError):
    """Another process (an agent, a loader, a restore) already writes this datamart."""


class OwnershipLostError(LoaderError):
    """This process's hold on a datamart was lost (its database session ended) and another
    process holds it now: this one must stop writing."""
