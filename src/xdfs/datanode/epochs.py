"""Which NameNode a DataNode obeys: the one with the highest active epoch it has seen.

Every promotion raises the namespace's active epoch (``NewEpochOp``) and NameNodes send
it in their register and heartbeat answers. A DataNode remembers the highest epoch it has
seen, durably in its data dir (``current/active_epoch``, written before anything from a
NameNode at that epoch is obeyed), and never obeys an answer with a lower one: that
NameNode was fenced by a takeover (or restarted from an old name dir), and its commands
-- deletions above all -- would destroy what the new active NameNode acknowledged.

:class:`EpochWatermark` is the rule, pure: the actor asks :meth:`EpochWatermark.judge` for
each answer and calls :meth:`EpochWatermark.raise_to` once a higher epoch is persisted.
With several NameNodes at once (HA, later), the same rule picks whom to obey; epochs of a
quorum journal can feed it the same way. :func:`load_epoch` and :func:`store_epoch` are
the two file helpers of the driver.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from xdfs.common.files import read_number_file, write_number_file

EPOCH_FILE = "active_epoch"


class Verdict(enum.Enum):
    OBEY = "obey"  # the epoch we know
    NEWER = "newer"  # a promotion we had not seen: persist it, then obey
    STALE = "stale"  # below what we have seen: never obey


@dataclass
class EpochWatermark:
    highest: int = 0  # 0: none seen yet (a fresh data dir)

    def judge(self, epoch: int) -> Verdict:
        if epoch < self.highest:
            return Verdict.STALE
        if epoch > self.highest:
            return Verdict.NEWER
        return Verdict.OBEY

    def raise_to(self, epoch: int) -> None:
        """Call once ``epoch`` is durable; never lowers the watermark."""
        self.highest = max(self.highest, epoch)

    def stale_message(self, address: str, epoch: int) -> str:
        return (f"NameNode {address} answers at epoch {epoch}, but this DataNode has seen "
                f"epoch {self.highest}: it was fenced by a takeover; not obeying it")


def load_epoch(current: Path) -> int:
    """The persisted watermark of a data dir's ``current/`` (0 when none was stored)."""
    return read_number_file(current / EPOCH_FILE, "an epoch")


def store_epoch(current: Path, epoch: int) -> None:
    write_number_file(current / EPOCH_FILE, epoch)
