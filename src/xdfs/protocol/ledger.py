"""``ledger``: the storage side of the replicated log service (seed 002's bookies).

Served by every JournalNode next to its ``journal`` service (same process, same secret,
same directory lock; ledgers live in ``<journal_dir>/ledger.d``). Called by the log
service's writers, readers, recovery and re-replication.

A ledger is a bounded sequence of entries ``0..last`` written by one writer to an ensemble
of nodes. Entries travel framed as edits records are (:mod:`xdfs.editlog.framing`: length,
opcode :data:`ENTRY_OPCODE`, entry id in the txid field, payload, CRC32C); a node checks
every frame and every entry id and never decodes a payload. Every add is fsynced before it
is answered. Once a ledger is *fenced* (a new writer recovers it) the node refuses every
plain add with :class:`~xdfs.errors.LedgerFenced`; only recovery adds pass.
"""

from __future__ import annotations

import msgspec

from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, Service

#: The opcode of a ledger entry frame (edits records use 1..n for NameNode ops; a ledger
#: file holds entries only, so the value just marks the frame kind).
ENTRY_OPCODE = 0x4C  # "L"
#: Ledger ids are positive and below 2**63 (they name files, zero-padded).
LEDGER_ID_MAX = 2**63 - 1


class AddEntriesRequest(msgspec.Struct):
    ledger_id: int
    first_entry: int  # entry id of the first frame in ``entries``
    count: int
    entries: bytes  # ``count`` frames, entry ids first_entry.. in order
    #: Last entry the writer knows an ack quorum stored (-1: none): kept as a hint for
    #: readers that do not go through the writer.
    lac: int = -1
    #: A recovery copying entries into a fenced ledger (only recovery may write there).
    recovery: bool = False


class AddEntriesResponse(msgspec.Struct):
    last_entry: int


class LedgerIdRequest(msgspec.Struct):
    ledger_id: int


class LedgerState(msgspec.Struct):
    """What one node holds of a ledger (``last_entry`` -1 and ``first_entry`` 0: nothing)."""

    exists: bool
    first_entry: int
    last_entry: int
    lac: int
    fenced: bool


class ReadEntriesRequest(msgspec.Struct):
    ledger_id: int
    from_entry: int
    max_entries: int
    max_bytes: int


class ReadEntriesResponse(msgspec.Struct):
    first_entry: int
    count: int
    entries: bytes  # frames
    last_entry: int
    lac: int


class ListLedgersResponse(msgspec.Struct):
    ledgers: list[int]


ADD_ENTRIES = Method(
    "add_entries", AddEntriesRequest, AddEntriesResponse, idempotent=False,
    doc="Append entries to a ledger, durably (fdatasync) before ok; refused once fenced.",
)
FENCE_LEDGER = Method(
    "fence_ledger", LedgerIdRequest, LedgerState, idempotent=True,
    doc="Refuse every later plain add to the ledger; answers what this node holds of it.",
)
LEDGER_STATE = Method(
    "ledger_state", LedgerIdRequest, LedgerState, idempotent=True,
    doc="First and last entry, last-add-confirmed hint and fence of a ledger on this node.",
)
READ_ENTRIES = Method(
    "read_entries", ReadEntriesRequest, ReadEntriesResponse, idempotent=True,
    doc="Stored entries from an entry id, at most max_entries and max_bytes.",
)
DELETE_LEDGER = Method(
    "delete_ledger", LedgerIdRequest, Empty, idempotent=True,
    doc="Remove a ledger's entries from this node (reclamation after truncation).",
)
LIST_LEDGERS = Method(
    "list_ledgers", Empty, ListLedgersResponse, idempotent=True,
    doc="Every ledger id this node holds.",
)
LEDGER_SERVICE = Service("ledger", (
    ADD_ENTRIES, FENCE_LEDGER, LEDGER_STATE, READ_ENTRIES, DELETE_LEDGER, LIST_LEDGERS,
))
