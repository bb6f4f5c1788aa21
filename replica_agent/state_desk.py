"""Every `delta.rs` answer, in one place: a `delta.rq` read, bounded, and answered from what
the agent knows now (the tracker's open and applied deltas, the worker's failed loads, the
outbox's last errors), the registry read again first (at most once a second) so that a
database gone back in time is told. Nothing is recorded: a lost answer is asked again. At most
`answers_per_second` are answered per datamart; the rest are dropped and counted (`rate`), so
a flood of `delta.rq` costs a bounded number of answers. A request whose `sentAt` is more than
`max_request_age` from the agent's clock is a replay (a signature stays valid as long as
Kafka keeps the message): dropped and counted (`stale`), unanswered."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from podd_runtime.rate_limit import RateLimit, Throttle
from protocol.codec import decode_message
from protocol.errors import MessageDecodeError
from protocol.messages import DeltaRequest, DeltaState
from replica_agent.answers import replica_state
from replica_agent.load_worker import LoadWorker
from replica_agent.metrics import AgentMetrics
from replica_agent.outbox import Outbox
from replica_agent.tracker import TransferTracker

log = structlog.get_logger("replica_agent")


class StateDesk:
    def __init__(
        self,
        tracker: TransferTracker,
        worker: LoadWorker,
        outbox: Outbox,
        metrics: AgentMetrics,
        answers_per_second: float = 100.0,
        max_request_age: float = 300.0,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.tracker = tracker
        self.worker = worker
        self.outbox = outbox
        self.metrics = metrics
        self.answers_per_second = answers_per_second
        #: A `delta.rq` sent longer ago than this (or as far ahead) is a replay: dropped.
        self.max_request_age = max_request_age
        self._wall_clock = wall_clock
        #: Per datamart asked about (served ones only: others share one bucket).
        self._rates: dict[str, RateLimit] = {}
        self._warnings = Throttle()

    async def on_delta_rq(self, raw_value: bytes | None) -> DeltaState | None:
        """The answer to one `delta.rq` message (None: it is skipped, unanswered)."""
        try:
            request = decode_message(DeltaRequest, raw_value)
        except MessageDecodeError as exc:
            self.metrics.undecodable.labels("delta.rq").inc()
            if self._warnings.allow():  # counted always, logged at a bounded rate
                log.warning(
                    "delta.rq message skipped: it cannot be decoded",
                    error=str(exc)[:500],
                    not_logged_before=self._warnings.take_suppressed(),
                )
            return None
        most = self.tracker.limits.max_name_chars
        if max(len(request.request_id), len(request.datamart)) > most:
            self.metrics.dropped.labels("oversize").inc()
            if self._warnings.allow():
                log.warning(
                    "delta.rq message dropped: names too long",
                    not_logged_before=self._warnings.take_suppressed(),
                )
            return None
        age = (self._wall_clock() - request.sent_at).total_seconds()
        if not -self.max_request_age <= age <= self.max_request_age:
            self.metrics.dropped.labels("stale").inc()  # a replay: its answer helps nobody
            return None
        if not self._rate(request.datamart).allow():
            self.metrics.dropped.labels("rate").inc()
            return None
        if request.datamart in self.tracker.schemas:
            self.metrics.delta_requests.labels(request.datamart).inc()
        await self.worker.refresh_registry(request.datamart)
        return self.state_of(request.request_id, request.datamart)

    def _rate(self, datamart: str) -> RateLimit:
        """The datamart's bucket; datamarts not served share one (names from a message
        never grow this map)."""
        name = datamart if datamart in self.tracker.schemas else ""
        if name not in self._rates:
            rate = self.answers_per_second
            self._rates[name] = RateLimit(rate, burst=2 * rate)
        return self._rates[name]

    def state_of(self, request_id: str, datamart: str) -> DeltaState:
        return replica_state(
            request_id,
            datamart,
            self.tracker,
            failed=datamart in self.worker.failed,
            last_error=self.outbox.last_errors.get(datamart),
        )
