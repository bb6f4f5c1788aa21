"""The Qlik cutter on arrays (`podd_cdc.qlik_array_cutter`) against the cutter (`Cutter`),
asked alike as the intake and the runner ask: the exact decoder's changes checked and fed
one at a time, or a batch's lines fed at once; messages passed; a partition added; cuts
asked at a moving clock, with or without force and age. Both stop on the same changes,
hold and name the same, cut the same deltas at the same asks (the same `Cut`, but for the
digest's kind) with the same rows."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.errors import BadInput, SequenceStop
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_batch import read_batch
from podd_cdc.qlik_batch_changes import changes_of
from podd_cdc.qlik_delta_rows import TableBlock, python_rows_of
from podd_cdc.qlik_feed import ReadAt, batch_lines, message_codes
from podd_cdc.records import Change, Position
from podd_cdc.rows import rows_records_digest
from protocol.schema import LogicalSchema
from tests.origin.test_cdc_decode import qlik_metadata
from tests.origin.test_cdc_qlik_delta_rows import _TYPES, _WALL, _decoder, _message, _written

PARTITIONS = 2  # at the start; a third may be added
_partition = st.integers(0, PARTITIONS)
#: A message, in a transaction (its code, counter, last-event flag) or none.
_in_transaction = st.tuples(
    _message,
    st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(1, 3), st.booleans())),
)
_step = st.one_of(
    st.tuples(st.just("exact"), _partition, st.lists(_in_transaction, min_size=1, max_size=4)),
    st.tuples(st.just("batch"), _partition, st.lists(_in_transaction, min_size=1, max_size=6)),
    st.tuples(st.just("passed"), _partition),
    st.tuples(st.just("metadata"), _partition),  # a table's description: no change
    st.tuples(st.just("add"), st.integers(0, 3)),
    st.tuples(  # quiet, force, by age
        st.just("cut"), st.sets(_partition), st.sampled_from([False, False, True]), st.booleans()
    ),
)
_WALL_CLOCK = _WALL + timedelta(days=1)  # the sequences are of _WALL: none is ahead


def _message_of(drawn: tuple[Any, Any]) -> bytes:
    """A drawn message, with its transaction's headers where it is in one."""
    message, transaction = drawn
    written = _written(message)
    if transaction is None:
        return written
    code, counter, last = transaction
    envelope = json.loads(written)
    envelope["message"]["headers"] |= {
        "transactionId": f"{code:032d}",
        "transactionEventCounter": counter,
        "transactionLastEvent": last,
    }
    return json.dumps(envelope, ensure_ascii=False).encode()


class Both:
    def __init__(self, max_rows: int) -> None:
        self.decoder = _decoder()
        (self.table,) = self.decoder.by_name.values()
        self.schema = LogicalSchema(datamart="m", tables=(self.table.table,))
        self.keys = [partition_key("t", p) for p in range(PARTITIONS)]
        bounds = Bounds(max_rows, max_age=3.0)
        starts = dict.fromkeys(self.keys, 0)
        self.cutter = Cutter("qlik", self.schema, starts, None, bounds)
        self.arrays = QlikArrayCutter(
            self.schema, self.decoder.by_name.__getitem__, starts, None, bounds
        )
        self.offsets = [0] * PARTITIONS
        self.now = 0.0
        self.deltas = 0
        self.stops = 0
        self.judged = 0  # a batch's changes the exact check judged

    def exact(self, partition: int, drawn: list[Any]) -> None:
        if partition >= len(self.offsets):
            return
        key = self.keys[partition]
        for message in map(_message_of, drawn):
            at = Position("t", partition, self.offsets[partition])
            self.offsets[partition] += 1
            self.now += 0.25
            try:
                change = self.decoder.decode("t", message)
            except BadInput:
                self.cutter.passed(at)
                self.arrays.passed(at)
                continue
            stops = []
            for side in (self.cutter, self.arrays):
                try:
                    side.check(at, change, _WALL_CLOCK, key)
                except SequenceStop as stop:
                    stops.append(str(stop))
            assert len(stops) in (0, 2)
            assert len(set(stops)) <= 1
            if stops:
                self.stops += 1
                continue  # the intake stops reading there; here both read on alike
            self.cutter.feed(at, change, self.now, len(message), key)
            self.arrays.feed(at, change, self.now, len(message), key)
        self.compare()

    def batch(self, partition: int, drawn: list[Any]) -> None:
        """A run of messages read as one batch, where the batch is sure of every message:
        its lines fed at once, up to the first the exact order check must judge; from
        there (or for a batch not sure of every message), each message as the exact
        decoder reads it."""
        if partition >= len(self.offsets):
            return
        messages = [_message_of(d) for d in drawn]
        batch = read_batch(messages)
        made = changes_of(
            batch, self.table, np.nonzero(batch.read)[0], self.decoder.mask_check("s1")
        )
        if not (len(made.messages) == len(messages) and made.sure.all()):
            self.exact(partition, drawn)
            return
        first = self.offsets[partition]
        read = ReadAt(partition, first + made.messages, self.now + 0.25, list(map(len, messages)))
        block = self.arrays.new_block(TableBlock(self.table, batch.out, made))
        every = np.arange(len(messages), dtype=np.int64)
        rest = self.arrays.feed_lines(
            lambda codes: batch_lines(
                batch, made, every, read, block, message_codes(batch, made.messages, codes)
            ),
            _WALL_CLOCK,
        )
        fed = len(messages) - len(rest)
        assert rest.offset.tolist() == list(range(first + fed, first + len(messages)))
        key = self.keys[partition]
        for k, message in enumerate(messages[:fed]):
            at = Position("t", partition, first + k)
            change = self.decoder.decode("t", message)
            self.cutter.check(at, change, _WALL_CLOCK, key)  # passes, as on arrays
            self.cutter.feed(at, change, self.now + 0.25, len(message), key)
        self.offsets[partition] += fed
        self.now += 0.25
        self.judged += len(rest)
        self.exact(partition, drawn[fed:])

    def metadata(self, partition: int) -> None:
        if partition < len(self.offsets):
            at = Position("t", partition, self.offsets[partition])
            self.offsets[partition] += 1
            seen = self.decoder.decode("t", qlik_metadata(_TYPES))
            for side in (self.cutter, self.arrays):
                side.check(at, seen, _WALL_CLOCK, self.keys[partition])
                side.feed(at, seen, self.now, 100, self.keys[partition])

    def passed(self, partition: int) -> None:
        if partition < len(self.offsets):
            at = Position("t", partition, self.offsets[partition])
            self.offsets[partition] += 1
            self.cutter.passed(at)
            self.arrays.passed(at)

    def add(self, offset: int) -> None:
        if len(self.offsets) <= PARTITIONS:
            key = partition_key("t", len(self.offsets))
            self.keys.append(key)
            self.cutter.add_partition(key, offset)
            self.arrays.add_partition(key, offset)
            self.offsets.append(offset)

    def cut(self, quiet: set[int], force: bool, by_age: bool) -> None:
        keys = {self.keys[p] for p in quiet if p < len(self.offsets)}
        self.now += 1.0
        today = self.cutter.cut(self.deltas, keys, self.now, _WALL, force=force, by_age=by_age)
        made = self.arrays.cut(self.deltas, keys, self.now, _WALL, force=force, by_age=by_age)
        assert (made is None) == (today is None)
        if made is not None and today is not None:
            cut, rows = today
            assert replace(made.cut, digest="") == replace(cut, digest="")
            assert made.cut.digest == rows_records_digest(self.schema, rows)
            assert python_rows_of(made.tables) == rows
            self.deltas += 1
        self.compare()

    def compare(self) -> None:
        cutter, arrays = self.cutter, self.arrays
        assert (arrays.pending, arrays.duplicates) == (cutter.pending, cutter.duplicates)
        assert (arrays.holds_a_delta, arrays.full) == (cutter.holds_a_delta, cutter.full)
        assert arrays.oldest_open() == cutter.oldest_open()
        for quiet in (set(), {self.keys[0]}):
            assert arrays.ahead(quiet) == cutter.ahead(quiet)
        held_blocks = set(np.unique(arrays.held.held().block).tolist())
        assert held_blocks == set(arrays.blocks)  # a block is kept while a change in it is
        buffers = {id(b.out): b.out.nbytes for b in arrays.blocks.values() if hasattr(b, "out")}
        assert arrays.pinned_bytes == sum(buffers.values())
        assert len(arrays.codes) <= arrays.pending  # only held transactions keep a code


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_step, max_size=20), st.integers(1, 5))
def test_asked_alike_the_two_cutters_answer_alike(steps: list[Any], max_rows: int) -> None:
    both = Both(max_rows)
    for step in steps:
        getattr(both, step[0])(*step[1:])
    while True:  # what is left, but open transactions
        before = both.deltas
        both.cut(set(range(len(both.offsets))), True, True)
        if both.deltas == before:
            break


def test_a_copy_read_after_its_cut_is_a_duplicate_and_a_late_sequence_stops_both() -> None:
    """Named: a change cut, then read again, is a copy on both sides; a new change at the
    bound's sequence, never seen, stops both with the same words."""
    both = Both(10)
    insert = ("INSERT", {"K": 1, "S": "a", "R": 0.0}, {"V": None, "F": None, "D": None})
    both.batch(0, [((*insert, None, False, 5, 0), None), ((*insert, None, False, 7, 0), None)])
    both.cut({0, 1}, True, True)
    assert both.deltas == 1
    both.exact(0, [((*insert, None, False, 7, 0), None)])
    assert both.cutter.duplicates == 1
    late = ("INSERT", {"K": 2, "S": "b", "R": 1.5}, {"V": "x", "F": None, "D": None})
    both.exact(1, [((*late, None, False, 6, 1), None)])
    assert both.stops == 1


def _insert(sequence: int, partition: int, transaction: Any = None) -> tuple[Any, Any]:
    key = {"K": 1 + sequence % 2, "S": "a", "R": 0.0}
    return ("INSERT", key, {"V": None, "F": None, "D": None}, None, False, sequence, partition), (
        transaction
    )


def test_a_delta_due_by_age_is_found_by_the_partition_that_waited_longest() -> None:
    """The look by age is made once the change held longest (partition 0's) has waited
    `max_age`, though partition 1's has not."""
    both = Both(10)
    both.exact(0, [_insert(1, 0)])
    both.cut(set(), False, True)
    both.exact(1, [_insert(2, 1)])
    for _ in range(3):
        both.cut(set(), False, True)
    assert both.deltas == 1


def test_the_order_check_asks_about_held_changes_by_the_exact_decoders_identity() -> None:
    """The exact check asks whether a change of an identity is held (a copy is no stop):
    the arrays answer for the decoder's identity (its sequence key) as the cutter does."""
    both = Both(10)
    both.exact(0, [_insert(2, 0, (1, 1, False)), _insert(3, 0)])
    held, other = (both.decoder.decode("t", _message_of(_insert(n, 0))) for n in (2, 4))
    assert isinstance(held, Change)
    assert isinstance(other, Change)
    assert both.arrays._holds(held.identity)
    assert not both.arrays._holds(other.identity)
    assert held.identity in both.cutter._identities
    assert other.identity not in both.cutter._identities


def test_a_batch_fed_after_an_empty_look_is_looked_at() -> None:
    """An empty look is not repeated until something is fed: a batch's lines count."""
    both = Both(10)
    both.exact(0, [_insert(1, 0)])
    both.cut(set(), True, True)  # partition 1 has read nothing: the bound holds all back
    assert both.deltas == 0
    both.batch(1, [_insert(2, 1)])
    both.cut(set(), True, True)
    assert both.deltas == 1


def test_a_batchs_late_sequence_is_judged_by_the_exact_check_and_stops_both() -> None:
    """After a cut, a batch holding a new change below the cut's bound: the changes before
    it are held from the arrays, it and the rest go to the exact check, which stops on it
    (held on arrays, it would have been dropped as a copy)."""
    both = Both(10)
    both.exact(0, [_insert(5, 0)])
    both.exact(1, [_insert(6, 1)])
    both.cut({0, 1}, True, True)
    assert both.deltas == 1
    both.batch(1, [_insert(7, 1), _insert(3, 1), _insert(8, 1)])
    assert (both.judged, both.stops) == (2, 1)
    assert both.cutter.pending == both.arrays.pending == 2


def test_the_batches_kept_for_held_changes_count_against_the_bytes_bound() -> None:
    """A batch's text stays while one change of it is held: the cutter is full once those
    bytes reach `max_pending_bytes`, though the messages held claim fewer; a batch of
    second copies keeps nothing."""
    decoder = _decoder()
    (table,) = decoder.by_name.values()
    schema = LogicalSchema(datamart="m", tables=(table.table,))
    messages = [_message_of(_insert(n, 0, (1, n, False))) for n in range(1, 4)]
    batch = read_batch(messages)
    made = changes_of(batch, table, np.nonzero(batch.read)[0], decoder.mask_check("s1"))
    assert made.sure.all()
    text = batch.out.nbytes
    bounds = Bounds(10, max_pending_bytes=text)
    arrays = QlikArrayCutter(schema, decoder.by_name.__getitem__, {"t:0": 0}, None, bounds)
    every = np.arange(3, dtype=np.int64)
    read = ReadAt(0, every, 0.0, 1)  # each message claims one byte
    for _ in range(2):  # the second time, every change is a copy
        block = arrays.new_block(TableBlock(table, batch.out, made))
        coded = partial(message_codes, batch, made.messages)
        arrays.feed_lines(partial(_lines, batch, made, every, read, block, coded), _WALL)
        assert (arrays.pending, arrays.pending_bytes, arrays.pinned_bytes) == (3, 3, text)
        assert arrays.full
        assert len(arrays.blocks) == 1


def _lines(
    batch: Any, made: Any, lines: Any, read: ReadAt, block: int, coded: Any, codes: Any
) -> Any:
    """`batch_lines` of a batch coded by the cutter's `codes` (`coded(codes)`)."""
    return batch_lines(batch, made, lines, read, block, coded(codes))
