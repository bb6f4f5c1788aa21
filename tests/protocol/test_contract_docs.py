"""The project's contract documents (`docs/`) and the code that implements them agree.

Always: the `.avsc` files equal the schemas in `docs/contracts/PROTOCOL.md` and
`docs/contracts/BACKUP.md`, the error codes equal the table in `docs/contracts/PROTOCOL.md`, and
the type mappings equal the table in `docs/contracts/REPLICA.md`. When the team's contracts are
beside the checkout (`../shared/spec`, or `$PODD_SPEC_DIR`), `docs/` must also equal them in every
part that can drift: schemas, error codes, the types table, the backup key table and the demo
datamart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from protocol.avro_schemas import canonical_form, parsed_schema
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode
from protocol.types import TypeKind

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "contracts"
MESSAGE_SCHEMAS = ("DeltaInKey", "DeltaInResult", "DeltaRequest", "DeltaState")
BACKUP_SCHEMAS = ("BackupKey", "ChangelogRecord")


def json_schemas(path: Path) -> dict[str, dict[str, Any]]:
    blocks = re.findall(r"```json\n(.*?)```", path.read_text(), re.S)
    return {s["name"]: s for s in map(json.loads, blocks)}


def canonical(schema: dict[str, Any]) -> str:
    import fastavro  # noqa: PLC0415

    return canonical_form(fastavro.parse_schema(schema))


def table_rows(path: Path, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header row starts with `| header |`."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def error_codes(path: Path) -> list[str]:
    return [row[0].strip("`") for row in table_rows(path, "errorCode")]


# --- docs/ and the code -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("doc", "names"), [("PROTOCOL.md", MESSAGE_SCHEMAS), ("BACKUP.md", BACKUP_SCHEMAS)]
)
def test_the_shipped_schemas_are_the_documented_ones(doc: str, names: tuple[str, ...]) -> None:
    documented = json_schemas(DOCS / doc)
    assert sorted(documented) == sorted(names)
    for name in names:
        assert canonical_form(parsed_schema(name)) == canonical(documented[name]), name


def test_the_error_codes_are_the_documented_ones() -> None:
    assert error_codes(DOCS / "PROTOCOL.md") == [c.value for c in ErrorCode]


def _types_of(cell: str) -> list[str]:
    """`CHAR(n), VARCHAR(n), VARCHAR` → Prostore type spellings with a sample length."""
    return [name.strip().replace("(n)", "(5)") for name in cell.split(",")]


def test_the_type_mappings_are_the_documented_ones() -> None:
    rows = table_rows(DOCS / "REPLICA.md", "Prostore type")
    documented: set[str] = set()
    for prostore, avro, postgres in rows:
        want_avro = avro.replace(", logicalType ", "/")
        options = {o.strip().replace("(n)", "(5)") for o in postgres.split("/")}
        for spelling in _types_of(prostore):
            ddl = f"CREATE TABLE d.t (k bigint not null, c {spelling}, PRIMARY KEY (k));"
            ctype = parse_schema(ddl).table("t").columns[1].type
            documented.add(ctype.kind.value)
            assert ctype.avro.describe() == want_avro, spelling
            assert ctype.to_postgres() in options, spelling
    assert documented == {k.value for k in TypeKind}


# --- docs/ and the team's contracts ---------------------------------------------------------
def test_the_protocol_schemas_are_the_contracts(spec: Path) -> None:
    ours, theirs = json_schemas(DOCS / "PROTOCOL.md"), json_schemas(spec / "PROTOCOL.md")
    assert sorted(ours) == sorted(theirs)
    for name, schema in theirs.items():
        assert canonical(ours[name]) == canonical(schema), name


def test_the_error_codes_are_the_contracts(spec: Path) -> None:
    assert error_codes(DOCS / "PROTOCOL.md") == error_codes(spec / "PROTOCOL.md")


def test_the_types_table_is_the_contracts(spec: Path) -> None:
    header = "Prostore type"
    assert table_rows(DOCS / "REPLICA.md", header) == table_rows(spec / "REPLICA.md", header)


def test_the_backup_key_table_is_the_contracts(spec: Path) -> None:
    ours = table_rows(DOCS / "BACKUP.md", "field")
    theirs = table_rows(spec / "BACKUP.md", "field")
    # The contract's deltaDate row carries a note in its last cell that the doc gives below.
    assert [tuple(r) for r in ours] == [(r[0], r[1], r[2].split(". **")[0]) for r in theirs]
    assert [r[0].strip("`") for r in ours] == [
        f["name"] for f in json_schemas(DOCS / "BACKUP.md")["BackupKey"]["fields"]
    ]


def test_the_demo_datamart_is_the_contracts(spec: Path) -> None:
    assert (REPO / "examples" / "marketing.sql").read_text() == (spec / "marketing.sql").read_text()


def test_the_replica_contract_is_carried_whole(spec: Path) -> None:
    """docs/contracts/REPLICA.md is the contract, then what this project adds."""
    ours = (DOCS / "REPLICA.md").read_text().split("\n## What this project adds")[0]
    theirs = (spec / "REPLICA.md").read_text().replace(" (contract)", "", 1)
    assert ours.strip() == theirs.strip()
