"""Replaying edits fetched by a follower (a BackupNode from its NameNode, a standby
NameNode from the quorum journal): pure, bytes and a namespace in, no I/O, no clock.

A fetched batch is the writer's own framed records (CRC32C each). The whole batch is
checked and decoded *before* anything is applied, so a corrupt or out-of-order answer
changes nothing; then each op is applied to the follower's namespace and its record is
appended, byte for byte, to the follower's own edits log (durable at the caller's sync).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from xdfs.editlog.framing import FrameProblem, parse_frame
from xdfs.errors import ProtocolError, StorageError, XdfsError
from xdfs.namenode.editlog.codec import decode_frame
from xdfs.namenode.namespace.ops import Op


class ReplayTarget(Protocol):
    def apply(self, op: Op) -> tuple[int, ...]: ...


class RecordSink(Protocol):
    def append_record(self, txid: int, record: bytes | bytearray | memoryview) -> None: ...


@dataclass(frozen=True)
class Decoded:
    txid: int
    op: Op
    record: memoryview


def decode_batch(first_txid: int, count: int, data: bytes) -> list[Decoded]:
    """Every record of a fetch answer, checked: CRCs, consecutive txids from
    ``first_txid``, exactly ``count`` records filling ``data``. ProtocolError otherwise."""
    view = memoryview(data)
    out: list[Decoded] = []
    pos = 0
    for expected in range(first_txid, first_txid + count):
        frame = parse_frame(view, pos)
        if isinstance(frame, FrameProblem):
            raise ProtocolError(f"fetched edits: record {expected}: {frame.detail}")
        if frame.txid != expected:
            raise ProtocolError(f"fetched edits: txid {frame.txid} where {expected} belongs")
        try:
            op = decode_frame(view, frame)
        except ValueError as exc:
            raise ProtocolError(f"fetched edits: txid {expected}: {exc}") from None
        out.append(Decoded(frame.txid, op, view[frame.offset : frame.end]))
        pos = frame.end
    if pos != len(view):
        raise ProtocolError(f"fetched edits: {len(view) - pos} bytes after {count} records")
    return out


def apply_batch(records: list[Decoded], namespace: ReplayTarget, edits: RecordSink,
                on_applied: Callable[[int, Op], None] | None = None) -> int:
    """Apply and log checked records; returns the last txid applied. A record the
    namespace refuses means the copy has diverged: StorageError (the caller stops).
    ``on_applied(txid, op)`` runs after each op (a standby's retry cache)."""
    last = 0
    for rec in records:
        try:
            namespace.apply(rec.op)
        except XdfsError as exc:
            raise StorageError(
                f"replaying txid {rec.txid} ({rec.op.NAME}) failed: {exc}: the follower's "
                f"namespace no longer matches the writer's"
            ) from exc
        edits.append_record(rec.txid, rec.record)
        if on_applied is not None:
            on_applied(rec.txid, rec.op)
        last = rec.txid
    return last


@dataclass
class Backoff:
    """Exponential backoff (pure): ``next_s()`` after each failure, ``reset()`` on success."""

    initial_s: float
    max_s: float
    _next_s: float = 0.0

    def next_s(self) -> float:
        self._next_s = min(self.max_s, self._next_s * 2 if self._next_s else self.initial_s)
        return self._next_s

    def reset(self) -> None:
        self._next_s = 0.0


def checkpoint_due(
    *, now_s: float, last_checkpoint_s: float, synced_txid: int, image_txid: int,
    period_s: float, txns: int,
) -> bool:
    """By time (with something new to save) or by transaction count (HDFS's rule)."""
    if synced_txid <= image_txid:
        return False
    return now_s - last_checkpoint_s >= period_s or synced_txid - image_txid >= txns
