"""`content_digest`: a container's content without its random sync marker."""

from __future__ import annotations

from protocol.body_writer import encode_body
from protocol.ocf import OcfLimits, content_digest
from protocol.schema import LogicalSchema


def test_the_same_rows_written_twice_have_one_digest_and_others_another(
    marketing: LogicalSchema,
) -> None:
    sales = marketing.table("sales")
    rows = [(i, 0, "P", 1, 1, None, 0) for i in range(50)]
    first, second = encode_body(sales, rows), encode_body(sales, rows)
    limits = OcfLimits()
    assert first != second  # the sync markers are drawn anew
    assert content_digest(first, limits) == content_digest(second, limits)
    other = encode_body(sales, [*rows[:-1], (99, 0, "Q", 1, 1, None, 0)])
    assert content_digest(other, limits) != content_digest(first, limits)
    assert content_digest(b"not a container", limits) != content_digest(b"", limits)
    assert content_digest(None, limits) == content_digest(b"", limits)
