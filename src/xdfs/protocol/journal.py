"""``journal``: the quorum journal's protocol (HDFS's QJournalProtocol, seed 001).

Served by JournalNodes; called by the one writer (the active NameNode, through its quorum
journal), by readers that tail edits (a standby, a BackupNode, ``oev``) and by admin tools.
A JournalNode serves any number of journals, each named by its ``journal_id``.

Every call of the writer carries a :class:`RequestInfo`: its epoch and the highest txid it
knows a quorum stored (``committed_txid``, piggybacked as in HDFS). A call from an epoch
below the journal's promise fails with :class:`~xdfs.errors.Fenced` and changes nothing.
Every change is fsynced (file and directory) before it is answered.

Records travel as the edits segment format frames them (``xdfs.editlog.framing``: length,
opcode, txid, payload, CRC32C each); a JournalNode checks every frame and every txid, and
never decodes an op.
"""

from __future__ import annotations

import re

import msgspec

from xdfs.errors import InvalidArgument
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, MethodKind, Service

#: The user a caller of a JournalNode logs in as, with the journal secret as its password.
JOURNAL_USER = "journal"

#: Journal ids name directories: letters, digits, ``-`` and ``_`` only (no path tricks).
JOURNAL_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_journal_id(journal_id: str) -> str:
    if not JOURNAL_ID_RE.match(journal_id):
        raise InvalidArgument(
            f"bad journal id {journal_id!r}: 1-64 letters, digits, '-' or '_'"
        )
    return journal_id


def parse_qjournal_uri(uri: str) -> tuple[list[str], str]:
    """``qjournal://h1:p1;h2:p2;h3:p3/<journal id>`` -> (addresses, journal id), as HDFS's
    ``dfs.namenode.shared.edits.dir``."""
    scheme, sep, rest = uri.partition("://")
    hosts, slash, journal_id = rest.partition("/")
    addresses = [a.strip() for a in hosts.split(";") if a.strip()]
    if scheme != "qjournal" or not sep or not slash or not addresses:
        raise InvalidArgument(
            f"bad shared edits URI {uri!r}: expected qjournal://host:port;host:port;.../<id>"
        )
    if len(set(addresses)) != len(addresses):
        raise InvalidArgument(f"shared edits URI {uri!r} names a JournalNode twice")
    return addresses, check_journal_id(journal_id)


class SegmentState(msgspec.Struct, frozen=True, order=True, array_like=True):
    """A segment of a journal: txids ``start_txid..end_txid`` (``end_txid`` is
    ``start_txid - 1`` while it holds no record)."""

    start_txid: int
    end_txid: int
    in_progress: bool

    @property
    def txn_count(self) -> int:
        return self.end_txid - self.start_txid + 1


class JournalNamespace(msgspec.Struct, frozen=True):
    """Whose edits a journal holds: a writer of another namespace is refused."""

    cluster_id: str
    namespace_id: int


class RequestInfo(msgspec.Struct, array_like=True):
    journal_id: str
    epoch: int
    committed_txid: int  # highest txid the writer knows a quorum stored (0: none yet)


class JournalIdRequest(msgspec.Struct):
    journal_id: str


class JournalState(msgspec.Struct):
    formatted: bool
    namespace: JournalNamespace | None
    promised_epoch: int  # HDFS's lastPromisedEpoch
    writer_epoch: int  # epoch of the writer that last started a segment (lastWriterEpoch)
    committed_txid: int
    last_txid: int  # last txid stored (in any segment), 0: none


class FormatRequest(msgspec.Struct):
    journal_id: str
    namespace: JournalNamespace
    force: bool = False  # reformat a journal that holds edits (drops them)
    nodes: list[str] = []  # every JournalNode of the journal (as in StartSegmentRequest)


class NewEpochRequest(msgspec.Struct):
    journal_id: str
    namespace: JournalNamespace
    epoch: int


class NewEpochResponse(msgspec.Struct):
    last_segment_txid: int  # start of the newest segment (finalized or not), 0: none


class StartSegmentRequest(msgspec.Struct):
    req: RequestInfo
    first_txid: int
    layout_version: int
    #: Every JournalNode of the journal (host:port): where a node that missed segments
    #: fetches them from (its syncer).
    nodes: list[str] = []


class JournalRecordsRequest(msgspec.Struct):
    req: RequestInfo
    segment_txid: int  # start of the open segment these records belong to
    first_txid: int
    count: int
    records: bytes  # ``count`` framed records, txids first_txid.. in order


class RequestOnly(msgspec.Struct):
    req: RequestInfo


class FinalizeRequest(msgspec.Struct):
    req: RequestInfo
    start_txid: int
    end_txid: int


class PurgeRequest(msgspec.Struct):
    req: RequestInfo
    min_txid_to_keep: int


class PurgeResponse(msgspec.Struct):
    purged_files: int


class PrepareRecoveryRequest(msgspec.Struct):
    req: RequestInfo
    segment_txid: int


class PrepareRecoveryResponse(msgspec.Struct):
    """HDFS's PrepareRecoveryResponseProto: what this node holds of the segment."""

    segment: SegmentState | None  # None: it has no copy with a record
    accepted_epoch: int  # epoch of the recovery it accepted for this segment, 0: none
    last_writer_epoch: int
    committed_txid: int


class AcceptRecoveryRequest(msgspec.Struct):
    """Head of an upload: the chunks are the chosen copy's framed records, exactly
    ``segment.start_txid..segment.end_txid``."""

    req: RequestInfo
    segment: SegmentState
    layout_version: int


class ManifestRequest(msgspec.Struct):
    journal_id: str
    since_txid: int  # segments ending before it are left out
    in_progress_ok: bool = True


class ManifestResponse(msgspec.Struct):
    segments: list[SegmentState]  # oldest first
    committed_txid: int


class ReadEditsRequest(msgspec.Struct):
    journal_id: str
    from_txid: int
    max_txns: int
    max_bytes: int
    #: 0: committed records only (tailing readers). The writer's own epoch: any stored
    #: record, committed or not (a recovery reading the copy it chose).
    epoch: int = 0
    #: Long poll: when nothing is readable yet, wait up to this long (capped by
    #: journalnode.read_wait_max_s) for the writer to commit more.
    wait_s: float = 0.0


class ReadEditsResponse(msgspec.Struct):
    first_txid: int  # = from_txid
    count: int  # records in ``records`` (0: nothing readable yet)
    records: bytes
    committed_txid: int
    layout_version: int  # of the segment the records come from


GET_JOURNAL_STATE = Method(
    "get_journal_state", JournalIdRequest, JournalState, idempotent=True,
    doc="Promise, writer epoch, committed and last txid of a journal.",
)
FORMAT_JOURNAL = Method(
    "format_journal", FormatRequest, Empty, idempotent=True,
    doc="Create a journal for a namespace (refused if it holds edits, unless forced).",
)
NEW_EPOCH = Method(
    "new_epoch", NewEpochRequest, NewEpochResponse, idempotent=False,
    doc="Promise to accept no writer below this epoch; stops the current writer.",
)
START_LOG_SEGMENT = Method(
    "start_log_segment", StartSegmentRequest, Empty, idempotent=False,
    doc="Open edits_inprogress_<first_txid> for the writer of this epoch.",
)
JOURNAL = Method(
    "journal", JournalRecordsRequest, Empty, idempotent=False,
    doc="Append a batch of records to the open segment, durably (fdatasync) before ok.",
)
HEARTBEAT = Method(
    "heartbeat", RequestOnly, Empty, idempotent=True,
    doc="The writer is alive; carries its committed txid.",
)
FINALIZE_LOG_SEGMENT = Method(
    "finalize_log_segment", FinalizeRequest, Empty, idempotent=True,
    doc="Rename the segment to edits_<start>-<end> (it must end exactly there).",
)
PURGE_LOGS_OLDER_THAN = Method(
    "purge_logs_older_than", PurgeRequest, PurgeResponse, idempotent=True,
    doc="Delete finalized segments that end before the txid (checkpoint retention).",
)
PREPARE_RECOVERY = Method(
    "prepare_recovery", PrepareRecoveryRequest, PrepareRecoveryResponse, idempotent=True,
    doc="Recovery phase 1: what this node holds of the segment.",
)
ACCEPT_RECOVERY = Method(
    "accept_recovery", AcceptRecoveryRequest, Empty, idempotent=True,
    kind=MethodKind.UPLOAD,
    doc="Recovery phase 2: replace this node's copy of the segment with the chosen one.",
)
GET_EDIT_LOG_MANIFEST = Method(
    "get_edit_log_manifest", ManifestRequest, ManifestResponse, idempotent=True,
    doc="The segments a journal holds from a txid on.",
)
GET_JOURNALED_EDITS = Method(
    "get_journaled_edits", ReadEditsRequest, ReadEditsResponse, idempotent=True,
    doc="Committed records from a txid, finalized or in-progress (tailing readers).",
)
JOURNAL_SERVICE = Service("journal", (
    GET_JOURNAL_STATE, FORMAT_JOURNAL, NEW_EPOCH, START_LOG_SEGMENT, JOURNAL, HEARTBEAT,
    FINALIZE_LOG_SEGMENT, PURGE_LOGS_OLDER_THAN, PREPARE_RECOVERY, ACCEPT_RECOVERY,
    GET_EDIT_LOG_MANIFEST, GET_JOURNALED_EDITS,
))
