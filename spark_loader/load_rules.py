"""Rules every loader keeps, whatever its store: a delta of a datamart not served is
`UNKNOWN_DATAMART`, and a load failing for a transient reason is tried again with backoff,
then answered `LOAD_FAILED` (`LoaderSettings.load_attempts`, `retry_backoff_seconds`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

import structlog

from podd_runtime.backoff import Backoff, retry
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

    def failed(number: int, error: BaseException, _wait: float) -> None:
        bound.warning("load attempt failed", attempt=number, error=str(error))

    try:
        return retry(
            attempt,
            retry_on=TransientLoadError,
            attempts=settings.load_attempts,
            backoff=Backoff(settings.retry_backoff_seconds),
            on_retry=failed,
        )
    except TransientLoadError as exc:
        failed(settings.load_attempts, exc, 0)
        raise LoadFailedError(
            f"delta {delta_num}: the replica store refused the load after "
            f"{settings.load_attempts} attempts: {exc}"
        ) from exc
