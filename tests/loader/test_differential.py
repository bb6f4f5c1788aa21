"""Differential test: random sequences of deltas over two tables, loader vs reference model.

After each delta, `t_actual` and `t_history` equal the model, and the as-of-delta read of
each table reproduces every earlier state the model passed through.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta, rows_as_of
from protocol.ddl import parse_schema
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, read_as_of, stage

SCHEMA = parse_schema(
    """
    CREATE TABLE d.one (k int not null, v varchar(5), PRIMARY KEY (k));
    CREATE TABLE d.two (a int32 not null, b varchar(3) not null, x double, PRIMARY KEY (a, b));
    """
)

# small key spaces, so keys collide within and across deltas
one_rows = st.builds(
    lambda k, v, op: DeltaRow((k, v), op),
    st.integers(0, 5),
    st.none() | st.text("ab", max_size=5),
    st.sampled_from([0, 0, 1]),
)
two_rows = st.builds(
    lambda a, b, x, op: DeltaRow((a, b, x), op),
    st.integers(0, 2),
    st.sampled_from(["p", "q"]),
    st.none() | st.floats(allow_nan=False, width=64),
    st.sampled_from([0, 0, 1]),
)
deltas = st.lists(
    st.tuples(st.lists(one_rows, max_size=8), st.lists(two_rows, max_size=6)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(deltas=deltas, chunk_rows=st.integers(1, 4))
def test_loader_equals_the_reference_model(
    new_loader: NewLoader,
    tmp_path: Path,
    replica_dsn: str,
    deltas: list[tuple[list[DeltaRow], list[DeltaRow]]],
    chunk_rows: int,
) -> None:
    schema = unique(SCHEMA)
    loader = new_loader(schema)
    model = ReplicaModel(schema)
    root = tmp_path / uuid.uuid4().hex
    live_after: list[dict[str, set[tuple[object, ...]]]] = []  # the model's rows after each delta
    for n, (one, two) in enumerate(deltas):
        rows = {"one": one, "two": two}
        result = loader.load(stage(root, schema, n, rows, chunk_rows=chunk_rows))
        model, counts = apply_delta(model, n, delta_date(n), rows)
        assert list(result.tables) == counts
        assert_matches_model(replica_dsn, model)
        live_after.append(
            {t.name: {v.values for v in model.tables[t.name].actual.values()} for t in schema}
        )
    for table in schema:
        for n, live in enumerate(live_after):
            assert read_as_of(replica_dsn, schema.datamart, table, n) == live[table.name]
            assert rows_as_of(model.tables[table.name], n) == live[table.name]
