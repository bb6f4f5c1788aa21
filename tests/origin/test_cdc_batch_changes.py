"""The changes of a read batch (`podd_cdc.qlik_batch_changes`) are the exact decoder's: where
the batch is sure of a message, the exact decoder makes the same `Change` of it (rows,
sequence, order, identity, source time, transaction, counter, last-event flag), and the
messages Qlik writes, the batch is sure of."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podd_cdc import column_kernels, qlik_batch_changes
from podd_cdc.qlik_batch import read_batch
from podd_cdc.qlik_batch_changes import change, changes_of, tables_changes
from podd_cdc.records import Change
from tests.origin.test_cdc_batch_columns import _OTHER_TYPES, _exact, _two_tables
from tests.origin.test_cdc_decode import ROW, qlik_metadata
from tests.origin.test_cdc_fast_path import _messages, _outcome

_HEADERS = {
    "operation": "INSERT",
    "changeSequence": "20260101000000000000000000000000001",
    "timestamp": "2026-01-01T00:00:00.123",
    "transactionId": "AB",
    "transactionEventCounter": 1,
    "transactionLastEvent": True,
}


def _message(headers: dict[str, Any], data: Any = ROW, before: Any = None) -> bytes:
    message = {"data": data, "beforeData": before, "headers": headers}
    envelope = {"magic": "atMSG", "type": "DT", "messageSchemaId": "s1", "message": message}
    return json.dumps(envelope).encode()


def _judged(messages: list[bytes]) -> list[bool]:
    """Every message the batch is sure of, the exact decoder makes the same change of.
    Returns whether the batch was sure of each."""
    exact = _exact()
    (table,) = exact.by_name.values()
    batch = read_batch(messages)
    read = np.nonzero(batch.read)[0]
    changes = changes_of(batch, table, read, exact.mask_check("s1"))
    sure = [False] * len(messages)
    for r, m in enumerate(read.tolist()):
        if changes.sure[r]:
            sure[m] = True
            outcome = _outcome(exact, messages[m])
            assert isinstance(outcome, Change), (outcome, messages[m])
            assert change(batch, table, changes, r) == outcome, messages[m]
    return sure


def test_the_changes_qlik_writes_are_sure_and_the_exact_decoders() -> None:
    moved = dict(ROW, K=8)
    written = [
        _message(_HEADERS),
        _message(dict(_HEADERS, operation="UPDATE"), moved, ROW),  # the key moved: two rows
        _message(dict(_HEADERS, operation="UPDATE"), ROW, ROW),
        _message(dict(_HEADERS, operation="UPDATE"), ROW, {}),  # an empty before: none
        _message(dict(_HEADERS, operation="DELETE"), None, {"K": 7}),
        _message(dict(_HEADERS, operation="DELETE"), {"K": 7, "S": "abc"}),
        _message(dict(_HEADERS, operation="REFRESH")),
        _message(dict(_HEADERS, transactionLastEvent=False, transactionEventCounter=3)),
        _message({k: v for k, v in _HEADERS.items() if "transaction" not in k}),
        _message({k: v for k, v in _HEADERS.items() if k != "timestamp"}),
        _message(dict(_HEADERS, columnMask="7FF")),
        _message(dict(_HEADERS, operation="DELETE", columnMask="01"), {"K": 7}),
        _message(dict(_HEADERS, timestamp="2026-01-01 00:00:00")),
    ]
    assert _judged(written) == [True] * len(written)


def test_the_fast_paths_corpus_is_sure_only_as_the_exact_decoder_decides() -> None:
    corpus = _messages()
    sure = _judged(corpus)
    assert sum(sure) >= 40


_SEQUENCES = st.one_of(
    st.from_regex(r"20[0-9]{2}[01][0-9][0-3][0-9][0-2][0-9][0-6][0-9]{3}[0-9]{19}", fullmatch=True),
    st.sampled_from(
        [
            "20260101000000000000000000000000001",
            "99991231235959999999999999999999999",
            "20260230000000000000000000000000001",  # February 30
            "20260101240000000000000000000000001",  # hour 24
            "2026010100000000000000000000000001",  # 34 digits
            "2026010100000000000000000000000000x",
            "",
        ]
    ),
)
_HEADER_VALUES: dict[str, Any] = {
    "operation": st.sampled_from(
        ["INSERT", "UPDATE", "DELETE", "REFRESH", "TRUNCATE", "insert", ""]
    ),
    "changeSequence": _SEQUENCES,
    "timestamp": st.sampled_from(
        [
            "2026-01-01T00:00:00.123",
            "2026-01-01 00:00:00",
            "2026-01-01T00:00:00+03:00",
            "2026-02-30T00:00:00",
            "2026-01-01",
            "x",
        ]
    ),
    "transactionId": st.sampled_from(["AB", "", "00000000000000000000000000A1B2C3"]),
    "transactionEventCounter": st.integers(-2, 3),
    "transactionLastEvent": st.booleans(),
    "columnMask": st.sampled_from(["7FF", "01", "7FE", "FFFFFFFF", "x", ""]),
}
_ROWS = st.sampled_from(
    [ROW, dict(ROW, K=8), {"K": 7}, {"K": None}, {}, None, dict(ROW, K=None), {"EXTRA": 1}]
)


@st.composite
def _changed(draw: Any) -> bytes:
    """The plain message with one thing changed: a header set to a value drawn among those
    Qlik writes and their edges, or left out, or the rows drawn anew."""
    headers = dict(_HEADERS)
    data, before = ROW, None
    what = draw(st.sampled_from([*sorted(_HEADER_VALUES), "rows"]))
    if what == "rows":
        data, before = draw(_ROWS), draw(_ROWS)
        headers["operation"] = draw(_HEADER_VALUES["operation"])
    elif draw(st.booleans()):
        headers[what] = draw(st.one_of(st.none(), _HEADER_VALUES[what]))
    else:
        headers.pop(what, None)
    return _message(headers, data, before)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(_changed(), min_size=1, max_size=8))
def test_any_change_is_sure_only_where_the_exact_decoder_makes_it(messages: list[bytes]) -> None:
    _judged(messages)


def test_each_headers_edge_alone_is_sure_only_where_the_exact_decoder_makes_it() -> None:
    sequences = [
        "20260101000000000000000000000000001",
        "99991231235959999999999999999999999",
        "20260230000000000000000000000000001",  # February 30
        "20260101240000000000000000000000001",  # hour 24
        "20260101000060000000000000000000001",  # second 60
        "00000101000000000000000000000000001",  # year 0
        "2026010100000000000000000000000001",  # 34 digits
    ]
    edges = [("changeSequence", v) for v in sequences] + [
        (name, value)
        for name in ("operation", "timestamp", "transactionId", "columnMask")
        for value in _HEADER_VALUES[name].elements
    ]
    edges += [("transactionEventCounter", v) for v in (-1, 0, 1, 2)]
    messages = [_message(dict(_HEADERS, **{name: value})) for name, value in edges]
    sure = _judged(messages)
    assert sure[:7] == [True, True, False, False, False, False, False]


def test_a_mask_that_shares_a_hash_with_a_good_one_is_still_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Masks are checked once per hash; FNV can be made to collide, so here every mask
    hashes alike, and a mask that leaves the key out must still not be sure."""
    kernels = dict(vars(column_kernels), text_hashes=lambda t, s, e: np.zeros(len(s), np.int64))
    monkeypatch.setattr(qlik_batch_changes, "column_kernels", SimpleNamespace(**kernels))
    good, bad = (
        _message(dict(_HEADERS, columnMask="7FF")),
        _message(dict(_HEADERS, columnMask="7FE")),
    )
    assert _judged([good, bad, good]) == [True, False, True]
    # Checked first, the bad mask stands for the group: the good one, not the mask checked,
    # is left to the exact path too.
    assert _judged([bad, good]) == [False, False]


def test_several_tables_read_at_once_make_the_changes_each_makes_alone() -> None:
    """`tables_changes` (every table of a fetch at once) makes each table's changes as
    `changes_of` makes them of that table alone."""
    first, second, messages = _two_tables()
    batch = read_batch(messages)
    exact = _exact()
    exact.decode("t", qlik_metadata(_OTHER_TYPES, schema_id="s2", table="U"))
    groups = [
        (first, np.arange(0, 9, 2), exact.mask_check("s1")),
        (second, np.arange(1, 9, 2), exact.mask_check("s2")),
    ]
    together = tables_changes(batch, groups)
    assert together[0].sure.any()
    assert together[1].sure.any()
    for (table, messages_of, check), at_once in zip(groups, together, strict=True):
        alone = changes_of(batch, table, messages_of, check)
        for name in ("messages", "operation", "source_us", "timed", "counter", "sure"):
            assert np.array_equal(getattr(alone, name), getattr(at_once, name)), name
        assert np.array_equal(alone.sequence, at_once.sequence)
        assert np.array_equal(alone.last_in_transaction, at_once.last_in_transaction)
        for side in ("data", "before"):
            assert np.array_equal(getattr(alone, side).values, getattr(at_once, side).values)
            assert np.array_equal(getattr(alone, side).sure, getattr(at_once, side).sure)
