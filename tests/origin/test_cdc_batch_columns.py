"""A table's rows from a read batch (`podd_cdc.qlik_columns`) are the exact decoder's: where
the batch is sure of a row, the exact decoder makes the same values of it; where the exact
decoder refuses a value, the batch is not sure of that row; and the plain rows Qlik writes,
the batch is sure of."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podd_cdc import column_kernels, json_rows, qlik_columns
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_batch import read_batch
from podd_cdc.qlik_columns import python_rows, side_columns, tables_sides
from podd_cdc.records import Change
from podd_cdc.values import batch_form
from tests.origin.test_cdc_decode import ROW, TYPES, qlik_data, qlik_metadata
from tests.origin.test_cdc_fast_path import PLAIN, VARIANTS, _messages, _outcome


def _exact() -> QlikDecoder:
    decoder = QlikDecoder(fast=False)
    decoder.decode("t", qlik_metadata(TYPES))
    return decoder


#: How the exact decoder names a value it refuses (`podd_cdc.tables.MappedTable.row`).
_VALUE_REASONS = (": column ", "has no column", "has unknown columns")


def _judged(messages: list[bytes]) -> tuple[int, list[bool]]:
    """Each message whose data row the batch is sure of, with every column given: the
    exact decoder's upsert holds the same values. A message the exact decoder refuses for a
    value: the batch is not sure of it. Returns how many the batch read, and whether it
    was sure of each."""
    exact = _exact()
    (table,) = exact.by_name.values()
    batch = read_batch(messages)
    read = np.nonzero(batch.read)[0]
    columns = side_columns(batch, table, read, 0)
    rows = python_rows(batch, table, columns, np.arange(len(read)))
    sure = [False] * len(messages)
    for r, m in enumerate(read.tolist()):
        whole = bool(columns.sure[r]) and bool(columns.given[:, r].all())
        sure[m] = whole
        outcome = _outcome(exact, messages[m])
        if isinstance(outcome, Change):
            if whole and outcome.rows[-1].sys_op == 0:
                assert outcome.rows[-1].values == rows[r], messages[m]
        elif whole:
            reason = outcome[1]
            assert not any(v in reason for v in _VALUE_REASONS), (reason, messages[m])
    return len(read), sure


def test_the_plain_rows_qlik_writes_are_sure_and_the_exact_decoders() -> None:
    plain = [qlik_data(ROW), qlik_data(PLAIN), qlik_data(dict(ROW, S=None, TS=None))]
    read, sure = _judged(plain)
    assert read == 3
    assert sure == [True, True, True]


def test_every_form_is_taken_by_the_batch() -> None:
    """The test table has a column of every form the batch converts: none is left to the
    exact path alone."""
    (table,) = _exact().by_name.values()
    forms = {batch_form(c.mapped) for c in table.columns}
    assert forms == {"integer", "decimal", "real", "time", "date", "timestamp", "hex"} | {
        "boolean",
        "text",
    }


def test_each_columns_edge_values_are_the_exact_decoders() -> None:
    corpus = _messages()
    read, sure = _judged(corpus)
    assert read > 0
    assert sum(sure) >= 40  # the values of every column's edge that fit, in each column


#: Values at the edges of the forms the batch parses, so that each is drawn often.
_EDGES = {
    "D": ["2024-02-29", "2023-02-29", "2023-02-30", "2023-04-31", "2023-13-01", "0000-01-01"],
    "T": ["00:00:00", "23:59:59.999999", "24:00:00", "23:60:00", "23:59:60", "23:59:59.1234567"],
    "TS": [
        "2023-03-21 23:59:59.999999",
        "2023-03-21T00:00:00",
        "2023-03-21 24:00:00",
        "2023-03-21 23:60:00",
        "2023-03-21 23:59:60",
        "2023-03-21 23:59:59.1234567",
        "2023-03-21 23:59:59.",
        "2023-02-29 00:00:00",
    ],
}
_VALUES: dict[str, Any] = {
    "K": st.one_of(
        st.integers(-(2**32), 2**32), st.from_regex(r"[+-]?[0-9]{1,12}", fullmatch=True)
    ),
    "N19": st.from_regex(r" ?[+-]?[0-9]{0,4}(\.[0-9]{0,3})?e?", fullmatch=True),
    "N18": st.one_of(st.integers(), st.from_regex(r"[+-]?0*[0-9]{1,20}", fullmatch=True)),
    "U8": st.integers(-(2**65), 2**65),
    "R4": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers()),
    "T": st.from_regex(r"[0-2][0-9]:[0-6][0-9]:[0-6][0-9](\.[0-9]{0,8})?", fullmatch=True),
    "D": st.one_of(
        st.dates().map(str), st.from_regex(r"[0-9]{4}-[0-2][0-9]-[0-3][0-9]", fullmatch=True)
    ),
    "TS": st.one_of(
        st.datetimes().map(str),
        st.from_regex(
            r"[0-9]{4}-[01][0-9]-[0-3][0-9][ T][0-2][0-9]:[0-5][0-9]:[0-6][0-9](\.[0-9]{0,8})?",
            fullmatch=True,
        ),
    ),
    "BY": st.from_regex(r"[0-9a-gA-G]{0,9}", fullmatch=True),
    "B": st.one_of(
        st.booleans(), st.sampled_from(["true", "FALSE", "1", "0", "2", " 1", "yes", 1, 0, 2])
    ),
    "S": st.text(max_size=5),
}


@st.composite
def _one_column_changed(draw: Any) -> dict[str, Any]:
    """ROW (every value one the batch is sure of) with one column's value drawn anew: a
    row is sure or not by that value alone."""
    column = draw(st.sampled_from(sorted(_VALUES)))
    values = st.one_of(_VALUES[column], st.sampled_from(_EDGES.get(column, [None])))
    value = draw(st.one_of(st.none(), values)) if column != "K" else draw(_VALUES["K"])
    return dict(ROW, **{column: value})


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(_one_column_changed(), min_size=1, max_size=8))
def test_any_value_is_sure_only_where_the_exact_decoder_makes_the_same(
    rows: list[dict[str, Any]],
) -> None:
    _judged([qlik_data(row) for row in rows])


def test_a_nul_in_text_is_not_sure() -> None:
    """JSON writes NUL only escaped, which the reader leaves to the exact path; the check
    of the text itself is held here."""
    out = np.frombuffer(b"ab\x00cabc", np.uint8)
    good = np.zeros(2, np.bool_)
    column_kernels.texts(out, np.array([0, 4]), np.array([4, 7]), -1, 100, good)
    assert good.tolist() == [False, True]
    column_kernels.texts(out, np.array([4, 4]), np.array([7, 7]), 2, 100, good)
    assert good.tolist() == [False, False]  # three characters in VARCHAR(2)


@pytest.mark.parametrize("column", sorted(VARIANTS))
def test_a_field_of_no_column_or_a_column_missing_is_not_sure(column: str) -> None:
    exact = _exact()
    (table,) = exact.by_name.values()
    missing = {k: v for k, v in ROW.items() if k != column}
    messages = [qlik_data(ROW), qlik_data(dict(ROW, EXTRA=1)), qlik_data(missing)]
    batch = read_batch(messages)
    columns = side_columns(batch, table, np.arange(3), 0)
    assert columns.sure.tolist() == [True, False, True]
    assert columns.given.all(axis=0).tolist() == [True, True, False]


def test_a_field_whose_hash_is_a_columns_but_not_its_name_is_no_column() -> None:
    """FNV can be made to collide: a forged hash (written over the field's own here) must
    not make a field of another name count as the column."""
    exact = _exact()
    (table,) = exact.by_name.values()
    batch = read_batch([qlik_data(dict(ROW, Z="xyz")), qlik_data(ROW)])  # Z: like S
    fields = batch.fields
    extra = [f for f in range(len(fields)) if batch.out[fields[f, json_rows.F_KEY0]] == ord("Z")]
    source = [f for f in range(len(fields)) if batch.out[fields[f, json_rows.F_KEY0]] == ord("S")]
    fields[extra[0], json_rows.F_HASH] = fields[source[0], json_rows.F_HASH]
    columns = side_columns(batch, table, np.arange(2), 0)
    assert columns.sure.tolist() == [False, True]


#: A second table whose key has the first's key's name but another type.
_OTHER_TYPES = {"K": ("STRING", 5, 0, 0, 1), "X": ("INT8", 0, 0, 0, 0)}


def _two_tables() -> tuple[Any, Any, list[bytes]]:
    exact = _exact()
    exact.decode("t", qlik_metadata(_OTHER_TYPES, schema_id="s2", table="U"))
    first, second = exact.by_name["t"], exact.by_name["u"]
    other: list[dict[str, Any]] = [
        {"K": "abc", "X": 5},
        {"K": "x", "X": None, "S": "not U's"},
        {"K": 7, "X": 1},
    ]
    messages = []
    for k in range(9):
        if k % 2:
            message = qlik_data(other[k // 2 % 3]).replace(b'"s1"', b'"s2"')
        else:
            message = qlik_data(dict(ROW, K=k, EXTRA=1) if k == 4 else dict(ROW, K=k))
        sequence = f"{k + 1:017d}".encode()  # each message its own headers
        messages.append(message.replace(b'00000000000000001"', sequence + b'"'))
    return first, second, messages


def test_several_tables_converted_at_once_are_each_converted_alone() -> None:
    """`tables_sides` (every table of a fetch at once) makes, for each table, exactly what
    it makes of that table alone: two tables sharing a column name with different types,
    their messages interleaved, a field of the other table's, a table without messages."""
    first, second, messages = _two_tables()
    batch = read_batch(messages)
    groups = [(first, np.arange(0, 9, 2)), (second, np.arange(1, 9, 2)), (first, np.arange(0))]
    together = tables_sides(batch, groups)
    assert together[0][0].sure.tolist() == [True, True, False, True, True]
    assert together[1][0].sure.tolist() == [True, False, False, True]  # S; K not a text
    for (table, messages_of), sides in zip(groups, together, strict=True):
        alone_sides = tables_sides(batch, [(table, messages_of)])[0]
        for alone, at_once in zip(alone_sides, sides, strict=True):
            for name in ("values", "lengths", "valid", "given", "fields", "sure"):
                assert np.array_equal(getattr(alone, name), getattr(at_once, name)), name


def test_a_column_looked_up_in_another_table_is_no_column() -> None:
    """With the table left out of the lookup's key (as a forged hash could make two
    tables' keys meet), a field is still never taken as another table's column."""
    first, second, messages = _two_tables()
    batch = read_batch(messages)
    groups = [(first, np.arange(0, 9, 2)), (second, np.arange(1, 9, 2))]
    honest = tables_sides(batch, groups)
    with mock.patch.object(qlik_columns, "_keyed", lambda table, hashes: hashes):
        forged = tables_sides(batch, groups)
    for sides, forged_sides in zip(honest, forged, strict=True):
        for side, forged_side in zip(sides, forged_sides, strict=True):
            sure = forged_side.sure
            assert not (sure & ~side.sure).any()
            assert np.array_equal(side.values[:, sure], forged_side.values[:, sure])
    assert not forged[0][0].sure.all() or not forged[1][0].sure.all()


def test_reals_of_any_length_are_read_as_python_reads_them() -> None:
    """Floats are read together (numpy's bytes to float, the same bits as Python's `float`),
    but for texts longer than `WIDEST`, read one at a time: a hostile length does not size
    the batch's arrays. A whole number written long is not a float: the exact path's."""
    texts = [b"1.5", b"-0.0", b"2.5e-3", b"1E5", b"4.9e-324", b"1e400", b"7"]
    texts += [b"1." + b"0" * 100 + b"1", b"3" * 70 + b".25", b"9" * 80]
    messages = [qlik_data(ROW).replace(b'"R4": 1.5', b'"R4": ' + text) for text in texts]
    read, sure = _judged(messages)
    assert read == len(texts)
    assert sure == [True, True, True, True, True, False, True, True, True, False]


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300), st.data())
def test_a_text_is_its_name_only_where_every_byte_is(name: bytes, data: st.DataObject) -> None:
    """`same_texts` compares every byte (its loop has no early exit), so a text that
    differs from its name in any one byte, or in its length, is not it; -1 stays -1."""
    at = data.draw(st.integers(0, len(name) - 1))
    flipped = bytearray(name)
    flipped[at] ^= data.draw(st.integers(1, 255))
    texts = [name, bytes(flipped), name[:-1], name + b"x", name]
    out = np.frombuffer(b"".join(texts), np.uint8)
    sizes = np.array([len(t) for t in texts], np.int64)
    ends = np.cumsum(sizes)
    which = np.array([0, 0, 0, 0, -1], np.int64)
    names = np.frombuffer(name, np.uint8)
    column_kernels.same_texts(out, ends - sizes, ends, names, np.array([0, len(name)]), which)
    assert which.tolist() == [0, -1, -1, -1, -1]
