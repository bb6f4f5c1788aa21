"""The blocks of columns a cutter on arrays keeps while changes held point into them
(`HeldChanges.block`), and the read batches' text buffers they pin: one keeper for both
cutters on arrays (`qlik_array_cutter`, `dataworks_array_cutter`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from podd_cdc.qlik_delta_rows import Block, TableBlock
from podd_cdc.qlik_held import HeldChanges


class HeldBlocks:
    def __init__(self) -> None:
        self.blocks: dict[int, Block] = {}
        self._next = 0
        self._fresh: list[int] = []  # blocks kept since the last feed
        #: The batches' text buffers the blocks point into: id → (bytes, blocks using it).
        self._buffers: dict[int, tuple[int, int]] = {}

    @property
    def pinned_bytes(self) -> int:
        """Bytes of the read batches' text kept for the changes held (a batch's whole text
        stays while one change of it is held)."""
        return sum(size for size, _ in self._buffers.values())

    def keep(self, block: Block) -> int:
        """Keep `block` while changes in it are held; its number, for the lines that point
        into it."""
        number = self._next
        self._next += 1
        self.blocks[number] = block
        self._fresh.append(number)
        if isinstance(block, TableBlock):
            size, users = self._buffers.get(id(block.out), (block.out.nbytes, 0))
            self._buffers[id(block.out)] = (size, users + 1)
        return number

    def drop_fresh(self, kept: HeldChanges) -> None:
        """The blocks kept since the last feed that no change `kept` points into are
        dropped: a batch of second copies, or of changes left to the exact check, pins
        nothing."""
        used = set(np.unique(kept.block).tolist())
        self._drop([number for number in self._fresh if number not in used])
        self._fresh = []

    def keep_only(self, held: HeldChanges) -> None:
        """After a cut: the blocks no change still `held` points into are dropped."""
        still = set(np.unique(held.block).tolist())
        self._drop([number for number in self.blocks if number not in still])

    def _drop(self, numbers: Iterable[int]) -> None:
        for number in numbers:
            block = self.blocks.pop(number, None)
            if isinstance(block, TableBlock):
                size, users = self._buffers[id(block.out)]
                if users > 1:
                    self._buffers[id(block.out)] = (size, users - 1)
                else:
                    del self._buffers[id(block.out)]
