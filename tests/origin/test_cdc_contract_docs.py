"""docs/contracts/CDC.md, the CDC origin's code, and the team's contract (../shared/spec/CDC.md,
when it is beside the checkout) agree: the Qlik header table, both type mappings, DataWorks' ops and
the Avro schemas the origin reads."""

from __future__ import annotations

import re
from pathlib import Path

from podd_cdc.dataworks import NO_ROW_OPS, ROW_OPS, TABLE_DDL
from podd_cdc.qlik_avro import ENVELOPE, METADATA
from podd_cdc.values import DATAWORKS_TYPES, QLIK_TYPES, qlik_column
from tests.protocol.test_contract_docs import canonical, json_schemas, table_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "contracts" / "CDC.md"
_WORD = re.compile(r"→|[A-Z][A-Z0-9]+")


def mapping_pairs(text: str) -> set[tuple[str, str]]:
    """(source type, Prostore type) from "A, B → X; C → Y" prose or table rows: the source
    names since the last arrow map to the first upper-case word after it."""
    pairs: set[tuple[str, str]] = set()
    names: list[str] = []
    arrow = False
    for word in _WORD.findall(text):
        if word == "→":
            arrow = True
        elif arrow:
            pairs |= {(n, word) for n in names}
            names, arrow = [], False
        else:
            names.append(word)
    return pairs


def doc_pairs(header: str) -> set[tuple[str, str]]:
    return mapping_pairs("\n".join(f"{r[0]} → {r[1]}" for r in table_rows(DOC, header)))


def spec_types(spec: Path, after: str) -> set[tuple[str, str]]:
    text = spec.joinpath("CDC.md").read_text()
    start = text.index("**Types**", text.index(after))
    bullet = text[start:].split("\n- ")[0].split("\n\n")[0]
    return mapping_pairs(bullet.split(". In JSON")[0])


def code_qlik_pairs() -> set[tuple[str, str]]:
    pairs = {(name, kind.value) for name, kind in QLIK_TYPES.items()}
    for precision, scale in ((18, 0), (19, 0), (10, 2)):
        pairs.add(("NUMERIC", qlik_column("n", "NUMERIC", None, precision, scale).type.kind.value))
    return pairs


def test_the_type_tables_are_the_code() -> None:
    assert doc_pairs("Qlik type") == code_qlik_pairs()
    assert doc_pairs("DataWorks type") == {(n, k.value) for n, k in DATAWORKS_TYPES.items()}


def test_the_dataworks_ops_are_the_code() -> None:
    documented = {op.strip("` ") for row in table_rows(DOC, "op") for op in row[0].split(",")}
    assert documented == ROW_OPS | NO_ROW_OPS | TABLE_DDL | {"MHEARTBEAT", "CREATE"}


def test_the_avro_schemas_are_the_code() -> None:
    documented = json_schemas(DOC)
    assert canonical(documented["MessageEnvelope"]) == canonical(ENVELOPE)
    assert canonical(documented["MetadataMessage"]) == canonical(METADATA)


def test_the_qlik_headers_are_the_contracts(spec: Path) -> None:
    header = "header"
    assert table_rows(DOC, header) == table_rows(spec / "CDC.md", header)


def test_the_type_mappings_are_the_contracts(spec: Path) -> None:
    assert doc_pairs("Qlik type") == spec_types(spec, "## Qlik Replicate")
    assert doc_pairs("DataWorks type") == spec_types(spec, "## DataWorks")


def test_the_dataworks_ops_are_the_contracts(spec: Path) -> None:
    text = (spec / "CDC.md").read_text()
    bullet = text[text.index("- **op**") :].split("\n- ")[0]
    named = set(re.findall(r"`([A-Z_]+)`", bullet))
    documented = {op.strip("` ") for row in table_rows(DOC, "op") for op in row[0].split(",")}
    assert documented == named
