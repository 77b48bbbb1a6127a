"""Two-phase commit of a change that spans shards, as pure state machines (presumed abort).

:meth:`Coordinator.on` and :meth:`Participant.on` take an event and return the actions to
carry out, in order (as :class:`xdfs.zkfc.elector.Elector` does). The driver journals,
sends, schedules and replies; it feeds back the outcome of each journal write, the messages
that arrive and the timers that fire. A transaction is identified by a ``txid`` the
coordinator's driver makes unique (it survives restarts).

Two uses:

* **Top-layer changes** (mkdir, chmod, chown, setQuota, delete of an empty top-layer
  directory; users, groups, token keys): the controller coordinates, every shard is a
  participant, the change is the same for all. The coordinator's journal is the
  controller's (in ZooKeeper, so a newly elected controller recovers it).
* **Cross-partition rename**: the source shard coordinates and is a participant (its
  change: remove the subtree), the destination shard is the other participant (its change:
  the subtree's image, inodes, leases and block ownership). Both journals are the shards'
  edit logs. The commit is *ordered*: the source is told COMMIT first and the destination
  only once the source acknowledged, so the subtree is never visible on two shards.

Records, in each journal:

=================  =====================================================================
coordinator        meaning
=================  =====================================================================
PREPARE            the transaction began, with its participants and their changes; a
                   coordinator that restarts with only this record decides ABORT
COMMIT             **the commit point**: from the moment it is durable the change happens
                   everywhere; never undone
ABORT              the change happens nowhere (with the reason, to answer the client)
END                every participant acknowledged the decision; the outcome is kept for
                   a retried request, the rest forgotten
=================  =====================================================================

=================  =====================================================================
participant        meaning
=================  =====================================================================
PREPARE            a promise: the change was checked and can be applied whatever else
                   happens. Its replay stages it: a top-layer change locks the directory;
                   the rename's source locks the subtree against mutation (reads go on),
                   the destination holds the image invisibly and reserves the name.
                   Written only after the check passed; the YES vote only after it is
                   durable.
COMMIT             apply what PREPARE staged: the source drops the subtree (its leases and
                   blocks go with it), the destination makes it visible at the new name
ABORT              drop what PREPARE staged, unlock
=================  =====================================================================

Rules: a participant may refuse (vote NO, journaling nothing) until it voted YES, and is
bound afterwards; a prepared participant without a decision keeps re-sending its YES vote,
which is also its question ("what was decided?"). The coordinator answers a vote for a
transaction it does not know with ABORT (presumed abort: it knows every transaction it has
not ENDed, and ENDs only after every participant acknowledged the decision), and decides
ABORT by itself when votes do not all arrive after ``prepare_ticks_max`` resends. Every
message may be lost, repeated or reordered: each handler looks at the transaction's phase
and ignores what no longer applies.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from xdfs.errors import ShardingError, TransactionAborted
from xdfs.sharding.machine import dispatch

ABORTED_CODE = TransactionAborted.code


class Kind(Enum):
    PREPARE = "prepare"
    COMMIT = "commit"
    ABORT = "abort"
    END = "end"


# --- records (what the journals hold) -----------------------------------------------------


@dataclass(frozen=True)
class CoordinatorRecord:
    kind: Kind
    txid: str
    changes: tuple[tuple[str, object], ...] = ()  # PREPARE: (participant, change)
    order: tuple[tuple[str, ...], ...] = ()  # PREPARE: the commit waves
    code: int = 0  # ABORT, END: the error code answered (0: committed)
    reason: str = ""


@dataclass(frozen=True)
class ParticipantRecord:
    kind: Kind
    txid: str
    coordinator: str = ""  # PREPARE: whom to ask
    change: object = None  # PREPARE: what to stage


# --- messages (between the parties) -------------------------------------------------------


@dataclass(frozen=True)
class PrepareMsg:
    txid: str
    coordinator: str
    change: object


@dataclass(frozen=True)
class VoteMsg:
    txid: str
    participant: str
    yes: bool
    code: int = 0  # NO: the error the participant refused with
    reason: str = ""


@dataclass(frozen=True)
class DecisionMsg:
    txid: str
    commit: bool
    coordinator: str  # whom to acknowledge


@dataclass(frozen=True)
class AckMsg:
    txid: str
    participant: str


Message = PrepareMsg | VoteMsg | DecisionMsg | AckMsg


# --- events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Begin:
    """A client asked for the change (a retried request repeats the txid). ``order``: the
    waves COMMIT is sent in (each once the previous acknowledged); empty: all at once."""

    txid: str
    changes: Mapping[str, object]
    order: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Journaled:
    """The record is durable (and, on a participant, applied)."""

    record: CoordinatorRecord | ParticipantRecord


@dataclass(frozen=True)
class Prepared:
    """A participant's PREPARE record is durable (its check passed)."""

    txid: str


@dataclass(frozen=True)
class Refused:
    """A participant's check failed; nothing was journaled."""

    txid: str
    code: int
    reason: str


@dataclass(frozen=True)
class Tick:
    txid: str
    generation: int


@dataclass(frozen=True)
class Recover:
    """The first event after a (re)start: the party's records, in journal order."""

    records: tuple[CoordinatorRecord | ParticipantRecord, ...]


Event = Begin | Journaled | Prepared | Refused | Tick | Recover | Message


# --- actions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Journal:
    """Append ``record`` and sync it (a participant also applies it); answer Journaled."""

    record: CoordinatorRecord | ParticipantRecord


@dataclass(frozen=True)
class Prepare:
    """Participant: check that ``record.change`` can be applied; if so journal ``record``
    (the check and the append in one step, as any NameNode operation) and answer Prepared
    once durable, else answer Refused and journal nothing."""

    record: ParticipantRecord


@dataclass(frozen=True)
class Send:
    to: str
    message: Message


@dataclass(frozen=True)
class Reply:
    """Answer the client(s) waiting for ``txid``: done (code 0) or the error."""

    txid: str
    code: int = 0
    reason: str = ""

    @property
    def committed(self) -> bool:
        return self.code == 0


@dataclass(frozen=True)
class Schedule:
    """Feed ``event`` back after ``delay_s``."""

    event: Tick
    delay_s: float


Action = Journal | Prepare | Send | Reply | Schedule


@dataclass(frozen=True)
class Settings:
    resend_s: float = 1.0  # between resends of unanswered PREPAREs, decisions and votes
    prepare_ticks_max: int = 10  # resends of PREPARE before the coordinator aborts
    outcomes_max: int = 10000  # finished transactions remembered for retried requests


def _dispatch(machine: object, event: Event) -> list[Action]:
    actions: list[Action] = dispatch(machine, event)
    return actions


# --- the coordinator ----------------------------------------------------------------------


class CPhase(Enum):
    BEGINNING = "beginning"  # PREPARE record being journaled
    VOTING = "voting"
    DECIDING = "deciding"  # COMMIT or ABORT record being journaled
    DECIDED = "decided"  # telling the participants, collecting acknowledgements
    ENDING = "ending"  # END record being journaled


@dataclass
class CoordinatorTx:
    txid: str
    changes: dict[str, object]
    order: tuple[tuple[str, ...], ...]
    phase: CPhase
    commit: bool = False
    code: int = 0
    reason: str = ""
    votes: set[str] = field(default_factory=set)
    acks: set[str] = field(default_factory=set)
    ticks: int = 0
    generation: int = 0

    def released(self) -> list[str]:
        """The participants that may hear the decision now: all for ABORT; for COMMIT the
        waves up to the first one not yet acknowledged in full."""
        if not self.commit:
            return list(self.changes)
        out: list[str] = []
        for wave in self.order:
            out.extend(wave)
            if not self.acks.issuperset(wave):
                break
        return out


class Coordinator:
    def __init__(self, name: str, settings: Settings | None = None) -> None:
        self.name = name
        self.settings = settings or Settings()
        self.txs: dict[str, CoordinatorTx] = {}
        #: finished transactions' (code, reason), oldest first, for retried requests
        self.outcomes: OrderedDict[str, tuple[int, str]] = OrderedDict()

    def on(self, event: Event) -> list[Action]:
        return _dispatch(self, event)

    # --- starting -----------------------------------------------------------------------

    def _on_Begin(self, event: Begin) -> list[Action]:
        done = self.outcomes.get(event.txid)
        if done is not None:
            return [Reply(event.txid, *done)]
        if event.txid in self.txs:
            return []  # under way: its Reply answers this request too
        order = _checked_order(event.changes, event.order)
        tx = CoordinatorTx(event.txid, dict(event.changes), order, CPhase.BEGINNING)
        self.txs[tx.txid] = tx
        return [Journal(CoordinatorRecord(Kind.PREPARE, tx.txid, tuple(tx.changes.items()),
                                          order))]

    def _on_Journaled(self, event: Journaled) -> list[Action]:
        record = event.record
        tx = self.txs.get(record.txid)
        if tx is None or not isinstance(record, CoordinatorRecord):
            return []
        if record.kind is Kind.PREPARE and tx.phase is CPhase.BEGINNING:
            tx.phase = CPhase.VOTING
            return [*self._prepares(tx), self._schedule(tx)]
        if record.kind in (Kind.COMMIT, Kind.ABORT) and tx.phase is CPhase.DECIDING:
            tx.phase = CPhase.DECIDED
            return [*self._decisions(tx), self._schedule(tx)]
        if record.kind is Kind.END and tx.phase is CPhase.ENDING:
            del self.txs[tx.txid]
            self._remember(tx.txid, tx.code, tx.reason)
        return []

    # --- votes and acknowledgements -------------------------------------------------------

    def _on_VoteMsg(self, event: VoteMsg) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None:
            # presumed abort: never begun here, or ended (a late or repeated vote)
            return [Send(event.participant, DecisionMsg(event.txid, False, self.name))]
        if event.participant not in tx.changes:
            return []
        if tx.phase is CPhase.VOTING:
            if not event.yes:
                return self._decide(tx, False, event.code or ABORTED_CODE,
                                    f"{event.participant}: {event.reason}")
            tx.votes.add(event.participant)
            return self._decide(tx, True) if tx.votes.issuperset(tx.changes) else []
        if tx.phase in (CPhase.DECIDED, CPhase.ENDING) and event.participant in tx.released():
            return [Send(event.participant, DecisionMsg(tx.txid, tx.commit, self.name))]
        return []

    def _on_AckMsg(self, event: AckMsg) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None or tx.phase is not CPhase.DECIDED or event.participant not in tx.changes:
            return []
        before = tx.released()
        tx.acks.add(event.participant)
        if tx.acks.issuperset(tx.changes):
            tx.phase = CPhase.ENDING
            return [Reply(tx.txid, tx.code, tx.reason),
                    Journal(CoordinatorRecord(Kind.END, tx.txid, code=tx.code,
                                              reason=tx.reason))]
        # the next commit wave hears the decision once the one before acknowledged
        return [Send(p, DecisionMsg(tx.txid, tx.commit, self.name))
                for p in tx.released() if p not in before]

    def _on_Tick(self, event: Tick) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None or event.generation != tx.generation:
            return []
        if tx.phase is CPhase.VOTING:
            tx.ticks += 1
            if tx.ticks >= self.settings.prepare_ticks_max:
                missing = sorted(set(tx.changes) - tx.votes)
                return self._decide(tx, False, ABORTED_CODE,
                                    f"no vote from {', '.join(missing)} in time")
            return [*self._prepares(tx), self._schedule(tx)]
        if tx.phase is CPhase.DECIDED:
            return [*self._decisions(tx), self._schedule(tx)]
        return []

    # --- restart --------------------------------------------------------------------------

    def _on_Recover(self, event: Recover) -> list[Action]:
        self.txs.clear()
        for record in event.records:
            if isinstance(record, CoordinatorRecord):
                self._replay(record)
        actions: list[Action] = []
        for tx in list(self.txs.values()):
            if tx.phase is CPhase.VOTING:
                # no decision was journaled: nobody can have been told COMMIT
                actions += self._decide(tx, False, ABORTED_CODE,
                                        "the coordinator restarted before deciding")
            else:
                actions += [*self._decisions(tx), self._schedule(tx)]
        return actions

    def _replay(self, record: CoordinatorRecord) -> None:
        if record.kind is Kind.PREPARE:
            changes = dict(record.changes)
            self.txs[record.txid] = CoordinatorTx(record.txid, changes,
                                                  _checked_order(changes, record.order),
                                                  CPhase.VOTING)
            return
        if record.kind is Kind.END:
            self.txs.pop(record.txid, None)
            self._remember(record.txid, record.code, record.reason)
            return
        tx = self.txs.get(record.txid)
        if tx is not None:
            tx.phase = CPhase.DECIDED
            tx.commit = record.kind is Kind.COMMIT
            tx.code, tx.reason = record.code, record.reason

    # --- helpers --------------------------------------------------------------------------

    def _decide(self, tx: CoordinatorTx, commit: bool, code: int = 0,
                reason: str = "") -> list[Action]:
        tx.phase = CPhase.DECIDING
        tx.commit, tx.code, tx.reason = commit, (0 if commit else code), reason
        kind = Kind.COMMIT if commit else Kind.ABORT
        return [Journal(CoordinatorRecord(kind, tx.txid, code=tx.code, reason=reason))]

    def _prepares(self, tx: CoordinatorTx) -> list[Action]:
        return [Send(p, PrepareMsg(tx.txid, self.name, change))
                for p, change in tx.changes.items() if p not in tx.votes]

    def _decisions(self, tx: CoordinatorTx) -> list[Action]:
        return [Send(p, DecisionMsg(tx.txid, tx.commit, self.name))
                for p in tx.released() if p not in tx.acks]

    def _schedule(self, tx: CoordinatorTx) -> Schedule:
        tx.generation += 1
        return Schedule(Tick(tx.txid, tx.generation), self.settings.resend_s)

    def _remember(self, txid: str, code: int, reason: str) -> None:
        self.outcomes[txid] = (code, reason)
        while len(self.outcomes) > self.settings.outcomes_max:
            self.outcomes.popitem(last=False)


def _checked_order(changes: Mapping[str, object],
                   order: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    if not changes:
        raise ShardingError("a transaction needs at least one participant")
    if not order:
        return (tuple(changes),)
    flat = [p for wave in order for p in wave]
    if sorted(flat) != sorted(changes) or not all(order):
        raise ShardingError(f"commit order {order} is not a partition of {sorted(changes)}")
    return order


# --- the participant ----------------------------------------------------------------------


class PPhase(Enum):
    PREPARING = "preparing"  # checking, PREPARE record being journaled
    PREPARED = "prepared"  # voted YES: bound, waiting for the decision
    COMMITTING = "committing"
    ABORTING = "aborting"
    COMMITTED = "committed"
    ABORTED = "aborted"  # refused, or told ABORT (kept in memory to answer repeats)


@dataclass
class ParticipantTx:
    txid: str
    coordinator: str
    change: object
    phase: PPhase
    abort_pending: bool = False  # ABORT arrived while the PREPARE was being journaled
    code: int = 0
    reason: str = ""
    generation: int = 0


class Participant:
    def __init__(self, name: str, settings: Settings | None = None) -> None:
        self.name = name
        self.settings = settings or Settings()
        self.txs: dict[str, ParticipantTx] = {}

    def on(self, event: Event) -> list[Action]:
        return _dispatch(self, event)

    def in_doubt(self) -> list[str]:
        return [t.txid for t in self.txs.values() if t.phase is PPhase.PREPARED]

    # --- phase one ------------------------------------------------------------------------

    def _on_PrepareMsg(self, event: PrepareMsg) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None:
            tx = ParticipantTx(event.txid, event.coordinator, event.change, PPhase.PREPARING)
            self.txs[tx.txid] = tx
            return [Prepare(ParticipantRecord(Kind.PREPARE, tx.txid, tx.coordinator,
                                              tx.change))]
        if tx.phase is PPhase.PREPARED:
            return [self._vote(tx)]  # our vote was lost
        if tx.phase is PPhase.ABORTED:
            return [self._no(tx)]
        return []

    def _on_Prepared(self, event: Prepared) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None or tx.phase is not PPhase.PREPARING:
            return []
        if tx.abort_pending:
            tx.phase = PPhase.ABORTING
            return [Journal(ParticipantRecord(Kind.ABORT, tx.txid))]
        tx.phase = PPhase.PREPARED
        return [self._vote(tx), self._schedule(tx)]

    def _on_Refused(self, event: Refused) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None or tx.phase is not PPhase.PREPARING:
            return []
        tx.phase, tx.code, tx.reason = PPhase.ABORTED, event.code, event.reason
        if tx.abort_pending:
            return [Send(tx.coordinator, AckMsg(tx.txid, self.name))]
        return [self._no(tx)]

    # --- phase two ------------------------------------------------------------------------

    def _on_DecisionMsg(self, event: DecisionMsg) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None:
            return self._unknown_decision(event)
        if tx.phase is PPhase.PREPARING:
            # COMMIT cannot come before our YES; ABORT waits for the PREPARE to settle
            tx.abort_pending = tx.abort_pending or not event.commit
            return []
        if tx.phase is PPhase.PREPARED:
            tx.phase = PPhase.COMMITTING if event.commit else PPhase.ABORTING
            kind = Kind.COMMIT if event.commit else Kind.ABORT
            return [Journal(ParticipantRecord(kind, tx.txid))]
        decided = {PPhase.COMMITTED: True, PPhase.ABORTED: False}.get(tx.phase)
        if decided is event.commit:
            return [Send(tx.coordinator, AckMsg(tx.txid, self.name))]  # a repeat
        # still being journaled, or a presumed-abort answer to a vote that was already
        # settled (the coordinator ENDed after our acknowledgement): nothing to do
        return []

    def _unknown_decision(self, event: DecisionMsg) -> list[Action]:
        """A decision for a transaction we hold no record of. The coordinator sends COMMIT
        only after our YES, and YES only after our PREPARE was durable, so COMMIT here means
        a record compacted away after it was applied; ABORT means we never prepared (it is
        remembered, so a PREPARE arriving late is answered NO)."""
        if not event.commit:
            self.txs[event.txid] = ParticipantTx(event.txid, event.coordinator, None,
                                                 PPhase.ABORTED, code=ABORTED_CODE,
                                                 reason="aborted before it prepared here")
        return [Send(event.coordinator, AckMsg(event.txid, self.name))]

    def _on_Journaled(self, event: Journaled) -> list[Action]:
        record = event.record
        tx = self.txs.get(record.txid)
        if tx is None or not isinstance(record, ParticipantRecord):
            return []
        if (record.kind, tx.phase) in ((Kind.COMMIT, PPhase.COMMITTING),
                                       (Kind.ABORT, PPhase.ABORTING)):
            tx.phase = PPhase.COMMITTED if record.kind is Kind.COMMIT else PPhase.ABORTED
            return [Send(tx.coordinator, AckMsg(tx.txid, self.name))]
        return []

    def _on_Tick(self, event: Tick) -> list[Action]:
        tx = self.txs.get(event.txid)
        if tx is None or tx.phase is not PPhase.PREPARED or event.generation != tx.generation:
            return []
        return [self._vote(tx), self._schedule(tx)]  # in doubt: ask again

    # --- restart --------------------------------------------------------------------------

    def _on_Recover(self, event: Recover) -> list[Action]:
        self.txs.clear()
        for record in event.records:
            if isinstance(record, ParticipantRecord):
                self._replay(record)
        actions: list[Action] = []
        for tx in self.txs.values():
            if tx.phase is PPhase.PREPARED:
                actions += [self._vote(tx), self._schedule(tx)]
        return actions

    def _replay(self, record: ParticipantRecord) -> None:
        if record.kind is Kind.PREPARE:
            self.txs[record.txid] = ParticipantTx(record.txid, record.coordinator,
                                                  record.change, PPhase.PREPARED)
            return
        tx = self.txs.get(record.txid)
        if tx is not None and record.kind in (Kind.COMMIT, Kind.ABORT):
            tx.phase = PPhase.COMMITTED if record.kind is Kind.COMMIT else PPhase.ABORTED

    # --- helpers --------------------------------------------------------------------------

    def _vote(self, tx: ParticipantTx) -> Send:
        return Send(tx.coordinator, VoteMsg(tx.txid, self.name, yes=True))

    def _no(self, tx: ParticipantTx) -> Send:
        return Send(tx.coordinator, VoteMsg(tx.txid, self.name, yes=False,
                                            code=tx.code, reason=tx.reason))

    def _schedule(self, tx: ParticipantTx) -> Schedule:
        tx.generation += 1
        return Schedule(Tick(tx.txid, tx.generation), self.settings.resend_s)

