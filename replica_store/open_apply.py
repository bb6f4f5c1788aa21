"""A delta's transaction opened while the delta still arrives, driven by one owning thread.

Prestaging (`spark_loader.prestage`) stages a stream as soon as it is complete (or a piece
of it, `replica_store.pieces`) and hands its tables here: they are applied at once in the
delta's one transaction (`DeltaTransaction`), which stays open until the last chunk. The
load then takes the transaction over (`hand_over`), stages and applies only what is left,
inserts the registry row and commits. So a delta whose tables arrive one after another is
mostly applied when its last chunk comes.

What a load promises holds:
* the transaction holds the datamart's lock (taken without waiting: a load running means no
  open apply) from its opening, and the delta it opens for is the one the registry expects;
* nothing of it is visible before its COMMIT, with the registry row;
* a delta refused later, not completed in time, or loaded under another requestId is rolled
  back (`abort`), and so is the transaction after any failure in it (the load then starts
  over from staging, which still holds the prestaged tables);
* `kill -9` of the agent ends the connection, and PostgreSQL rolls the transaction back.

Ownership: from `open` to `hand_over` or `abort`, the transaction belongs to this object's
thread alone, which runs the commands the others queue (`apply_later`, then the end). They
learn what it holds from `Progress`, a frozen value the owner replaces after each command,
and from the commands they queued and it has not finished; nothing else is shared.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import MappingProxyType

import structlog

from protocol.chunk_range import ChunkRange
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import Table
from replica_store.delta_transaction import DeltaTransaction
from replica_store.errors import TransientLoadError
from replica_store.layout import Datamart
from replica_store.store import ReplicaStore
from replica_store.transfer import TransferManifest

log = structlog.get_logger("spark_loader")


@dataclass(frozen=True)
class Progress:
    """What the transaction holds, as its owner last published it."""

    alive: bool = False
    #: Tables applied whole (or their last piece).
    done: frozenset[str] = frozenset()
    #: Streams applied in part: the last chunk applied.
    through: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class _Apply:
    """Queued: these staged tables ((staged, received) rows each), some as pieces."""

    tables: tuple[Table, ...]
    counts: Mapping[str, tuple[int, int]]
    #: The tables staged as pieces: their chunks (the others are whole streams).
    pieces: Mapping[str, ChunkRange]
    finished: Future[None] = field(default_factory=Future, compare=False)

    def ends_stream(self, table_name: str) -> bool:
        """Whether the table is applied whole or to its stream's last chunk once this ends."""
        piece = self.pieces.get(table_name)
        return piece is None or piece.ends_stream


@dataclass(frozen=True)
class _End:
    """Queued last: give the transaction to the load (`keep`), or roll it back."""

    keep: bool
    finished: Future[DeltaTransaction | None] = field(default_factory=Future, compare=False)


class OpenApply:
    def __init__(
        self,
        store: ReplicaStore,
        datamart: Datamart,
        manifest: TransferManifest,
        *,
        idle_seconds: float | None = None,
    ) -> None:
        #: The server ends the transaction if it stays idle this long (None: never): an
        #: agent stopped or starved between pieces must not pin the datamart's lock and
        #: the VACUUM horizon. The load that takes it over lifts the limit.
        self.idle_seconds = idle_seconds
        self.request_id = manifest.request_id
        self.delta_num = manifest.delta_num
        self._transaction = store.begin_delta(datamart, manifest)
        self._progress = Progress()
        self._commands: queue.SimpleQueue[_Apply | _End] = queue.SimpleQueue()
        self._queued: list[_Apply] = []  # under `_lock`: queued, not finished
        self._lock = threading.Lock()
        self._owner: threading.Thread | None = None
        self.backend: tuple[object, ...] | None = None

    # --- opening, by the caller, before the owner starts ----------------------------------
    def open(self) -> bool:
        """Take the datamart's lock without waiting, check the delta is the one expected
        next and begin the transaction; False when another session holds the lock. Raises
        (`DELTA_CONFLICT` and the protocol's refusals) when the delta is not expected."""
        transaction = self._transaction
        if not transaction.lock(wait=False):
            return False
        try:
            if transaction.registered() is not None:
                raise ProtocolError("the delta is applied already", code=ErrorCode.DELTA_CONFLICT)
            transaction.begin(idle_seconds=self.idle_seconds)
        except BaseException:
            transaction.roll_back(failed=True)
            raise
        assert transaction.session is not None
        #: (pid, backend_start) of the transaction's session.
        self.backend = transaction.session.backend
        self._progress = Progress(alive=True)
        self._owner = threading.Thread(target=self._own, name="podd-open-apply", daemon=True)
        self._owner.start()
        return True

    # --- what the others may ask ----------------------------------------------------------
    @property
    def alive(self) -> bool:
        """Whether the transaction was open when its owner last said (after `settle`: now)."""
        return self._progress.alive

    @property
    def applied(self) -> frozenset[str]:
        """The tables applied whole so far (queued ones not yet)."""
        return self._progress.done

    def _pending(self) -> list[_Apply]:
        with self._lock:
            return list(self._queued)

    def _seen(self) -> tuple[list[_Apply], Progress]:
        """The queued commands, then the progress: read in this order, a command that ends
        in between is in the progress (its owner publishes before it unqueues), never in
        neither."""
        pending = self._pending()
        return pending, self._progress

    def applying(self) -> bool:
        """A queued apply has not finished."""
        return bool(self._pending())

    def busy(self) -> set[str]:
        """The tables whose staging a queued apply still reads."""
        return {t.name for command in self._pending() for t in command.tables}

    def claimed(self) -> set[str]:
        """The tables applied whole, and those a queued apply completes (applied too once
        it ends, unless it fails and the transaction is rolled back)."""
        pending, progress = self._seen()
        claimed = set(progress.done)
        for command in pending:
            claimed |= {t.name for t in command.tables if command.ends_stream(t.name)}
        return claimed

    def through(self) -> dict[str, int]:
        """Tables applied in part, with the last chunk applied (or queued to be)."""
        pending, progress = self._seen()
        out = dict(progress.through)
        for command in pending:
            for table in command.tables:
                piece = command.pieces.get(table.name)
                if piece is None or piece.ends_stream:
                    out.pop(table.name, None)
                else:
                    out[table.name] = piece.last
        return out

    def touched(self) -> set[str]:
        """Tables whose staging the transaction read (it holds a lock on it till its end):
        their staging may be emptied by DELETE, never by TRUNCATE, while it is open."""
        pending, progress = self._seen()
        busy = {t.name for command in pending for t in command.tables}
        return {*progress.done, *progress.through, *busy}

    # --- commands -------------------------------------------------------------------------
    def apply_later(
        self,
        tables: list[Table],
        counts: Mapping[str, tuple[int, int]],
        pieces: Mapping[str, ChunkRange] | None = None,
    ) -> None:
        """Queue the apply of these staged tables and return at once: the caller stages the
        next ones meanwhile. `pieces`: the tables staged as pieces, with their chunks; the
        others are whole streams. A
        failure rolls the transaction back (logged here): whoever asks next finds it not
        `alive`. Raises `TransientLoadError` if it is gone already."""
        if not self._progress.alive or self._owner is None:
            raise TransientLoadError("the open apply was rolled back")
        command = _Apply(
            tuple(tables), MappingProxyType(dict(counts)), MappingProxyType(dict(pieces or {}))
        )
        with self._lock:
            self._queued.append(command)
        self._commands.put(command)

    def settle(self) -> None:
        """Wait for every queued apply (a failure of one rolled the transaction back)."""
        for command in self._pending():
            command.finished.exception()

    def hand_over(self) -> DeltaTransaction:
        """The transaction, open, for the load that finishes the delta; its idle limit
        lifted. `TransientLoadError` if it is gone."""
        transaction = self._end(keep=True)
        if transaction is None or not transaction.alive:
            raise TransientLoadError("the open apply was rolled back")
        if self.idle_seconds is not None:
            transaction.lift_idle_limit()
        return transaction

    def abort(self) -> None:
        """Roll the transaction back and release the datamart's lock."""
        self._end(keep=False)

    def _end(self, *, keep: bool) -> DeltaTransaction | None:
        owner = self._owner
        if owner is None or not owner.is_alive():
            return None
        command = _End(keep)
        self._commands.put(command)
        transaction = command.finished.result()
        owner.join()
        return transaction

    # --- the owner ------------------------------------------------------------------------
    def _own(self) -> None:
        transaction = self._transaction
        while True:
            command = self._commands.get()
            if isinstance(command, _End):
                if not command.keep:
                    transaction.roll_back()
                self._progress = Progress()
                command.finished.set_result(transaction if command.keep else None)
                return
            try:
                self._apply(transaction, command)
                command.finished.set_result(None)
            except BaseException as exc:
                command.finished.set_exception(exc)
            finally:
                with self._lock:
                    self._queued.remove(command)

    def _apply(self, transaction: DeltaTransaction, command: _Apply) -> None:
        if not transaction.alive:
            raise TransientLoadError("the open apply was rolled back")
        try:
            for table in command.tables:
                staged, received = command.counts[table.name]
                transaction.apply(table, staged, received, piece=command.pieces.get(table.name))
        except BaseException as exc:
            transaction.roll_back(failed=True)
            self._progress = Progress()
            reason = f"{type(exc).__name__}: {exc}"[:300]
            log.info(
                "open apply rolled back: the load applies its tables",
                deltaNum=self.delta_num,
                reason=reason,
            )
            raise
        self._progress = Progress(
            alive=True,
            done=frozenset(transaction.done),
            through=MappingProxyType({n: p.through for n, p in transaction.pieces.items()}),
        )
