"""A small delta decoded before its load (`DeltaLoader.decode_ahead`, the restore's
pipeline): the load takes exactly those slices, only for the files and table definitions
they were decoded from, and a refused chunk is refused as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.transfer import StagedTransfer
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()

pytestmark = pytest.mark.parametrize("spark_where", ["driver"], indirect=True)


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def chunk_files(transfer: StagedTransfer) -> list[Path]:
    return [p for s in transfer.manifest.streams for _, p in transfer.chunks_of(s.table_name)]


def blank_out(transfer: StagedTransfer) -> None:
    """Every chunk file keeps its size and loses its content: decoded now, it is refused."""
    for path in chunk_files(transfer):
        path.write_bytes(bytes(path.stat().st_size))


def test_the_load_stages_what_was_decoded_ahead(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """The files are blanked after decoding ahead: the load still applies the delta exactly,
    so it staged the slices decoded ahead and read no file again. Without them the same
    transfer is refused."""
    workload = Workload(schema, WorkloadSpec(rows_per_delta=400, seed=31))
    loader = new_loader(schema)
    model = ReplicaModel(schema)
    for n in range(2):
        rows = workload.next_delta()
        model, _ = apply_delta(model, n, delta_date(n), rows)
        transfer = stage(staging_root, schema, n, rows, chunk_rows=90)
        ahead = loader.decode_ahead(transfer)
        assert len(ahead) == len(transfer.manifest.streams)
        blank_out(transfer)
        loader.load(transfer, ahead=ahead)
    assert_matches_model(replica_dsn, model)

    transfer = stage(staging_root, schema, 2, workload.next_delta(), chunk_rows=90)
    blank_out(transfer)
    with pytest.raises(ProtocolError) as refused:
        loader.load(transfer, ahead=loader.decode_ahead(transfer))
    assert refused.value.code is ErrorCode.BAD_CHUNK
    assert_matches_model(replica_dsn, model)


def test_slices_decoded_as_another_table_are_decoded_again(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """A restore decodes delta k + 1 with delta k's schema; a changelog between them makes
    what it decoded stale. Such slices (here: decoded as a renamed table, and emptied) are
    left, and the load decodes the files itself."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=32)).next_delta()
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    loader = new_loader(schema)
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=70)
    stale = {
        piece: dataclasses.replace(
            encoded,
            table=encoded.table.model_copy(update={"name": f"{encoded.table.name}_old"}),
            staged=(),
            count=0,
        )
        for piece, encoded in loader.decode_ahead(transfer).items()
    }
    assert stale
    loader.load(transfer, ahead=stale)
    assert_matches_model(replica_dsn, model)


def test_a_bad_chunk_decoded_ahead_is_refused_by_the_load(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """Decoding ahead stops at the refused chunk; the load meets it, names it, and changes
    nothing, whatever was decoded before it."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=33)).next_delta()
    loader = new_loader(schema)
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=50)
    last = transfer.manifest.streams[-1]
    transfer.chunks_of(last.table_name)[-1][1].write_bytes(b"not an avro container")
    ahead = loader.decode_ahead(transfer)
    assert len(ahead) < len(transfer.manifest.streams)
    before = snapshot(replica_dsn, schema)
    with pytest.raises(ProtocolError) as refused:
        loader.load(transfer, ahead=ahead)
    assert refused.value.code is ErrorCode.BAD_CHUNK
    assert refused.value.chunk == (last.table_name, last.chunk_count)
    assert snapshot(replica_dsn, schema) == before


def test_nothing_is_decoded_ahead_for_a_delta_spark_stages(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path
) -> None:
    """Beyond the in-driver bound the slices would be as big as the delta: none is held."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=34)).next_delta()
    loader = new_loader(schema)
    loader.settings = loader.settings.model_copy(update={"in_driver_max_mib": 0})
    assert loader.decode_ahead(stage(staging_root, schema, 0, rows)) == {}
