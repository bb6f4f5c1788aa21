"""Origins proven: every message of the protocol may carry an HMAC of its key and value.

A replica and its origins share a secret (`PODD_ORIGIN_KEY`). Each message is sent with a
header `podd-signature: v1=<hex HMAC-SHA256>` computed over its key and value (each length-
prefixed; an absent key or value is distinct from an empty one). With a secret configured,
the replica reads only `delta.in` and `delta.rq` messages whose signature checks, before
anything of them is staged or answered; the origins, only answers whose signature checks
(a forged `OK` would make an origin skip a delta). Without one, nothing is signed or checked.

A key is rotated without dropping what is in flight: on each peer in turn the new key is set
as `PODD_ORIGIN_KEY` and the old one as `PODD_ORIGIN_KEY_PREVIOUS` (accepted, never used to
sign); the previous key is removed once every peer signs with the new one. Each message
names its key by fingerprint (`podd-key-id`), so the agent counts what each key signed
(`podd_signed_messages_total{key}`) and an operator sees when the previous key went unused.

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
#: Which key signed: a fingerprint of it (`key_id`), so a reader checks the one key named
#: and an operator sees, during a rotation, when the previous key stopped being used.
KEY_ID_HEADER = "podd-key-id"
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


def key_id(secret: bytes) -> bytes:
    """A key's fingerprint: 16 hex digits of a hash of it (not of any message; it names
    the key, it proves nothing)."""
    return hashlib.sha256(b"podd-key-id:" + secret).hexdigest()[:16].encode()


def signed_headers(secret: bytes | None, key: bytes | None, value: bytes | None) -> list[Any]:
    """The headers to send with a message: the signature and the key's fingerprint, or
    none without a secret."""
    if secret is None:
        return []
    return [(HEADER, signature(secret, key, value)), (KEY_ID_HEADER, key_id(secret))]


def header_value(
    headers: Mapping[Any, Any] | Iterable[Any] | None, name: str = HEADER
) -> bytes | None:
    """The header `name` among `headers` (Faust's dict or aiokafka's pairs; the last one if
    repeated), or None."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found = None
    for header, value in pairs:
        if header in (name, name.encode()) and isinstance(value, bytes | bytearray):
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
    return signed_by(secret, key, value, headers, previous) is not None


def signed_by(
    secret: bytes,
    key: bytes | None,
    value: bytes | None,
    headers: Mapping[Any, Any] | Iterable[Any] | None,
    previous: bytes | None = None,
) -> str | None:
    """Which key the message's signature checks with: "current", "previous", or None. A
    message naming a key (`KEY_ID_HEADER`) is checked with that key only; one naming none
    (a peer of an earlier version) with each."""
    given = header_value(headers)
    if given is None:
        return None
    named = header_value(headers, KEY_ID_HEADER)
    for which, candidate in (("current", secret), ("previous", previous)):
        if candidate is None or (named is not None and named != key_id(candidate)):
            continue
        if hmac.compare_digest(given, signature(candidate, key, value)):
            return which
    return None
