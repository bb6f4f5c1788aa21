"""The agent's metrics, served in the Prometheus text format (`/metrics`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from replica_store.registry import RegistryEntry

__all__ = ["CONTENT_TYPE_LATEST", "AgentMetrics"]


class AgentMetrics:
    """One registry per agent, so tests and several agents in one process do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.deltas_applied = Counter(
            "podd_deltas_applied", "Deltas applied to the replica", ["datamart"], registry=r
        )
        self.rows = Counter(
            "podd_rows",
            "Rows of applied deltas (received before de-duplication, upserted, deleted)",
            ["datamart", "kind"],
            registry=r,
        )
        self.chunks = Counter(
            "podd_chunks", "delta.in chunks staged (first arrivals)", ["datamart"], registry=r
        )
        self.staging_writes = Counter(
            "podd_staging_writes",
            "Group writes of chunk files to staging (podd_chunks_total / this: chunks per write)",
            registry=r,
        )
        self.duplicates = Counter(
            "podd_chunk_duplicates", "delta.in chunks that arrived again", ["datamart"], registry=r
        )
        self.dropped = Counter(
            "podd_chunks_dropped",
            "Messages dropped unanswered, by reason (finished, sealed, oversize, evicted, "
            "replay; rate: delta.rq beyond its rate)",
            ["reason"],
            registry=r,
        )
        self.poison = Counter(
            "podd_poison_messages",
            "Messages skipped after an unexpected error while handling them",
            ["topic"],
            registry=r,
        )
        self.unsigned = Counter(
            "podd_unsigned_messages",
            "Messages dropped unread: no signature, or not the origins' key's",
            ["topic"],
            registry=r,
        )
        self.poison_batches = Counter(
            "podd_poison_batches",
            "Kafka record batches skipped whole: corrupt, a bomb, or in a codec not read",
            ["topic"],
            registry=r,
        )
        self.quarantined = Counter(
            "podd_quarantined", "Unreadable staged files moved to quarantine at start", registry=r
        )
        self.undecodable = Counter(
            "podd_undecodable_messages",
            "Messages whose key or value cannot be decoded",
            ["topic"],
            registry=r,
        )
        self.rejections = Counter(
            "podd_rejections", "Transfers answered ERROR", ["datamart", "code"], registry=r
        )
        self.load_seconds = Histogram(
            "podd_load_seconds",
            "Seconds from a complete transfer to its commit",
            ["datamart"],
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.current_delta = Gauge(
            "podd_current_delta", "The last applied delta number", ["datamart"], registry=r
        )
        self.open_transfers = Gauge("podd_open_transfers", "Transfers receiving chunks", registry=r)
        self.signed = Counter(
            "podd_signed_messages",
            "Messages read whose signature checked, by key (current, or previous: rotating)",
            ["key"],
            registry=r,
        )
        self.signing = Gauge(
            "podd_origin_signing_enabled",
            "1 when messages are signed and checked with PODD_ORIGIN_KEY, 0 when anyone may write",
            registry=r,
        )
        self.fetch_wait = Gauge(
            "podd_fetch_wait_ms",
            "How long the agent's fetches may wait: short while messages flow, long once quiet",
            registry=r,
        )

        self.answers = Counter(
            "podd_answers",
            "delta.in.rs answers sent, by datamart (empty: one not served) and answer "
            "(OK, or the error code)",
            ["datamart", "answer"],
            registry=r,
        )
        self.delta_requests = Counter(
            "podd_delta_requests",
            "delta.rq answered, by datamart served",
            ["datamart"],
            registry=r,
        )
        self.receiving = Gauge(
            "podd_delta_receiving",
            "The newest delta whose transfer began (its first chunk staged) or that was "
            "applied; minus podd_current_delta: the deltas the origin sent and the replica "
            "has not applied yet",
            ["datamart"],
            registry=r,
        )
        self.last_applied_time = Gauge(
            "podd_last_applied_timestamp_seconds",
            "When the last delta was applied (Unix time); the agent's start if none since",
            ["datamart"],
            registry=r,
        )
        self.staged_bytes = Gauge(
            "podd_staged_bytes", "Chunk bodies staged for open transfers, in bytes", registry=r
        )
        self.staged_budget = Gauge(
            "podd_staged_budget_bytes",
            "The most chunk bytes staged at once (the setting)",
            registry=r,
        )
        self.disk_paused = Gauge(
            "podd_disk_paused", "1 while the agent waits for its disk to take writes", registry=r
        )
        #: Per datamart, the newest delta begun or applied (what `receiving` shows).
        self._newest: dict[str, int] = {}

    def serving(self, datamart: str, last_applied: int | None) -> None:
        """A datamart served from the agent's start: its series exist from the first scrape."""
        last = -1 if last_applied is None else last_applied
        self.current_delta.labels(datamart).set(last)
        self.last_applied_time.labels(datamart).set(time.time())
        self.began(datamart, last)

    def began(self, datamart: str, delta_num: int) -> None:
        """A delta's transfer began (or it was applied)."""
        newest = max(self._newest.get(datamart, delta_num), delta_num)
        self._newest[datamart] = newest
        self.receiving.labels(datamart).set(newest)

    def watch_staging(
        self, staged_bytes: Callable[[], float], budget: int, paused: Callable[[], bool]
    ) -> None:
        """The staging gauges, read at each scrape."""
        self.staged_bytes.set_function(staged_bytes)
        self.staged_budget.set(budget)
        self.disk_paused.set_function(lambda: float(paused()))

    def count_applied(self, datamart: str, entry: RegistryEntry, seconds: float) -> None:
        self.deltas_applied.labels(datamart).inc()
        self.load_seconds.labels(datamart).observe(seconds)
        self.current_delta.labels(datamart).set(entry.delta_num)
        self.last_applied_time.labels(datamart).set(time.time())
        self.began(datamart, entry.delta_num)
        for kind in ("received", "upserted", "deleted"):
            self.rows.labels(datamart, kind).inc(
                sum(getattr(c, f"rows_{kind}") for c in entry.tables)
            )

    def render(self) -> bytes:
        return generate_latest(self.registry)
