"""Which open transfers go when a bound is reached: the tracker's eviction policy, pure.

The tracker (`replica_agent.tracker`) owns the transfers and finishes those named here; this
module only chooses them, from what the transfers show:

* the open-transfer slots of a datamart and the staging budget: the transfers still
  receiving go least far along first (fewest chunks), the oldest of those first, and a
  transfer of the delta its datamart expects after all others. A delta well on its way is
  kept over transfers that have barely begun (junk, or a flood of new ones), and the delta
  the replica waits for over anything else. Transfers handed to the loader count toward
  the slots (their files are still staged) but are never chosen. Replays take neither.
* the staging disk: its free room (`ChunkSpool.room`) caps the budget too, but never
  evicts the transfer whose chunk arrives; when a write fails on a full disk, the transfer
  least far along other than the refused chunks' own is evicted (`for_full_disk`).
* replays (transfers of applied deltas, which stage nothing) have a bound of their own:
  the oldest goes first.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from replica_agent.admission import TransferLimits
from replica_agent.transfers import Transfer


def to_make_room(
    open_transfers: Collection[Transfer],
    transfer: Transfer,
    incoming: int,
    *,
    opened: bool,
    limits: TransferLimits,
    expected: Callable[[str], int],
    disk_budget: int | None = None,
) -> list[Transfer]:
    """The transfers to evict, in order, so that `transfer`'s new chunk of `incoming`
    bytes fits (`opened`: the chunk opens it, so it is not among `open_transfers` yet and
    may itself be the one to go). `disk_budget`: what the staging disk can hold of chunk
    bodies now; others are evicted to keep it, never `transfer` itself (if it alone does
    not fit, its write fails and intake waits for the disk)."""
    receiving = [t for t in open_transfers if t.evictable and not t.replay]
    if opened:
        receiving.append(transfer)
    # Stable: the oldest first among equals.
    receiving.sort(key=lambda t: (t.delta_num == expected(t.datamart), t.chunks_received))
    chosen: list[Transfer] = []
    if opened:
        mine = [t for t in open_transfers if t.datamart == transfer.datamart]
        held = sum(1 for t in mine if not t.evictable and not t.replay)
        same = [t for t in receiving if t.datamart == transfer.datamart]
        while same and held + len(same) > limits.max_open_transfers:
            victim = same.pop(0)
            receiving.remove(victim)
            chosen.append(victim)
    total = sum(t.staged_bytes for t in open_transfers) + incoming
    while total > limits.max_staged_bytes and receiving:
        victim = receiving.pop(0)
        total -= victim.staged_bytes + (incoming if victim is transfer else 0)
        chosen.append(victim)
    others = [t for t in receiving if t is not transfer]
    while disk_budget is not None and total > disk_budget and others:
        victim = others.pop(0)
        total -= victim.staged_bytes
        chosen.append(victim)
    return chosen


def for_full_disk(
    open_transfers: Collection[Transfer], keep: Collection[str], expected: Callable[[str], int]
) -> Transfer | None:
    """The one transfer to evict when the staging disk refused a write: the one least far
    along that is still receiving, the expected delta's last, never one of `keep` (those the
    refused chunks belong to). None: there is none to evict; intake waits for the disk."""
    receiving = [
        t
        for t in open_transfers
        if t.evictable and not t.replay and t.staged_bytes and t.request_id not in keep
    ]
    receiving.sort(key=lambda t: (t.delta_num == expected(t.datamart), t.chunks_received))
    return receiving[0] if receiving else None


def replays_over_bound(
    open_transfers: Collection[Transfer], limits: TransferLimits
) -> list[Transfer]:
    """The replays to drop, oldest first, to keep `max_replays` and `max_replay_chunks`."""
    replays = [t for t in open_transfers if t.replay and t.evictable]
    chunks = sum(t.chunks_received for t in replays)
    chosen: list[Transfer] = []
    while replays and (len(replays) > limits.max_replays or chunks > limits.max_replay_chunks):
        oldest = replays.pop(0)
        chunks -= oldest.chunks_received
        chosen.append(oldest)
    return chosen
