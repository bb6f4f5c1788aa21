"""Signatures of protocol messages: any change of key or value, or another secret, fails."""

from __future__ import annotations

import pytest

from protocol.signing import (
    HEADER,
    KEY_ID_HEADER,
    header_value,
    is_authentic,
    key_id,
    signature,
    signed_by,
    signed_headers,
)

SECRET = b"0123456789abcdef-shared"


def test_a_signed_message_checks_and_any_change_does_not() -> None:
    headers = signed_headers(SECRET, b"key", b"value")
    assert headers == [
        (HEADER, signature(SECRET, b"key", b"value")),
        (KEY_ID_HEADER, key_id(SECRET)),
    ]
    assert is_authentic(SECRET, b"key", b"value", headers)
    assert not is_authentic(SECRET, b"key", b"valuE", headers)
    assert not is_authentic(SECRET, b"kez", b"value", headers)
    assert not is_authentic(b"another secret 123", b"key", b"value", headers)
    assert not is_authentic(SECRET, b"key", b"value", [])
    assert not is_authentic(SECRET, b"key", b"value", None)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((None, b""), (b"", None)),  # absent is not empty
        ((b"ab", b"c"), (b"a", b"bc")),  # where the key ends is signed
        ((None, None), (b"", b"")),
    ],
)
def test_messages_that_concatenate_alike_sign_differently(
    a: tuple[bytes | None, bytes | None], b: tuple[bytes | None, bytes | None]
) -> None:
    assert signature(SECRET, *a) != signature(SECRET, *b)


def test_headers_in_faust_and_aiokafka_forms_the_last_one_counting() -> None:
    good = signature(SECRET, b"k", b"v")
    assert header_value({HEADER: good}) == good
    assert header_value([("other", b"x"), (HEADER, b"bad"), (HEADER, good)]) == good
    assert header_value([(HEADER.encode(), good)]) == good
    assert header_value([(HEADER, None)]) is None
    assert not is_authentic(SECRET, b"k", b"v", [(HEADER, good), (HEADER, b"v1=00")])


def test_without_a_secret_nothing_is_signed_and_everything_reads() -> None:
    assert signed_headers(None, b"k", b"v") == []
    assert is_authentic(None, b"k", b"v", None)


def test_a_key_being_rotated_out_is_still_accepted_and_never_signs() -> None:
    new, old = b"the-new-key-of-enough-length", b"the-old-key-of-enough-length"
    by_old = [(HEADER, signature(old, b"k", b"v"))]
    assert not is_authentic(new, b"k", b"v", by_old)  # before: a rotation dropped it
    assert is_authentic(new, b"k", b"v", by_old, previous=old)
    assert signed_headers(new, b"k", b"v")[0] == (HEADER, signature(new, b"k", b"v"))
    assert not is_authentic(new, b"k", b"v", [(HEADER, signature(b"x" * 20, b"k", b"v"))], old)


def test_the_key_named_by_a_message_is_the_one_checked_and_reported() -> None:
    new, old = b"the-new-key-of-enough-length", b"the-old-key-of-enough-length"
    by_new, by_old = signed_headers(new, b"k", b"v"), signed_headers(old, b"k", b"v")
    assert signed_by(new, b"k", b"v", by_new, previous=old) == "current"
    assert signed_by(new, b"k", b"v", by_old, previous=old) == "previous"
    assert signed_by(new, b"k", b"v", by_old) is None
    # A signature by one key that names the other is refused.
    mislabelled = [by_old[0], (KEY_ID_HEADER, key_id(new))]
    assert signed_by(new, b"k", b"v", mislabelled, previous=old) is None
    assert key_id(new) != key_id(old)
    assert len(key_id(new)) == 16
