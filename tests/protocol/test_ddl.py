"""Reading Prostore DDL into the logical schema."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.ddl import parse_schema
from protocol.errors import SchemaDefinitionError, UnknownTableError
from protocol.schema import Column, LogicalSchema, Table, quote_ident
from protocol.types import ColumnType, TypeKind
from tests.conftest import REPO
from tests.protocol.tables import ALL_TYPES, ALL_TYPES_DDL


def test_the_demo_schema_reads() -> None:
    schema = parse_schema((REPO / "examples" / "marketing.sql").read_text())
    assert schema.datamart == "marketing"
    assert [t.name for t in schema] == ["sales", "stores", "agreements"]
    sales = schema.table("sales")
    assert sales.column_names == (
        "id",
        "transaction_date",
        "product_code",
        "product_units",
        "store_id",
        "description",
    )
    assert sales.primary_key == ("id",)
    assert sales.distributed_by == ("id",)
    assert sales.column("product_code") == Column(
        name="product_code", type=ColumnType(TypeKind.VARCHAR, 256), not_null=True
    )
    assert sales.column("description").not_null is False
    assert sales.column("transaction_date").type.to_postgres() == "timestamp(6)"
    assert schema.table("stores").column("opened").type.kind is TypeKind.DATE


def test_all_thirteen_types_and_both_aliases() -> None:
    kinds = {c.name: c.type for c in ALL_TYPES.columns}
    assert {t.kind for t in kinds.values()} == set(TypeKind)
    assert kinds["s"] == ColumnType(TypeKind.VARCHAR)  # STRING
    assert kinds["lg"] == ColumnType(TypeKind.BIGINT)  # LONG
    assert kinds["c"] == ColumnType(TypeKind.CHAR, 3)
    assert kinds["u"].max_chars == 36
    postgres = {name: t.to_postgres() for name, t in kinds.items()}
    assert postgres == {
        "id": "bigint",
        "b": "boolean",
        "i32": "integer",
        "i": "bigint",
        "bi": "bigint",
        "f": "real",
        "d": "double precision",
        "c": "varchar(3)",
        "v": "varchar(10)",
        "vs": "varchar",
        "u": "varchar(36)",
        "l": "varchar",
        "dt": "date",
        "tm": "time(6)",
        "ts": "timestamp(6)",
        "s": "varchar",
        "lg": "bigint",
    }


def test_several_statements_comments_quoting_and_case() -> None:
    schema = parse_schema(
        """
        /* a block comment; with a semicolon */
        CREATE DATABASE IF NOT EXISTS Shop;
        -- a line comment
        create table if not exists SHOP."Orders" (
          "Id" BIGINT NOT NULL, -- trailing comment
          Qty int32 null,
          note STRING,
          primary key ("Id")
        ) sharding_key ("Id") datasource_type ('adb', adp);
        CREATE TABLE lines (id long not null, order_id long, PRIMARY KEY (id, order_id));
        """
    )
    assert schema.datamart == "shop"
    orders, lines = schema.tables
    assert orders.name == "Orders"
    assert orders.column_names == ("Id", "qty", "note")
    assert orders.distributed_by == ("Id",)
    # a primary key column is NOT NULL, as PostgreSQL makes it
    assert lines.column("order_id").not_null
    assert lines.primary_key == ("id", "order_id")


def test_the_datamart_may_be_given_for_unqualified_tables() -> None:
    schema = parse_schema("CREATE TABLE t (id int, PRIMARY KEY (id))", datamart="dm")
    assert schema.datamart == "dm"
    assert schema.table("t").column("id").not_null


def test_the_contracts_other_spellings_read_as_their_types() -> None:
    ddl = (
        "CREATE TABLE d.t (k INTEGER NOT NULL, t0 TIME(0), t3 time(3), t6 TIME(6), "
        "s0 TIMESTAMP(0), s6 timestamp(6), PRIMARY KEY (k))"
    )
    table = parse_schema(ddl).table("t")
    kinds = {c.name: c.type for c in table.columns}
    assert kinds["k"] == ColumnType(TypeKind.INT)
    assert {kinds[n].to_postgres() for n in ("t0", "t3", "t6")} == {"time(6)"}
    assert {kinds[n].to_postgres() for n in ("s0", "s6")} == {"timestamp(6)"}


@pytest.mark.parametrize(
    ("ddl", "statement", "line", "column", "fragment"),
    [
        ("CREATE TABLE a.b (x int)", 1, 1, 25, "has no PRIMARY KEY"),
        ("CREATE TABLE a.b (x foo, PRIMARY KEY (x))", 1, 1, 21, "unknown type 'foo'"),
        (
            "CREATE TABLE a.b (x int, PRIMARY KEY (x));\nCREATE TABLE a.c (y int PRIMARY KEY (y))",
            2,
            2,
            25,
            "expected ',' or ')'",
        ),
        ("CREATE TABLE a.b (x char, PRIMARY KEY (x))", 1, 1, 25, "CHAR needs a length"),
        ("CREATE TABLE a.b (x varchar(0), PRIMARY KEY (x))", 1, 1, 29, "bad length 0"),
        ("CREATE TABLE a.b (x int, t time(7), PRIMARY KEY (x))", 1, 1, 33, "bad precision 7"),
        ("CREATE TABLE a.b (x int, t timestamp(), PRIMARY KEY (x))", 1, 1, 38, "a precision"),
        ("CREATE TABLE a.b (x int, PRIMARY KEY (y))", 1, 1, 42, "key column y is not a column"),
        ("CREATE TABLE a.b (x int, x int, PRIMARY KEY (x))", 1, 1, 49, "declared twice"),
        ("CREATE TABLE a.b (sys_from int, PRIMARY KEY (sys_from))", 1, 1, 56, "reserved"),
        ("CREATE TABLE b (x int, PRIMARY KEY (x))", 1, 1, 1, "names no datamart"),
        ("CREATE TABLE a.b (x int, PRIMARY KEY (x)) PARTITION BY x", 1, 1, 43, "PARTITION"),
        ("DROP TABLE a.b", 1, 1, 1, "expected CREATE"),
        ("CREATE VIEW a.v AS SELECT 1", 1, 1, 8, "expected TABLE or DATABASE"),
        (
            "CREATE TABLE a.b (x int, PRIMARY KEY (x));\n\n"
            "CREATE TABLE c.d (x int, PRIMARY KEY (x))",
            2,
            3,
            1,
            "not in datamart a",
        ),
        ("-- nothing but a comment", 0, 1, 1, "no CREATE TABLE"),
        ("CREATE TABLE a.b (x int, PRIMARY KEY (x)", 1, 1, 41, "expected ',' or ')'"),
    ],
)
def test_bad_ddl_names_statement_position_and_expectation(
    ddl: str, statement: int, line: int, column: int, fragment: str
) -> None:
    with pytest.raises(SchemaDefinitionError) as caught:
        parse_schema(ddl)
    error = caught.value
    assert (error.statement, error.line, error.column) == (statement, line, column), str(error)
    assert fragment in str(error)


def test_a_table_name_too_long_for_its_history_table_is_refused() -> None:
    name = "t" * 56
    with pytest.raises(SchemaDefinitionError, match="too long"):
        parse_schema(f"CREATE TABLE a.{name} (x int, PRIMARY KEY (x))")
    assert parse_schema(f"CREATE TABLE a.{name[:-1]} (x int, PRIMARY KEY (x))")


def test_unterminated_string_is_an_error_not_a_crash() -> None:
    with pytest.raises(SchemaDefinitionError, match="tokenize"):
        parse_schema("CREATE TABLE a.b (x int, PRIMARY KEY (x)) DATASOURCE_TYPE ('adb)")


def test_unknown_table_lookup_carries_the_protocol_code() -> None:
    with pytest.raises(UnknownTableError) as caught:
        parse_schema(ALL_TYPES_DDL).table("nope")
    assert caught.value.code == "UNKNOWN_TABLE"


def test_quote_ident_doubles_quotes() -> None:
    assert quote_ident('we"ird') == '"we""ird"'
    assert quote_ident("sales") == '"sales"'
    with pytest.raises(ValueError, match="NUL"):
        quote_ident("a\x00b")


CONTROL_AND_DOLLAR = "$" + "".join(chr(c) for c in (*range(32), *range(127, 160)))
names = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True) | st.text(
    st.characters(codec="utf-8", exclude_characters=CONTROL_AND_DOLLAR),
    min_size=1,
    max_size=12,
)
column_types = st.sampled_from(
    [ColumnType(k) for k in TypeKind if k is not TypeKind.CHAR]
) | st.builds(ColumnType, st.sampled_from([TypeKind.CHAR, TypeKind.VARCHAR]), st.integers(1, 9999))


@st.composite
def schemas(draw: st.DrawFn) -> LogicalSchema:
    table_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    tables = []
    for table_name in table_names:
        column_names = draw(
            st.lists(
                names.filter(lambda n: n not in ("sys_from", "sys_to", "sys_op")),
                min_size=1,
                max_size=6,
                unique=True,
            )
        )
        pk = column_names[: draw(st.integers(1, len(column_names)))]
        columns = tuple(
            Column(name=n, type=draw(column_types), not_null=n in pk or draw(st.booleans()))
            for n in column_names
        )
        tables.append(Table(name=table_name, columns=columns, primary_key=tuple(pk)))
    return LogicalSchema(datamart=draw(names), tables=tuple(tables))


@given(schemas())
def test_rendered_ddl_reads_back_to_the_same_schema(schema: LogicalSchema) -> None:
    assert parse_schema(schema.to_ddl()) == schema


def test_copies_of_a_schema_are_validated_and_forget_cached_lookups() -> None:
    schema = parse_schema(ALL_TYPES_DDL.replace("edge.all_types", "edge.a") + ALL_TYPES_DDL)
    assert schema.has_table("a")  # fills the cached lookup
    only = schema.model_copy(update={"tables": (schema.table("all_types"),)})
    assert not only.has_table("a")
    with pytest.raises(UnknownTableError):
        only.table("a")
    with pytest.raises(ValueError, match="declares a table twice"):
        schema.model_copy(update={"tables": (ALL_TYPES, ALL_TYPES)})


@pytest.mark.parametrize(
    ("ddl", "problem"),
    [
        ('CREATE TABLE "a$podd$b" (id BIGINT, PRIMARY KEY (id))', "'$'"),
        ('CREATE TABLE t (id BIGINT, "x\x01y" INT, PRIMARY KEY (id))', "'\\x01'"),
        ('CREATE TABLE t (id BIGINT, "new\nline" INT, PRIMARY KEY (id))', "'\\n'"),
        (f'CREATE TABLE t (id BIGINT, "{"c" * 64}" INT, PRIMARY KEY (id))', "longer than 63"),
        ('CREATE TABLE t (id BIGINT, "ж" INT, "$1" INT, PRIMARY KEY (id))', "'$'"),
    ],
)
def test_names_that_cannot_be_replica_identifiers_are_refused(ddl: str, problem: str) -> None:
    """A `$` could end the `$podd$`-quoted body of a table's as-of function; a control
    character or a name PostgreSQL would cut short has no place in the replica either.
    (The same parser reads schema files, the replica's catalog and backup changelogs.)"""
    with pytest.raises(SchemaDefinitionError, match=re.escape(problem)):
        parse_schema(ddl, "dm")


def test_a_datamart_name_with_a_dollar_is_refused() -> None:
    with pytest.raises(SchemaDefinitionError, match="datamart"):
        parse_schema("CREATE TABLE t (id BIGINT, PRIMARY KEY (id))", "dm$x")
