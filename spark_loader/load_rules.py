"""Rules every loader keeps, whatever its store: a delta of a datamart not served is
`UNKNOWN_DATAMART`, and a load failing for a transient reason is tried again with backoff,
then answered `LOAD_FAILED` (`LoaderSettings.load_attempts`, `retry_backoff_seconds`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import structlog

from protocol.errors import ErrorCode, ProtocolError
from replica_store.errors import LoadFailedError, TransientLoadError
from replica_store.layout import Datamart
from replica_store.transfer import TransferManifest
from spark_loader.settings import LoaderSettings

T = TypeVar("T")


def served_datamart(datamarts: Mapping[str, Datamart], manifest: TransferManifest) -> Datamart:
    datamart = datamarts.get(manifest.datamart)
    if datamart is None:
        raise ProtocolError(
            f"datamart {manifest.datamart} is not served", code=ErrorCode.UNKNOWN_DATAMART
        )
    return datamart


def with_retries(
    attempt: Callable[[], T],
    settings: LoaderSettings,
    bound: structlog.typing.FilteringBoundLogger,
    delta_num: int,
) -> T:
    """`attempt()` until it returns; each `TransientLoadError` logged and retried after a
    doubling backoff, the last one raised as `LoadFailedError`."""
    last_error = ""
    for number in range(1, settings.load_attempts + 1):
        try:
            return attempt()
        except TransientLoadError as exc:
            last_error = str(exc)
            bound.warning("load attempt failed", attempt=number, error=last_error)
            if number < settings.load_attempts:
                time.sleep(settings.retry_backoff_seconds * 2 ** (number - 1))
    raise LoadFailedError(
        f"delta {delta_num}: the replica store refused the load after "
        f"{settings.load_attempts} attempts: {last_error}"
    )
