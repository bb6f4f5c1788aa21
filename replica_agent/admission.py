"""What the tracker decides about a chunk or a transfer, and the bounds it keeps.

`TransferTracker.admit` answers a chunk with an `Admission` (`Accepted`, `Rejected` or
`Dropped`), `TransferTracker.decide` a complete transfer with a `Decision`; `TransferLimits`
are its bounds, each an agent setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from protocol.errors import ErrorCode
from protocol.ocf import OcfLimits
from replica_agent.applied_window import WINDOW
from replica_agent.transfers import Transfer, TransferFraming

GiB = 2**30


@dataclass(frozen=True)
class TransferLimits:
    """The tracker's bounds; each is an agent setting (`PODD_MAX_*`)."""

    max_chunk_number: int = 1_000_000
    max_open_transfers: int = 8  # per datamart, still receiving
    max_staged_bytes: int = 8 * GiB  # chunk bodies of open transfers, in all
    max_missing_items: int = 100
    max_name_chars: int = 256  # requestId, datamart, tableName
    max_subscription_chars: int = 65_536
    #: requestIds remembered as answered, in memory and (as sent answers) on disk alike
    max_finished: int = 10_000
    #: A delta dated further ahead of this replica's clock is refused (None: no limit): a
    #: date of 9999-12-31 applied would make every later delta a DELTA_CONFLICT.
    max_date_skew: timedelta | None = timedelta(days=1)
    #: Transfers of deltas already applied (replays: nothing staged, answered from the
    #: registry once complete), in all, and the chunk numbers they hold in memory.
    max_replays: int = 16
    max_replay_chunks: int = 100_000
    #: Dates of this many recent applied deltas are kept in memory per datamart.
    applied_window: int = WINDOW
    body: OcfLimits = field(default_factory=OcfLimits)


@dataclass(frozen=True)
class Accepted:
    """The chunk fits. `opened`: it opened the transfer (stage its directory); `new`: stage
    its body; `stream_changed`: persist the stream's state."""

    transfer: Transfer
    opened: bool
    new: bool
    stream_changed: bool
    completed: bool


@dataclass(frozen=True)
class Rejected:
    """Answer the transfer ERROR with `code`; it is finished. `framing`: the transfer's
    own (from its first chunk) when it has one, else the rejected chunk's."""

    framing: TransferFraming
    code: ErrorCode
    message: str


@dataclass(frozen=True)
class Dropped:
    """Nothing to do: a chunk of a finished or sealed transfer, or an implausible key, or
    one whose replay was dropped to keep the bound on replays."""

    request_id: str
    reason: Literal["finished", "sealed", "oversize", "evicted", "replay"] = "finished"


Admission = Accepted | Rejected | Dropped


@dataclass(frozen=True)
class Decision:
    """What to do with a complete transfer: load it, answer its stored result, or reject."""

    action: Literal["load", "answer-stored", "reject"]
    code: ErrorCode | None = None
    message: str = ""
