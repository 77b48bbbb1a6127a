"""``log``: the replicated log service's API (seeds 002 and 004), served by ``xdfs
logservice`` instances and called by :class:`xdfs.log.LogClient`.

Callers log in as :data:`LOG_USER` with the log service secret as password. A log's
appends, reads and truncation are answered by the instance holding its writer lock; any
other instance answers :class:`~xdfs.errors.NotLogWriter` naming it, and the client moves
there. Records travel as :class:`Record` structs, addressed by :class:`Lsn` (defined here:
servers and clients share them); the storage nodes keep them in the byte format of
:mod:`xdfs.log.record` (documented in docs/protocol.md).
"""

from __future__ import annotations

import msgspec

from xdfs.errors import BadRecord
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, Service

LOG_USER = "log"


class Lsn(msgspec.Struct, frozen=True, order=True, array_like=True):
    ledger_id: int
    entry_id: int
    batch_index: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"

    @classmethod
    def parse(cls, text: str) -> Lsn:
        parts = text.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise BadRecord(f"bad LSN {text!r}: expected LEDGER:ENTRY:INDEX, e.g. 3:0:0")
        return cls(int(parts[0]), int(parts[1]), int(parts[2]))


#: Below every LSN a log can hand out (ledger ids start at 1).
LSN_ZERO = Lsn(0, 0, 0)


class Record(msgspec.Struct, frozen=True):
    payload: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    attributes: int = 0


class ReadRecord(msgspec.Struct, frozen=True):
    lsn: Lsn
    record: Record


class LogSettings(msgspec.Struct, frozen=True):
    """Per-log settings (defaults from ``logservice.*``)."""

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    ledger_entries_max: int = 100_000
    ledger_bytes_max: int = 256 * 1024 * 1024
    ledger_age_max_s: float = 3600.0


class CreateLogRequest(msgspec.Struct):
    name: str
    settings: LogSettings | None = None  # None: the service's defaults


class NameRequest(msgspec.Struct):
    name: str


class LogStat(msgspec.Struct):
    name: str
    settings: LogSettings
    ledgers: int
    truncated_lsn: Lsn
    end_lsn: Lsn  # the LSN the next append would get at the earliest (exclusive end)
    writer_epoch: int
    writer: str
    readers: dict[str, Lsn]
    created_ms: int
    ledger_ids: list[int] = []  # oldest first
    opened_epoch: int = 0  # the epoch of the last open_writer (appends under older fail)


class EpochResponse(msgspec.Struct):
    epoch: int


class AppendRequest(msgspec.Struct):
    name: str
    records: list[Record]
    #: The writer epoch ``open_writer`` gave the caller: the append fails with LogFenced
    #: once a newer writer was opened. 0 (``NO_WRITER``): one of many producers, appending
    #: to whichever writer is current, never fenced.
    epoch: int = 0


class AppendResponse(msgspec.Struct):
    lsns: list[Lsn]


class ReadRequest(msgspec.Struct):
    name: str
    from_lsn: Lsn
    max_bytes: int
    #: Long poll (``tail -f``): when nothing is there yet, wait up to this long.
    wait_s: float = 0.0
    #: A registered reader reads below the truncation point, from its position on.
    reader: str = ""


class ReadResponse(msgspec.Struct):
    records: list[ReadRecord]
    next_lsn: Lsn


class TruncateRequest(msgspec.Struct):
    name: str
    lsn: Lsn


class LsnResponse(msgspec.Struct):
    lsn: Lsn


class ReaderRequest(msgspec.Struct):
    name: str
    reader: str
    position: Lsn | None  # None: unregister


class ListResponse(msgspec.Struct):
    names: list[str]


class TsoRequest(msgspec.Struct):
    count: int


class TsoResponse(msgspec.Struct):
    first: int
    count: int


CREATE = Method("create", CreateLogRequest, LogStat, idempotent=False,
                doc="Create a log (LogExists if the name is taken).")
STAT = Method("stat", NameRequest, LogStat, idempotent=True,
              doc="A log's settings, ledgers, truncation point, end and writer.")
LIST = Method("list", Empty, ListResponse, idempotent=True, doc="Every log's name.")
DELETE = Method("delete", NameRequest, Empty, idempotent=False,
                doc="Delete a log and its ledgers.")
OPEN_WRITER = Method("open_writer", NameRequest, EpochResponse, idempotent=False,
                     doc="Open a new writer: a new epoch fencing the previous one.")
APPEND = Method("append", AppendRequest, AppendResponse, idempotent=False,
                doc="Append a batch of records as one entry; their LSNs once acknowledged.")
READ = Method("read", ReadRequest, ReadResponse, idempotent=True,
              doc="Records from an LSN (linearizable), about max_bytes of payload.")
TRUNCATE = Method("truncate", TruncateRequest, LsnResponse, idempotent=True,
                  doc="Records below the LSN may be reclaimed; the truncation point.")
TRUNCATED_LSN = Method("truncated_lsn", NameRequest, LsnResponse, idempotent=True,
                       doc="The truncation point of a log.")
SET_READER = Method("set_reader", ReaderRequest, Empty, idempotent=True,
                    doc="Register (or drop) a reader: nothing it still needs is reclaimed.")
# Safe to repeat: a repeated reservation takes a fresh range above every earlier one, so a
# range whose answer was lost (ZooKeeper's session expired mid-call) is only skipped, never
# handed out twice or out of order.
TSO = Method("tso", TsoRequest, TsoResponse, idempotent=True,
             doc="Reserve count durable, strictly increasing timestamps.")
LOG_SERVICE = Service("log", (
    CREATE, STAT, LIST, DELETE, OPEN_WRITER, APPEND, READ, TRUNCATE, TRUNCATED_LSN, SET_READER, TSO,
))


# --- keeper: the storage nodes' heartbeats (seed 004's HAKeeper) ----------------------------
#
# Every storage node sends a heartbeat to the keeper, the one log service instance elected
# through ``<root>/keeper``; another instance answers NotKeeper naming it. The answer
# carries the keeper's commands for that node. Storage nodes log in as LOG_USER with the
# deployment's secret.

REPLICATE = "replicate"
DELETE_LEDGER = "delete"


class LedgerHeld(msgspec.Struct, frozen=True, array_like=True):
    """A ledger a storage node holds: its first and last entry there."""

    ledger_id: int
    first_entry: int
    last_entry: int


class CopyRange(msgspec.Struct, frozen=True, array_like=True):
    """Entries ``first_entry..last_entry`` of a ledger and the nodes to copy them from."""

    first_entry: int
    last_entry: int
    sources: tuple[str, ...]


class KeeperCommand(msgspec.Struct, frozen=True):
    """``replicate``: copy ``ranges`` of the ledger here (recovery adds, from the entry
    after what the node holds); ``delete``: remove the ledger (nothing needs this copy)."""

    kind: str
    ledger_id: int
    ranges: tuple[CopyRange, ...] = ()


class HeartbeatRequest(msgspec.Struct):
    node: str  # the storage node's address, as the ledger metadata names it
    ledgers: list[LedgerHeld]
    copying: list[int]  # ledgers with a replicate command queued or running
    free_bytes: int
    total_bytes: int


class HeartbeatResponse(msgspec.Struct):
    keeper: str
    commands: list[KeeperCommand]


HEARTBEAT = Method("heartbeat", HeartbeatRequest, HeartbeatResponse, idempotent=True,
                   doc="A storage node's ledgers and free space; the keeper's commands.")
KEEPER_SERVICE = Service("keeper", (HEARTBEAT,))
