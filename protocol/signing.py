"""Origins proven: every message of the protocol may carry an HMAC of its key and value.

A replica and its origins share a secret (`PODD_ORIGIN_KEY`). Each message is sent with a
header `podd-signature: v1=<hex HMAC-SHA256>` computed over its key and value (each length-
prefixed; an absent key or value is distinct from an empty one). With a secret configured,
the replica reads only `delta.in` and `delta.rq` messages whose signature checks, before
anything of them is staged or answered; the origins, only answers whose signature checks
(a forged `OK` would make an origin skip a delta). Without one, nothing is signed or checked.

A key is rotated without dropping what is in flight: on each peer in turn the new key is set
as `PODD_ORIGIN_KEY` and the old one as `PODD_ORIGIN_KEY_PREVIOUS` (accepted, never used to
sign); the previous key is removed once every peer signs with the new one.

The topic is not signed: a mirrored topic (MirrorMaker's `dc1.delta.in`) keeps its
messages valid. A signed message stays valid as long as Kafka keeps it, so a replay must
cost nothing: a chunk of a finished transfer is dropped, and a transfer of a delta already
applied stages nothing and takes no slot (`replica_agent.tracker`).
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
    previous: bytes | None = None,
) -> bool:
    """Whether the message's signature checks (always, without a secret). `previous`: the
    key being rotated out, still accepted (never used to sign), so that messages signed
    before every peer took the new key are not dropped."""
    if secret is None:
        return True
    given = header_value(headers)
    if given is None:
        return False
    return any(
        hmac.compare_digest(given, signature(s, key, value))
        for s in (secret, previous)
        if s is not None
    )
