"""Correct origins of unusual habits, each one the contract allows: proof that
`podd-conformance origin` does not fail an origin for what the contract permits (each must
pass every scenario).

    python -m conformance.origins.variants NAME run --broker ... (podd-origin's `run` flags)

* `twice`: every chunk is produced twice, as a producer's retry without idempotence does;
* `re-encode`: a chunk the replica misses is encoded anew when sent again (the same rows
  in a container with a new sync marker, as a writer that does not keep its bodies does);
* `whole-again`: after `INCOMPLETE_DELTA`, the whole delta goes again under a new
  requestId (the contract says the origin *may* send just the missing chunks).

Each is `podd-origin run` with one habit changed. They are test tools, never an origin to use.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import origin.session as session_module
from conformance.origins.mutants import drive, tool_main
from origin.client import OriginClient
from protocol.framing import Chunk
from protocol.ocf import SYNC_SIZE, OcfLimits, read_header

VARIANTS = {
    "twice": "every chunk produced twice (a producer's retry)",
    "re-encode": "a missing chunk encoded anew (a new sync marker) when sent again",
    "whole-again": "the whole delta under a new requestId after INCOMPLETE_DELTA",
}


class TwiceClient(OriginClient):
    async def send_chunks(self, chunks: Iterable[Chunk], **options: Any) -> int:
        items = list(chunks)
        return await super().send_chunks([c for c in items for _ in (0, 1)], **options)


def new_sync(body: bytes) -> bytes:
    """The same container with another sync marker: the same rows, other bytes."""
    if not body:
        return body
    header = read_header(body, OcfLimits())
    fresh = os.urandom(SYNC_SIZE)
    return (
        body[: header.data_start - SYNC_SIZE]
        + fresh
        + body[header.data_start :].replace(header.sync, fresh)
    )


async def _drive(name: str, argv: Sequence[str]) -> int:
    if name == "re-encode":
        named_by = session_module.chunks_missing

        def anew(chunks: Iterable[Chunk], missing: str | Iterable[str]) -> list[Chunk]:
            return [replace(c, body=new_sync(c.body)) for c in named_by(chunks, missing)]

        session_module.chunks_missing = anew
    elif name == "whole-again":
        # Every INCOMPLETE_DELTA taken as "removed": the driver starts the delta over.
        vars(session_module)["says_removed"] = lambda message: True
    client_class = TwiceClient if name == "twice" else OriginClient
    _, sent = await drive(argv, client_class=client_class)
    print(f"{sent} delta(s) sent by the {name} variant")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main("variant", list(VARIANTS), argv, _drive)


if __name__ == "__main__":
    raise SystemExit(main())
