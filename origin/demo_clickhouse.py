"""`podd-demo --store clickhouse`: what the demo prints of a ClickHouse replica (Prostore's
ADQM layout, embedded in the demo's data directory), read once the agent has stopped (the
embedded engine is one process's at a time)."""

from __future__ import annotations

import shlex
from pathlib import Path

from protocol.apply_model import ReplicaModel, rows_as_of
from replica_store.adqm.names import literal, quote
from replica_store.adqm.store import AdqmStore


def clickhouse_report(url: str, model: ReplicaModel, data_dir: Path) -> int:
    """The tables' versions, the replica against the model as of its last three deltas, and
    the ClickHouse SQL to look at it, run here; 1 if the replica differs from the model."""
    schema, last = model.schema, model.applied[-1][0]
    store = AdqmStore(url)
    try:
        names, datamart = store.names, schema.datamart
        print(f"\nreplica {datamart} (ClickHouse, {url}):")
        for table in schema:
            actual = names.actual(datamart, table.name)
            live, closed = store.client.query(
                f"SELECT countIf(sys_to = 9223372036854775807), "
                f"countIf(sys_to != 9223372036854775807) FROM {actual} FINAL WHERE sign = 1"
            ).result_rows[0]
            print(f"  {table.name:<12} {live:>8,} live rows   {closed:>8,} closed versions")
        found = [
            f"{table.name} as of {n}"
            for n in range(max(0, last - 2), last + 1)
            for table in schema
            if set(store.read_as_of(datamart, table, n)) != rows_as_of(model.tables[table.name], n)
        ]
        if found:
            print("  DIFFERS from the reference model: " + "; ".join(found))
        else:
            print(
                f"  equal to the reference model of deltas 0..{last}, "
                f"also as of deltas {max(0, last - 2)}..{last}"
            )
        table = schema.tables[0]
        earlier = max(0, last // 2)
        statements = [
            f"SELECT delta_num, delta_date, applied_at FROM {names.meta_table('delta_registry')} "
            f"WHERE datamart = {literal(datamart)} ORDER BY delta_num DESC LIMIT 3",
            f"SELECT count() FROM {names.current_view(datamart, table.name)}",
            f"SELECT count() FROM {names.as_of_view(datamart, table.name)}(n = {earlier})",
            f"SELECT * FROM {names.as_of_view(datamart, table.name)}(n = {earlier}) "
            f"ORDER BY {', '.join(map(quote, table.primary_key))} LIMIT 3",
        ]
        print("\nlook at the replica (ClickHouse SQL; the last reads it as of an earlier delta):")
        for sql in statements:
            print(f"  {sql};")
            for row in store.client.query(sql).result_rows:
                print("      " + " | ".join(str(v) for v in row))
    finally:
        store.close()
    command = ["podd-loader", "sql", "--replica", url, "-c", statements[2]]
    print(f"\nagain (while no agent runs on {data_dir}/clickhouse):")
    print(f"  .venv/bin/{shlex.join(command)}")
    return 1 if found else 0
