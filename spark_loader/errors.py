"""Errors of the Spark side of a load (the store's are in `replica_store.errors`)."""

from __future__ import annotations

from replica_store.errors import LoaderError


class ExecutorProbeError(LoaderError):
    """At start-up, the Spark executors could not read the staging directory or reach the
    replica (or no executor ran at all): every load would fail, so none is started."""
