"""Which parts of a transfer still receiving are ready for prestaging (`spark_loader.prestage`).

The tracker's `take_prestage` asks this, for the transfer it owns: the offer bookkeeping on
the transfer (`prestage_offered`, `pieces_offered`, `staged_prefix`) changes only here, on
the tracker's behalf.
"""

from __future__ import annotations

from protocol.chunk_range import ChunkRange
from replica_agent.transfers import Offer, Transfer


def take_offers(transfer: Transfer, min_bytes: int = 1, piece_bytes: int = 0) -> dict[int, Offer]:
    """What of a transfer still receiving is newly ready for prestaging, per stream
    number: from now on offered. A stream complete is offered once (if its bodies
    decode to at least `min_bytes`: an empty or small stream costs the load less than a
    prestage's round trips), the chunks after its last piece if it was offered in
    pieces. With `piece_bytes`, a stream not complete is offered in pieces: its chunks
    staged without a gap since the last piece, once they decode to about that much."""
    if not transfer.evictable or transfer.complete:
        return {}
    offers: dict[int, Offer] = {}
    for number, stream in sorted(transfer.streams.items()):
        if number in transfer.prestage_offered:
            continue
        after = transfer.pieces_offered.get(number, 0)
        size = stream.decoded_bytes
        if stream.complete:
            transfer.prestage_offered.add(number)
            assert stream.last is not None
            if after:  # the chunks after its last piece
                tail = None if size is None else size * (stream.last - after) // stream.last
                offers[number] = Offer(ChunkRange(after + 1, stream.last, True), tail)
            elif size is None or size >= min_bytes:
                offers[number] = Offer(ChunkRange.whole(stream.last), size)
            continue
        if not piece_bytes or size is None or not stream.chunks:
            continue  # (a recovered stream is not measured: no pieces)
        prefix = transfer.staged_prefix.get(number, 0)
        while prefix + 1 in stream.chunks:
            prefix += 1
        transfer.staged_prefix[number] = prefix
        share = size * (prefix - after) // len(stream.chunks)
        if share >= piece_bytes:
            transfer.pieces_offered[number] = prefix
            offers[number] = Offer(ChunkRange(after + 1, prefix, False), share)
    return offers
