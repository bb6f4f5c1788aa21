"""The transfer tracker: PROTOCOL.md's chunk rules, with no I/O and no Faust.

Per `requestId` it checks each chunk's framing against what the transfer has shown so far,
checks the sequence against the applied deltas, de-duplicates by (stream, chunk), and says
when the transfer is complete and what it still misses. It decides; the caller stages bodies,
loads and answers. It alone changes a `Transfer` (its life: `opened`, `measured`, `sealed`,
`load_started`, `load_ended`, `reported_incomplete`, `reloaded`); the others tell it what
happened. Rejected and answered transfers are "finished": their later chunks are
dropped silently. The sequence rules are `protocol.sequence`'s, the gap items
`protocol.gaps'`, and each open transfer is one `Transfer` value (`replica_agent.transfers`).

Nothing a message claims drives memory or time without a bound (`TransferLimits`):
* a key whose names are longer than a real origin's is dropped, unanswered;
* `streamTotal` above the datamart's table count and chunk numbers above a limit are
  `BAD_CHUNK` at once;
* open transfers per datamart and the bytes staged for open transfers have budgets: when one
  is exceeded, the oldest transfer still receiving is evicted (the caller answers it
  `INCOMPLETE_DELTA` and removes its files);
* chunks of a transfer already handed to the loader are dropped (the load reads its files);
* a transfer of a delta already applied (a replay: a lost answer's resend, or old signed
  messages played again) stages no body and takes no slot or budget: only its chunk numbers
  are kept, it is answered from the registry once complete, and replays have their own cap
  (`max_replays`, `max_replay_chunks`: beyond it the oldest is dropped unanswered);
* eviction removes the transfer of the delta a datamart expects last of all;
* of the applied deltas, memory keeps the last `applied_window` (`AppliedWindow`): every
  delta below is applied, its date compared with the registry's when answered;
* the finished requestIds remembered are capped, oldest forgotten first (`max_finished`: the
  outbox keeps as many answers on disk, so a restart remembers what the agent knew).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime

from protocol.body import read_body_layout
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import DeltaInKey
from protocol.schema import LogicalSchema
from protocol.sequence import AppliedDelta, SequenceRefusal, check_sequence, expected_next
from replica_agent.admission import (
    Accepted,
    Admission,
    Decision,
    Dropped,
    Rejected,
    TransferLimits,
)
from replica_agent.applied_window import AppliedWindow
from replica_agent.chunk_rules import check_last, check_same_transfer
from replica_agent.eviction import for_full_disk, replays_over_bound, to_make_room
from replica_agent.prestage_offers import take_offers
from replica_agent.transfers import (
    CHUNK_COST,
    Offer,
    Phase,
    StreamState,
    Transfer,
    TransferFraming,
)


class TransferTracker:
    """Open transfers, applied deltas and finished transfers of every datamart served."""

    def __init__(
        self,
        schemas: Mapping[str, LogicalSchema],
        applied: Mapping[str, Mapping[int, datetime] | Iterable[AppliedDelta]],
        finished: Iterable[str] = (),
        limits: TransferLimits | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.schemas = dict(schemas)
        self._wall_clock = wall_clock
        self.limits = limits or TransferLimits()
        #: Per datamart, the recent applied deltas (older ones are in the registry alone).
        self.applied: dict[str, AppliedWindow] = {
            name: AppliedWindow(applied.get(name, {}), capacity=self.limits.applied_window)
            for name in self.schemas
        }
        self.open: dict[str, Transfer] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self.remember_finished(finished)
        #: Transfers evicted to keep a budget, for the caller to answer and remove.
        self.evicted: list[Transfer] = []
        #: Replays (transfers of applied deltas) dropped unanswered to keep their bound.
        self.dropped_replays: list[Transfer] = []
        #: What staged chunk bodies may take in all, as the staging disk allows (None: only
        #: the configured budget counts); see `disk_room`.
        self.disk_budget: int | None = None

    # --- the sequence --------------------------------------------------------------------
    def expected(self, datamart: str) -> int:
        return expected_next(self.last_applied(datamart))

    def last_applied(self, datamart: str) -> AppliedDelta | None:
        return self.applied[datamart].last

    def record_applied(self, datamart: str, delta_num: int, delta_date: datetime) -> None:
        self.applied[datamart].record(delta_num, delta_date)

    def reset_applied(
        self, datamart: str, applied: Mapping[int, datetime] | Iterable[AppliedDelta]
    ) -> None:
        """The registry's last applied deltas replace what was remembered (it went back)."""
        self.applied[datamart] = AppliedWindow(applied, capacity=self.limits.applied_window)

    def sequence_problem(
        self, datamart: str, delta_num: int, delta_date: datetime
    ) -> SequenceRefusal | None:
        """The sequence rule a delta breaks now, if any. A delta applied before the window
        of dates kept in memory breaks none here: its date is compared with the registry's
        when its transfer is answered."""
        window = self.applied[datamart]
        applied_date = window.date_of(delta_num)
        if applied_date is None and window.holds(delta_num):
            return None
        return check_sequence(delta_num, delta_date, applied_date=applied_date, last=window.last)

    def decide(self, transfer: Transfer) -> Decision:
        """For a complete transfer: checked again, since another transfer may have loaded."""
        problem = self.sequence_problem(transfer.datamart, transfer.delta_num, transfer.delta_date)
        if problem is not None:
            return Decision("reject", problem.code, problem.message)
        if self.applied[transfer.datamart].holds(transfer.delta_num):
            return Decision("answer-stored")
        return Decision("load")

    def superseded(self, datamart: str) -> list[Transfer]:
        """Transfers still receiving whose delta is applied (under another requestId)."""
        applied = self.applied[datamart]
        return [
            t
            for t in self.open.values()
            if t.datamart == datamart and t.evictable and applied.holds(t.delta_num)
        ]

    # --- chunks --------------------------------------------------------------------------
    def admit(self, key: DeltaInKey, body: bytes | None) -> Admission:
        """Check one `delta.in` chunk and record it if it fits."""
        if key.request_id in self._finished:
            return Dropped(key.request_id)
        if self._oversize(key):
            return Dropped(key.request_id[: self.limits.max_name_chars], "oversize")
        transfer = self.open.get(key.request_id)
        if transfer is not None and not transfer.evictable:
            # Handed to the loader: a duplicate is counted, anything else is dropped.
            stream = transfer.streams.get(key.stream_number)
            if stream is not None and key.chunk_number in stream.chunks:
                return Accepted(transfer, False, False, False, False)
            return Dropped(key.request_id, "sealed")
        opened = transfer is None
        try:
            if transfer is None:
                self._check_new(key)
                transfer = Transfer.opened_by(key)
                transfer.replay = self.applied[key.datamart].holds(key.delta_num)
            else:
                check_same_transfer(transfer, key)
            accepted = self._admit_chunk(transfer, key, body, opened=opened)
        except ProtocolError as exc:
            self.finish(key.request_id)
            framing = TransferFraming.of(key) if transfer is None else transfer.framing
            return Rejected(framing, exc.code, exc.message)
        if accepted.new and transfer.replay:
            self.open[key.request_id] = transfer
            self._bound_replays()
            if transfer in self.dropped_replays:
                return Dropped(key.request_id, "replay")
            return accepted
        if accepted.new:
            cost = max(len(body or b""), CHUNK_COST)
            self._make_room(transfer, cost, opened=opened)
            if transfer in self.evicted:
                return Dropped(key.request_id, "evicted")
            transfer.staged_bytes += cost
        self.open[key.request_id] = transfer
        return accepted

    def finish(self, request_id: str) -> Transfer | None:
        """Close a transfer (answered or rejected); its later chunks are dropped."""
        self._finished[request_id] = None
        self._finished.move_to_end(request_id)
        while len(self._finished) > self.limits.max_finished:
            self._finished.popitem(last=False)
        return self.open.pop(request_id, None)

    def is_finished(self, request_id: str) -> bool:
        return request_id in self._finished

    def remember_finished(self, request_ids: Iterable[str]) -> None:
        """Remember `request_ids` as finished (recovered from spool), oldest first."""
        for request_id in request_ids:
            self.finish(request_id)

    # --- a transfer's life: the only places a `Transfer` changes ---------------------------
    def restore(self, transfer: Transfer, deadline: float) -> None:
        """Re-open a transfer rebuilt from staging after a restart."""
        self.open[transfer.request_id] = transfer
        _arm(transfer, deadline)

    def opened(self, transfer: Transfer, deadline: float, first_seen: float) -> None:
        """Its first chunk (at `first_seen`) is staged: receiving, and answered
        INCOMPLETE_DELTA at `deadline` unless complete by then."""
        transfer.first_seen = first_seen
        _arm(transfer, deadline)

    def chunk_staged(self, transfer: Transfer, deadline: float) -> None:
        """A new chunk arrived: a transfer answered incomplete is receiving again."""
        if transfer.phase is Phase.REPORTED_INCOMPLETE:
            _arm(transfer, deadline)

    def measured(self, transfer: Transfer, stream_number: int, decoded_bytes: int) -> None:
        """A staged body of the stream decompresses to `decoded_bytes`."""
        stream = transfer.streams[stream_number]
        if stream.decoded_bytes is not None:  # None: recovered, measured when sealed
            stream.decoded_bytes += decoded_bytes

    def take_prestage(
        self, transfer: Transfer, min_bytes: int = 1, piece_bytes: int = 0
    ) -> dict[int, Offer]:
        """What of a transfer still receiving is newly ready for prestaging, per stream
        number: from now on offered (`replica_agent.prestage_offers`)."""
        return take_offers(transfer, min_bytes, piece_bytes)

    def sealed(self, transfer: Transfer, decoded_bytes: Mapping[int, int | None]) -> None:
        """Its manifest is written (with each stream's decoded size): for the loader."""
        for number, size in decoded_bytes.items():
            transfer.streams[number].decoded_bytes = size
        transfer.phase = Phase.SEALED

    def load_started(self, transfer: Transfer) -> None:
        transfer.phase = Phase.LOADING

    def load_ended(self, transfer: Transfer) -> None:
        transfer.phase = Phase.SEALED

    def reported_incomplete(self, transfer: Transfer) -> None:
        """Answered INCOMPLETE_DELTA at its deadline; it stays open (a new chunk re-arms it)."""
        transfer.phase = Phase.REPORTED_INCOMPLETE

    def reloaded(self, request_id: str, on_disk: Transfer | None, deadline: float) -> None:
        """After a failed write: what memory held is replaced by what the files hold (None:
        they cannot be read; the transfer is forgotten, and Kafka's redelivery rebuilds it)."""
        self.open.pop(request_id, None)
        if on_disk is not None:
            self.restore(on_disk, deadline)

    def take_evicted(self) -> list[Transfer]:
        """The transfers evicted since the last call (each finished already)."""
        taken, self.evicted = self.evicted, []
        return taken

    def overdue(self, now: float) -> list[Transfer]:
        """Transfers still receiving past their deadline."""
        return [t for t in self.open.values() if t.overdue(now)]

    def loading(self, datamart: str) -> Transfer | None:
        """The datamart's transfer the loader is applying, if any."""
        return next(
            (t for t in self.open.values() if t.datamart == datamart and t.phase is Phase.LOADING),
            None,
        )

    def staged_bytes(self) -> int:
        return sum(t.staged_bytes for t in self.open.values())

    # --- checks --------------------------------------------------------------------------
    def _oversize(self, key: DeltaInKey) -> bool:
        """Names longer than any real origin writes: not worth an answer (it could be huge)."""
        most = self.limits.max_name_chars
        return (
            max(len(key.request_id), len(key.datamart), len(key.table_name)) > most
            or len(key.subscription) > self.limits.max_subscription_chars
        )

    def _make_room(self, transfer: Transfer, incoming: int, *, opened: bool) -> None:
        """Evict what `replica_agent.eviction` chooses so that `transfer`'s new chunk fits."""
        victims = to_make_room(
            list(self.open.values()),
            transfer,
            incoming,
            opened=opened,
            limits=self.limits,
            expected=self.expected,
            disk_budget=self.disk_budget,
        )
        for victim in victims:
            self.finish(victim.request_id)
            self.evicted.append(victim)

    def _bound_replays(self) -> None:
        """Replays take no slot or budget; their own bound drops the oldest unanswered (an
        origin that resends an applied delta learns it from `delta.rq` after its answer
        timeout; a replayed flood costs nothing more)."""
        for oldest in replays_over_bound(list(self.open.values()), self.limits):
            self.finish(oldest.request_id)
            self.dropped_replays.append(oldest)

    def disk_room(self, room: int) -> None:
        """The staging disk can take `room` more bytes of chunk bodies now: the budget of
        staged bytes is at most what is staged and that."""
        self.disk_budget = self.staged_bytes() + room

    def evict_for_disk(self, keep: Collection[str]) -> Transfer | None:
        """The disk refused a write: evict the transfer `eviction.for_full_disk` names (the
        caller answers it at once, which removes its files), if there is one."""
        victim = for_full_disk(list(self.open.values()), keep, self.expected)
        if victim is not None:
            self.finish(victim.request_id)
        return victim

    def take_dropped_replays(self) -> list[Transfer]:
        """The replays dropped since the last call (each finished already)."""
        taken, self.dropped_replays = self.dropped_replays, []
        return taken

    def _check_new(self, key: DeltaInKey) -> None:
        schema = self.schemas.get(key.datamart)
        if schema is None:
            raise ProtocolError(
                f"datamart {key.datamart!r} is not served by this replica",
                code=ErrorCode.UNKNOWN_DATAMART,
            )
        skew = self.limits.max_date_skew
        if skew is not None and key.delta_date > self._wall_clock() + skew:
            raise ProtocolError(
                f"deltaDate {key.delta_date.isoformat()} is more than {skew} ahead of this "
                "replica's clock"
            )
        problem = self.sequence_problem(key.datamart, key.delta_num, key.delta_date)
        if problem is not None:
            raise problem.error()
        if not 1 <= key.stream_total <= len(schema.tables):
            raise ProtocolError(
                f"streamTotal {key.stream_total} is outside 1..{len(schema.tables)} "
                f"(one stream per table of {key.datamart})"
            )

    def _admit_chunk(
        self, transfer: Transfer, key: DeltaInKey, body: bytes | None, *, opened: bool
    ) -> Accepted:
        s, c = key.stream_number, key.chunk_number
        if not 1 <= s <= transfer.stream_total:
            raise ProtocolError(f"streamNumber {s} is outside 1..{transfer.stream_total}")
        if not 1 <= c <= self.limits.max_chunk_number:
            raise ProtocolError(
                f"stream {s}: chunkNumber {c} is outside 1..{self.limits.max_chunk_number}"
            )
        table = self.schemas[transfer.datamart].table(key.table_name)  # else UNKNOWN_TABLE
        stream = transfer.streams.get(s)
        if stream is None:
            for number, other in transfer.streams.items():
                if other.table_name == key.table_name:
                    raise ProtocolError(
                        f"streams {number} and {s} both name table {key.table_name!r}"
                    )
            stream = StreamState(key.table_name)
        elif stream.table_name != key.table_name:
            raise ProtocolError(
                f"stream {s} names two tables: {stream.table_name!r} and {key.table_name!r}"
            )
        changed = check_last(stream, s, c, key.is_last_chunk)
        new = c not in stream.chunks
        if new:
            # SCHEMA_MISMATCH / BAD_CHUNK from the header alone
            read_body_layout(table, body, self.limits.body)
            stream.chunks.add(c)
        if s not in transfer.streams:
            transfer.streams[s] = stream
            changed = True
        return Accepted(transfer, opened, new, changed, (new or changed) and transfer.complete)


def _arm(transfer: Transfer, deadline: float) -> None:
    transfer.phase = Phase.RECEIVING
    transfer.deadline = deadline
