"""Origins proven: every message of the protocol may carry an HMAC of its key and value.

A replica and its origins share a secret (`PODD_ORIGIN_KEY`). Each message is sent with a
header `podd-signature: v1=<hex HMAC-SHA256>` computed over its key and value (each length-
prefixed; an absent key or value is distinct from an empty one). With a secret configured,
the replica reads only `delta.in` and `delta.rq` messages whose signature checks, before
anything of them is staged or answered; the origins, only answers whose signature checks
(a forged `OK` would make an origin skip a delta). Without one, nothing is signed or checked.

The topic is not signed: a mirrored topic (MirrorMaker's `dc1.delta.in`) keeps its
messages valid. A signed message replayed is still the same message: its transfer is
already finished (or its chunk a duplicate).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

HEADER = "podd-signature"
_PREFIX = b"v1="
_ABSENT = b"\xff\xff\xff\xff"


def signature(secret: bytes, key: bytes | None, value: bytes | None) -> bytes:
    """The header value for a message of `key` and `value`."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in (key, value):
        if part is None:
            mac.update(_ABSENT)
        else:
            mac.update(len(part).to_bytes(4, "big"))
            mac.update(part)
    return _PREFIX + mac.hexdigest().encode()


def signed_headers(secret: bytes | None, key: bytes | None, value: bytes | None) -> list[Any]:
    """The headers to send with a message: the signature, or none without a secret."""
    return [] if secret is None else [(HEADER, signature(secret, key, value))]


def header_value(headers: Mapping[Any, Any] | Iterable[Any] | None) -> bytes | None:
    """The signature header among `headers` (Faust's dict or aiokafka's pairs; the last
    one if repeated), or None."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found = None
    for name, value in pairs:
        if name in (HEADER, HEADER.encode()) and isinstance(value, bytes | bytearray):
            found = bytes(value)
    return found


def is_authentic(
    secret: bytes | None,
    key: bytes | None,
    value: bytes | None,
    headers: Mapping[Any, Any] | Iterable[Any] | None,
) -> bool:
    """Whether the message's signature checks (always, without a secret)."""
    if secret is None:
        return True
    given = header_value(headers)
    return given is not None and hmac.compare_digest(given, signature(secret, key, value))
