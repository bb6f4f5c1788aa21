"""Read Prostore DDL (`CREATE TABLE db.t (...) PRIMARY KEY ... DISTRIBUTED BY ...`).

sqlglot's tokenizer does the lexing (comments, quoted identifiers, string literals, exact
offsets); sqlglot's parser does not serve here, since it falls back to an opaque command on
`DISTRIBUTED BY` / `DATASOURCE_TYPE` and folds INT32 into INT. The grammar below is
Prostore's, read over those tokens:

    file       := [statement] (";" [statement])*
    statement  := CREATE DATABASE [IF NOT EXISTS] name
                | CREATE TABLE [IF NOT EXISTS] [name "."] name "(" element ("," element)* ")"
                  { DISTRIBUTED BY "(" names ")" | SHARDING_KEY "(" names ")"
                  | DATASOURCE_TYPE "(" values ")" }
    element    := PRIMARY KEY "(" names ")" | name type [NOT NULL | NULL]
    type       := word ["(" integer ")"]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import Token, TokenType
from sqlglot.tokens import Tokenizer

from protocol.errors import SchemaDefinitionError
from protocol.schema import Column, LogicalSchema, Table
from protocol.types import (
    LENGTH_KINDS,
    MAX_PRECISION,
    PRECISION_KINDS,
    TYPE_ALIASES,
    ColumnType,
    TypeKind,
)

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")
_TYPE_NAMES = {k.value: k for k in TypeKind} | TYPE_ALIASES
_MAX_VARCHAR = 10_485_760  # PostgreSQL's limit for varchar(n)


@dataclass
class _Parsed:
    datamarts: list[tuple[str, int]]
    tables: list[tuple[str | None, Table, int]]


class _StatementParser:
    """Recursive descent over the tokens of one statement."""

    def __init__(self, text: str, tokens: Sequence[Token], number: int) -> None:
        self.text = text
        self.tokens = tokens
        self.number = number
        self.i = 0

    # --- token helpers -------------------------------------------------------------------
    def error(self, message: str, expected: str | None = None) -> SchemaDefinitionError:
        if self.i < len(self.tokens):
            offset = self.tokens[self.i].start
        else:
            offset = self.tokens[-1].end + 1 if self.tokens else 0
        line, column = _line_col(self.text, offset)
        return SchemaDefinitionError(
            message, statement=self.number, line=line, column=column, expected=expected
        )

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def _found(self) -> str:
        tok = self.peek()
        return "end of statement" if tok is None else repr(tok.text)

    def _match_words(self, words: Sequence[str]) -> int:
        """How many tokens spell `words` from here (0 if they don't).

        The tokenizer fuses some keyword pairs into one token ("PRIMARY KEY"), so words are
        matched across token boundaries.
        """
        wanted = list(words)
        used = 0
        while wanted:
            tok = self.peek(used)
            if tok is None or tok.token_type is TokenType.IDENTIFIER:
                return 0
            parts = tok.text.upper().split()
            if parts != wanted[: len(parts)]:
                return 0
            wanted = wanted[len(parts) :]
            used += 1
        return used

    def at_word(self, *words: str) -> bool:
        return self._match_words(words) > 0

    def expect_word(self, *words: str) -> None:
        if not self.accept_word(*words):
            raise self.error(f"found {self._found()}", expected=" ".join(words))

    def accept_word(self, *words: str) -> bool:
        used = self._match_words(words)
        self.i += used
        return used > 0

    def expect(self, kind: TokenType, shown: str) -> Token:
        tok = self.peek()
        if tok is None or tok.token_type is not kind:
            raise self.error(f"found {self._found()}", expected=shown)
        self.i += 1
        return tok

    def accept(self, kind: TokenType) -> bool:
        tok = self.peek()
        if tok is not None and tok.token_type is kind:
            self.i += 1
            return True
        return False

    def name(self, what: str) -> str:
        """An identifier: quoted keeps its case, unquoted folds to lower case."""
        tok = self.peek()
        if tok is not None and tok.token_type is TokenType.IDENTIFIER:
            self.i += 1
            if not tok.text:
                raise self.error("empty quoted identifier", expected=what)
            return tok.text
        if tok is not None and _WORD.match(tok.text):
            self.i += 1
            return tok.text.lower()
        raise self.error(f"found {self._found()}", expected=what)

    def names(self, what: str) -> tuple[str, ...]:
        self.expect(TokenType.L_PAREN, "(")
        out = [self.name(what)]
        while self.accept(TokenType.COMMA):
            out.append(self.name(what))
        self.expect(TokenType.R_PAREN, ")")
        return tuple(out)

    # --- grammar -------------------------------------------------------------------------
    def statement(self, into: _Parsed) -> None:
        self.expect_word("CREATE")
        if self.accept_word("DATABASE"):
            self.accept_word("IF", "NOT", "EXISTS")
            into.datamarts.append((self.name("a datamart name"), self.number))
        elif self.accept_word("TABLE"):
            self.accept_word("IF", "NOT", "EXISTS")
            datamart, table = self.create_table()
            into.tables.append((datamart, table, self.number))
        else:
            raise self.error(f"found {self._found()}", expected="TABLE or DATABASE")
        if self.peek() is not None:
            raise self.error(f"found {self._found()} after the statement", expected="';'")

    def create_table(self) -> tuple[str | None, Table]:
        first = self.name("a table name")
        datamart: str | None = None
        name = first
        if self.accept(TokenType.DOT):
            datamart, name = first, self.name("a table name after '.'")
        self.expect(TokenType.L_PAREN, "(")
        columns: list[Column] = []
        primary_key: tuple[str, ...] | None = None
        while True:
            if self.at_word("PRIMARY", "KEY"):
                if primary_key is not None:
                    raise self.error("a second PRIMARY KEY")
                self.accept_word("PRIMARY", "KEY")
                primary_key = self.names("a primary key column")
            else:
                columns.append(self.column())
            if self.accept(TokenType.COMMA):
                continue
            self.expect(TokenType.R_PAREN, "',' or ')'")
            break
        distributed_by: tuple[str, ...] = ()
        while self.peek() is not None:
            if self.accept_word("DISTRIBUTED", "BY") or self.accept_word("SHARDING_KEY"):
                distributed_by = self.names("a distribution column")
            elif self.accept_word("DATASOURCE_TYPE"):
                self.datasource_types()
            else:
                raise self.error(
                    f"found {self._found()}", expected="DISTRIBUTED BY, DATASOURCE_TYPE or ';'"
                )
        if primary_key is None:
            raise self.error(f"table {name} has no PRIMARY KEY", expected="PRIMARY KEY (...)")
        pk = set(primary_key)
        # PostgreSQL makes primary key columns NOT NULL; so does the replica.
        columns = [c.model_copy(update={"not_null": True}) if c.name in pk else c for c in columns]
        try:
            table = Table(
                name=name,
                columns=tuple(columns),
                primary_key=primary_key,
                distributed_by=distributed_by,
            )
        except ValidationError as exc:
            raise self.error(_first_message(exc)) from None
        return datamart, table

    def datasource_types(self) -> None:
        self.expect(TokenType.L_PAREN, "(")
        while True:
            tok = self.peek()
            if tok is None or not (tok.token_type is TokenType.STRING or _WORD.match(tok.text)):
                raise self.error(f"found {self._found()}", expected="a datasource type")
            self.i += 1
            if not self.accept(TokenType.COMMA):
                break
        self.expect(TokenType.R_PAREN, ")")

    def column(self) -> Column:
        name = self.name("a column name or PRIMARY KEY")
        type_tok = self.peek()
        if type_tok is None or not _WORD.match(type_tok.text):
            raise self.error(f"found {self._found()}", expected=f"a type for column {name}")
        kind = _TYPE_NAMES.get(type_tok.text.upper())
        if kind is None:
            known = ", ".join(sorted(_TYPE_NAMES))
            raise self.error(f"unknown type {type_tok.text!r}", expected=f"one of {known}")
        self.i += 1
        length: int | None = None
        if kind in LENGTH_KINDS and self.accept(TokenType.L_PAREN):
            tok = self.expect(TokenType.NUMBER, "a length")
            if not tok.text.isdigit() or not 1 <= int(tok.text) <= _MAX_VARCHAR:
                self.i -= 1
                raise self.error(f"bad length {tok.text}", expected=f"1..{_MAX_VARCHAR}")
            length = int(tok.text)
            self.expect(TokenType.R_PAREN, ")")
        elif kind is TypeKind.CHAR:
            raise self.error(f"CHAR needs a length (column {name})", expected="(n)")
        elif kind in PRECISION_KINDS and self.accept(TokenType.L_PAREN):
            tok = self.expect(TokenType.NUMBER, "a precision")
            if not tok.text.isdigit() or int(tok.text) > MAX_PRECISION:
                self.i -= 1
                raise self.error(f"bad precision {tok.text}", expected=f"0..{MAX_PRECISION}")
            self.expect(TokenType.R_PAREN, ")")
        not_null = False
        if self.accept_word("NOT", "NULL"):
            not_null = True
        else:
            self.accept_word("NULL")
        try:
            return Column(name=name, type=ColumnType(kind, length), not_null=not_null)
        except ValidationError as exc:
            raise self.error(_first_message(exc)) from None


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _first_message(exc: ValidationError) -> str:
    msg = str(exc.errors()[0].get("msg", exc))
    return msg.removeprefix("Value error, ")


def _split_statements(tokens: Sequence[Token]) -> list[list[Token]]:
    statements: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.token_type is TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(tok)
    return [s for s in statements if s]


def parse_schema(text: str, datamart: str | None = None) -> LogicalSchema:
    """Read a file of Prostore DDL into the logical schema of one datamart.

    Tables may be qualified (`db.t`); unqualified ones belong to `datamart`, or to the
    file's `CREATE DATABASE`. Every table must belong to the same datamart.
    """
    try:
        tokens = Tokenizer().tokenize(text)
    except TokenError as exc:
        found = re.search(r"Line (\d+), Col: (\d+)", str(exc))
        line, col = (int(found[1]), int(found[2])) if found else (1, 1)
        raise SchemaDefinitionError(
            f"cannot tokenize: {str(exc).splitlines()[0]}", statement=1, line=line, column=col
        ) from None
    parsed = _Parsed(datamarts=[], tables=[])
    statements = _split_statements(tokens)
    for number, statement_tokens in enumerate(statements, start=1):
        _StatementParser(text, statement_tokens, number).statement(parsed)
    declared = datamart or (parsed.datamarts[0][0] if parsed.datamarts else None)
    for name, number in parsed.datamarts:
        if declared is not None and name != declared:
            raise _whole_statement_error(
                text, statements[number - 1], number, f"datamart {name} is not {declared}"
            )
    tables: list[Table] = []
    for table_datamart, table, number in parsed.tables:
        owner = table_datamart or declared
        if owner is None:
            raise _whole_statement_error(
                text,
                statements[number - 1],
                number,
                f"table {table.name} names no datamart",
                expected="db.table",
            )
        if declared is None:
            declared = owner
        if owner != declared:
            raise _whole_statement_error(
                text,
                statements[number - 1],
                number,
                f"table {owner}.{table.name} is not in datamart {declared}",
            )
        tables.append(table)
    if declared is None or not tables:
        raise SchemaDefinitionError(
            "no CREATE TABLE statement",
            statement=len(statements),
            line=1,
            column=1,
            expected="CREATE TABLE db.table (...)",
        )
    try:
        return LogicalSchema(datamart=declared, tables=tuple(tables))
    except ValidationError as exc:
        raise SchemaDefinitionError(
            _first_message(exc), statement=len(statements), line=1, column=1
        ) from None


def _whole_statement_error(
    text: str, tokens: Sequence[Token], number: int, message: str, expected: str | None = None
) -> SchemaDefinitionError:
    line, column = _line_col(text, tokens[0].start)
    return SchemaDefinitionError(
        message, statement=number, line=line, column=column, expected=expected
    )
