"""Source tables for the demo, tests and benchmark, in each vendor's own types."""

from __future__ import annotations

from tools.cdc_write.source import SourceColumn as C
from tools.cdc_write.source import SourceTable


def qlik_marketing() -> tuple[SourceTable, ...]:
    """The demo datamart's tables as a SQL Server source behind Qlik Replicate has them."""
    return (
        SourceTable(
            "sales",
            (
                C("ID", "INT8"),
                C("TRANSACTION_DATE", "DATETIME"),
                C("PRODUCT_CODE", "STRING", 256),
                C("PRODUCT_UNITS", "INT8"),
                C("STORE_ID", "INT8"),
                C("DESCRIPTION", "STRING", 256),
            ),
            ("ID",),
        ),
        SourceTable(
            "stores",
            (
                C("ID", "INT8"),
                C("CATEGORY", "STRING", 64),
                C("REGION", "WSTRING", 64),
                C("ADDRESS", "CLOB"),
                C("OPENED", "DATE"),
            ),
            ("ID",),
        ),
        SourceTable(
            "agreements",
            (
                C("ID", "INT8"),
                C("CLIENT_ID", "INT8"),
                C("NUMBER", "STRING", 64),
                C("SIGNATURE_DATE", "DATE"),
                C("EFFECTIVE_DATE", "DATE"),
                C("CLOSING_DATE", "DATE"),
                C("DESCRIPTION", "NCLOB"),
            ),
            ("ID",),
        ),
    )


def qlik_every_type() -> SourceTable:
    """One column of every Qlik type CDC.md maps, under a two-column key."""
    return SourceTable(
        "all_types",
        (
            C("K1", "INT4"),
            C("K2", "STRING", 20),
            C("I1", "INT1"),
            C("I2", "INT2"),
            C("U1", "UINT1"),
            C("U2", "UINT2"),
            C("U4", "UINT4"),
            C("U8", "UINT8"),
            C("R4", "REAL4"),
            C("R8", "REAL8"),
            C("N10", "NUMERIC", precision=10, scale=0),
            C("N30", "NUMERIC", precision=30, scale=4),
            C("B", "BOOLEAN"),
            C("D", "DATE"),
            C("T", "TIME"),
            C("TS", "DATETIME"),
            C("BY", "BYTES", 16),
            C("BL", "BLOB"),
        ),
        ("K1", "K2"),
    )


def dataworks_marketing() -> tuple[SourceTable, ...]:
    """The demo datamart's tables as a MySQL source behind DataWorks has them, and a log
    table without a primary key (DataWorks adds its hidden row id)."""
    return (
        SourceTable(
            "sales",
            (
                C("id", "LONG"),
                C("transaction_date", "DATE"),
                C("product_code", "STRING"),
                C("product_units", "LONG"),
                C("store_id", "LONG"),
                C("description", "STRING"),
                C("paid", "BOOLEAN"),
                C("amount", "DOUBLE"),
            ),
            ("id",),
            "dataworks",
        ),
        SourceTable(
            "stores",
            (
                C("id", "LONG"),
                C("category", "STRING"),
                C("region", "STRING"),
                C("logo", "BYTES"),
            ),
            ("id",),
            "dataworks",
        ),
        SourceTable(
            "audit_log",
            (
                C("__#alibaba_rds_row_id#__", "LONG"),
                C("event", "STRING"),
                C("at", "DATE"),
            ),
            (),
            "dataworks",
        ),
    )
