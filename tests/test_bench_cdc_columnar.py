"""`bench.cdc_columnar`: the columnar prototype makes the rows today's origin makes from the
same messages. (Its reading, `podd_cdc.qlik_batch`, is held to JSON's in
`tests/origin/test_cdc_batch_read.py`.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench import cdc_chain, cdc_columnar
from bench.cdc_instructions import prepared
from podd_cdc.qlik_batch import read_batch


def _garbage(shape: Any, dtype: Any) -> Any:
    """An array as `numpy.empty` may hand it out: here, full of a far index."""
    return np.full(shape, 7 if dtype == np.uint8 else 10**12, dtype)


@pytest.mark.parametrize("allocate", [np.empty, _garbage])
def test_the_prototype_makes_the_rows_of_todays_path(allocate: Any) -> None:
    """(With `_garbage`: a null DATE field's text range was never set, and the first CI run
    of this test crashed reading it.)"""
    data = prepared("qlik", 2_000)
    messages = [value for _, value in data["messages"]]
    batch = read_batch(messages, allocate)
    data_messages = sum(b'"type": "DT"' in m for m in messages)
    assert int(batch.read.sum()) == data_messages > 0  # every data message, no description
    changes, bodies = cdc_columnar.table_bodies(batch, cdc_columnar.tables_of(data))
    assert changes == data_messages
    assert cdc_columnar.body_rows(bodies) == cdc_columnar.today_rows(data)


def test_the_chain_makes_the_rows_of_todays_path_in_one_delta_or_many() -> None:
    """`bench.cdc_chain`: batches of each partition through steps 1 to 4 make the rows of
    today's cutter as one delta, and the records digest its rows give; cut every few hundred
    changes, every change is fed once, all are taken, and every transaction id is forgotten
    once its transaction is taken."""
    data = prepared("qlik", 2_000)
    decoder = cdc_columnar.tables_of(data)
    whole = cdc_chain.chain_path(data, decoder, 100, 10**9)
    (bodies,) = whole.bodies
    (digest,) = whole.digests
    assert (digest, cdc_columnar.body_rows(bodies)) == cdc_columnar.today_cut(data)
    cut = cdc_chain.chain_path(data, decoder, 100, 300)
    assert len(cut.bodies) > 3
    assert cut.changes == whole.changes == data["source_changes"]
    assert cut.held.pending == 0
    assert len(cut.codes) == 0  # every transaction's id forgotten once taken
