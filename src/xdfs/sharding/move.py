"""Moving one slot from a source shard to a target shard online, as pure state machines.

The controller (:class:`MoveController`) drives each move; the source
(:class:`MoveSource`) and the target (:class:`MoveTarget`) carry it out. As in
:mod:`xdfs.sharding.twophase`, ``on(event)`` returns the actions to carry out, in order.

The steps:

1. the controller journals BEGIN (its journal lives in ZooKeeper) and tells the source
   ``StartMsg``;
2. the source's driver snapshots the slot's partition roots at a txid (copy-on-write, as
   a checkpoint does) and streams them to the target, then the slot's edits made since
   (:class:`Stream`); the target journals what it receives as staging records (invisible,
   so its standby has them too) and the source's driver reports how far behind it is
   (:class:`StreamProgress`);
3. when the target is at most ``fence_lag_max`` edits behind, the source fences the slot
   (:class:`Fence`: new mutations of it wait, those in flight are synced), journals
   HANDOFF with the slot's last txid, and tells the target (``HandoffMsg``);
4. the target, once staged through that txid, journals ACQUIRE and tells the controller it
   is ready (``ReadyMsg``);
5. the controller's compare-and-set of the slot map in ZooKeeper (the target as owner,
   epoch + 1; :class:`CasMap`) is **the commit point**;
6. the controller tells both (``CommitMsg``): the target journals OWN and serves the slot;
   the source journals DROP (its waiting requests hear ``WrongShard``, it deletes its copy,
   the blocks' ownership goes with it); both acknowledge, the controller journals END.

Any failure before the CAS (a vote of no confidence: the source or the target restarted
without the move's state, the copy took too long, the CAS found another epoch) aborts:
the controller journals ABORT (after it, it never attempts the CAS) and tells both
``CancelMsg``: the source journals CANCEL (unfences, keeps serving), the target DISCARD
(drops its staging). A restarted controller reads the map: a move whose target owns the
slot there committed; one with BEGIN only is aborted. A source restarted after HANDOFF
stays fenced and a target restarted after ACQUIRE waits, each asking the controller until
it answers. Before the commit the source owns the slot, after it the target: the slot is
never served by both.

========  ================  ===============================================================
journal   record            meaning
========  ================  ===============================================================
control   BEGIN             the move exists (slot, source, target); restarting with it and
                            the slot not the target's in the map aborts it
control   ABORT             no CAS for this move, ever
control   END               both parties acknowledged the outcome
source    HANDOFF           the slot is fenced here through txid N (replay keeps it fenced)
source    DROP              the slot is gone from here (after the CAS)
source    CANCEL            the move is off: unfenced, the source serves the slot on
target    STAGE (driver's)  snapshot and edits, invisible (no core record: the driver's)
target    ACQUIRE           staged through the source's HANDOFF txid; ready to own
target    OWN               the slot is served here (after the CAS)
target    DISCARD           the staging is dropped
========  ================  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from xdfs.sharding.machine import dispatch


@dataclass(frozen=True)
class Move:
    move_id: str
    slot: int
    source: str
    target: str
    controller: str


class Kind(Enum):
    BEGIN = "begin"
    ABORT = "abort"
    END = "end"
    HANDOFF = "handoff"
    DROP = "drop"
    CANCEL = "cancel"
    ACQUIRE = "acquire"
    OWN = "own"
    DISCARD = "discard"


@dataclass(frozen=True)
class MoveRecord:
    kind: Kind
    move: Move
    txid: int = 0  # HANDOFF, ACQUIRE: the slot's last txid on the source
    committed: bool = False  # END: the outcome


# --- messages -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartMsg:
    move: Move


@dataclass(frozen=True)
class HandoffMsg:
    move: Move
    txid: int


@dataclass(frozen=True)
class ReadyMsg:
    """From the target: ACQUIRE is durable (also its question, while in doubt)."""

    move: Move


@dataclass(frozen=True)
class QueryMsg:
    """From a party waiting on the controller (the source fenced and in doubt, the target
    staging): what became of the move?"""

    move: Move
    party: str


@dataclass(frozen=True)
class FailedMsg:
    """From a party that lost the move's state before its commit record (a restart)."""

    move_id: str
    party: str


@dataclass(frozen=True)
class CommitMsg:
    move: Move


@dataclass(frozen=True)
class CancelMsg:
    move: Move


@dataclass(frozen=True)
class AckMsg:
    move_id: str
    party: str


MoveMessage = (StartMsg | HandoffMsg | ReadyMsg | QueryMsg | FailedMsg | CommitMsg
               | CancelMsg | AckMsg)


# --- events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartMove:
    move: Move


@dataclass(frozen=True)
class Journaled:
    record: MoveRecord


@dataclass(frozen=True)
class StreamProgress:
    """Source: the target has durably staged the slot through ``staged_txid``; the slot's
    last edit here is ``head_txid``."""

    move_id: str
    staged_txid: int
    head_txid: int


@dataclass(frozen=True)
class Staged:
    """Target: the stream of ``move`` is durably staged through ``txid``."""

    move: Move
    txid: int


@dataclass(frozen=True)
class Fenced:
    """Source: the slot takes no new mutation; every earlier one is synced, the last at
    ``txid``."""

    move_id: str
    txid: int


@dataclass(frozen=True)
class CasDone:
    move_id: str
    ok: bool


@dataclass(frozen=True)
class Tick:
    move_id: str
    generation: int


@dataclass(frozen=True)
class Recover:
    """After a (re)start: the party's move records, in journal order; for the controller
    also who owns each slot in the map now."""

    records: tuple[MoveRecord, ...]
    owners: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class StagingLost:
    """Target, after a restart: the driver found staging records of ``move`` and no
    ACQUIRE; the stream that fed them is gone."""

    move: Move


MoveEvent = (StartMove | Journaled | StreamProgress | Staged | Fenced | CasDone | Tick
             | Recover | StagingLost | MoveMessage)


# --- actions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Journal:
    record: MoveRecord


@dataclass(frozen=True)
class Send:
    to: str
    message: MoveMessage


@dataclass(frozen=True)
class Stream:
    """Source: snapshot the slot at the current txid and stream it, then its later edits,
    to the target; report StreamProgress. ``stop``: stop streaming."""

    move: Move
    stop: bool = False


@dataclass(frozen=True)
class Fence:
    """Source: make new mutations of the slot wait, sync those in flight; answer Fenced."""

    move: Move


@dataclass(frozen=True)
class CasMap:
    """Controller: in ZooKeeper, make the target the slot's owner at the map's epoch + 1,
    only if the source still owns it and this controller's epoch znode holds (a versioned
    write, read again on a version race); answer CasDone."""

    move: Move


@dataclass(frozen=True)
class Done:
    """Controller: the move finished (for ``admin -shards`` and the planner's next move)."""

    move_id: str
    committed: bool


@dataclass(frozen=True)
class Schedule:
    event: Tick
    delay_s: float


MoveAction = Journal | Send | Stream | Fence | CasMap | Done | Schedule


@dataclass(frozen=True)
class MoveSettings:
    resend_s: float = 1.0
    fence_lag_max: int = 64  # edits the target may be behind when the source fences
    copy_ticks_max: int = 600  # resends before a move that is not ready is aborted


class _Machine:
    def __init__(self, name: str, settings: MoveSettings | None = None) -> None:
        self.name = name
        self.settings = settings or MoveSettings()
        self._generations: dict[str, int] = {}

    def on(self, event: MoveEvent) -> list[MoveAction]:
        actions: list[MoveAction] = dispatch(self, event)
        return actions

    def _schedule(self, move_id: str) -> Schedule:
        generation = self._generations.get(move_id, 0) + 1
        self._generations[move_id] = generation
        return Schedule(Tick(move_id, generation), self.settings.resend_s)

    def _current(self, tick: Tick) -> bool:
        return self._generations.get(tick.move_id) == tick.generation


# --- the controller -------------------------------------------------------------------------


class CPhase(Enum):
    BEGINNING = "beginning"
    COPYING = "copying"  # the source streams; waiting for the target's READY
    CASING = "casing"
    ABORTING = "aborting"  # ABORT being journaled
    TELLING = "telling"  # outcome known: telling both, collecting acknowledgements
    ENDING = "ending"


@dataclass
class ControllerMove:
    move: Move
    phase: CPhase
    committed: bool = False
    acks: frozenset[str] = frozenset()
    ticks: int = 0


class MoveController(_Machine):
    def __init__(self, name: str, settings: MoveSettings | None = None) -> None:
        super().__init__(name, settings)
        self.moves: dict[str, ControllerMove] = {}

    def _on_StartMove(self, event: StartMove) -> list[MoveAction]:
        if event.move.move_id in self.moves:
            return []
        self.moves[event.move.move_id] = ControllerMove(event.move, CPhase.BEGINNING)
        return [Journal(MoveRecord(Kind.BEGIN, event.move))]

    def _on_Journaled(self, event: Journaled) -> list[MoveAction]:
        m = self.moves.get(event.record.move.move_id)
        if m is None:
            return []
        kind = event.record.kind
        if kind is Kind.BEGIN and m.phase is CPhase.BEGINNING:
            m.phase = CPhase.COPYING
            return [Send(m.move.source, StartMsg(m.move)), self._schedule(m.move.move_id)]
        if kind is Kind.ABORT and m.phase is CPhase.ABORTING:
            return self._tell(m, committed=False)
        if kind is Kind.END and m.phase is CPhase.ENDING:
            del self.moves[m.move.move_id]
            return [Done(m.move.move_id, m.committed)]
        return []

    def _on_ReadyMsg(self, event: ReadyMsg) -> list[MoveAction]:
        m = self.moves.get(event.move.move_id)
        if m is None:
            return [Send(event.move.target, CancelMsg(event.move))]  # see _on_QueryMsg
        if m.phase is CPhase.COPYING:
            m.phase = CPhase.CASING
            return [CasMap(m.move)]
        if m.phase is CPhase.TELLING:
            return [self._outcome(m, m.move.target)]
        return []

    def _on_QueryMsg(self, event: QueryMsg) -> list[MoveAction]:
        m = self.moves.get(event.move.move_id)
        if m is None:
            # presumed abort: END needs both parties done, so a party still asking about
            # a move we do not know holds one that never began here (a late message)
            return [Send(event.party, CancelMsg(event.move))]
        if m.phase is CPhase.TELLING:
            return [self._outcome(m, event.party)]
        return []  # undecided: it will hear

    def _on_FailedMsg(self, event: FailedMsg) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or m.phase is not CPhase.COPYING:
            return []
        return self._abort(m)

    def _on_CasDone(self, event: CasDone) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or m.phase is not CPhase.CASING:
            return []
        return self._tell(m, committed=True) if event.ok else self._abort(m)

    def _on_AckMsg(self, event: AckMsg) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or m.phase is not CPhase.TELLING:
            return []
        m.acks = m.acks | {event.party}
        if not m.acks >= {m.move.source, m.move.target}:
            return []
        m.phase = CPhase.ENDING
        return [Journal(MoveRecord(Kind.END, m.move, committed=m.committed))]

    def _on_Tick(self, event: Tick) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or not self._current(event):
            return []
        if m.phase is CPhase.COPYING:
            m.ticks += 1
            if m.ticks >= self.settings.copy_ticks_max:
                return self._abort(m)
            return [Send(m.move.source, StartMsg(m.move)), self._schedule(m.move.move_id)]
        if m.phase is CPhase.TELLING:
            return [*(self._outcome(m, p) for p in (m.move.source, m.move.target)
                      if p not in m.acks), self._schedule(m.move.move_id)]
        return []

    def _on_Recover(self, event: Recover) -> list[MoveAction]:
        self.moves.clear()
        for r in event.records:
            if r.kind is Kind.BEGIN:
                self.moves[r.move.move_id] = ControllerMove(r.move, CPhase.COPYING)
            elif r.kind is Kind.ABORT and r.move.move_id in self.moves:
                self.moves[r.move.move_id].phase = CPhase.ABORTING
            elif r.kind is Kind.END:
                self.moves.pop(r.move.move_id, None)
        owners = dict(event.owners)
        actions: list[MoveAction] = []
        for m in list(self.moves.values()):
            if owners.get(m.move.slot) == m.move.target:
                actions += self._tell(m, committed=True)  # the CAS happened
            elif m.phase is CPhase.ABORTING:
                actions += self._tell(m, committed=False)
            else:
                actions += self._abort(m)  # BEGIN only, no CAS: it never will be
        return actions

    def _abort(self, m: ControllerMove) -> list[MoveAction]:
        m.phase = CPhase.ABORTING
        return [Journal(MoveRecord(Kind.ABORT, m.move))]

    def _tell(self, m: ControllerMove, *, committed: bool) -> list[MoveAction]:
        m.phase, m.committed, m.acks = CPhase.TELLING, committed, frozenset()
        return [self._outcome(m, m.move.source), self._outcome(m, m.move.target),
                self._schedule(m.move.move_id)]

    def _outcome(self, m: ControllerMove, party: str) -> Send:
        return Send(party, CommitMsg(m.move) if m.committed else CancelMsg(m.move))


# --- the source -----------------------------------------------------------------------------


class SPhase(Enum):
    COPYING = "copying"
    FENCING = "fencing"
    HANDING_OFF = "handing_off"  # HANDOFF being journaled
    HANDED_OFF = "handed_off"  # fenced, in doubt until the controller answers
    FINISHING = "finishing"  # DROP or CANCEL being journaled
    DONE = "done"


@dataclass
class SourceMove:
    move: Move
    phase: SPhase
    txid: int = 0
    dropped: bool = False


class MoveSource(_Machine):
    def __init__(self, name: str, settings: MoveSettings | None = None) -> None:
        super().__init__(name, settings)
        self.moves: dict[str, SourceMove] = {}

    def fenced(self) -> list[int]:
        """Slots whose mutations must wait (a handoff under way or in doubt)."""
        return [m.move.slot for m in self.moves.values()
                if m.phase in (SPhase.FENCING, SPhase.HANDING_OFF, SPhase.HANDED_OFF)]

    def _on_StartMsg(self, event: StartMsg) -> list[MoveAction]:
        if event.move.move_id in self.moves:
            return []
        self.moves[event.move.move_id] = SourceMove(event.move, SPhase.COPYING)
        return [Stream(event.move)]

    def _on_StreamProgress(self, event: StreamProgress) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or m.phase is not SPhase.COPYING:
            return []
        if event.head_txid - event.staged_txid > self.settings.fence_lag_max:
            return []
        m.phase = SPhase.FENCING
        return [Fence(m.move)]

    def _on_Fenced(self, event: Fenced) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or m.phase is not SPhase.FENCING:
            return []
        m.phase, m.txid = SPhase.HANDING_OFF, event.txid
        return [Journal(MoveRecord(Kind.HANDOFF, m.move, txid=event.txid))]

    def _on_Journaled(self, event: Journaled) -> list[MoveAction]:
        m = self.moves.get(event.record.move.move_id)
        if m is None:
            return []
        if event.record.kind is Kind.HANDOFF and m.phase is SPhase.HANDING_OFF:
            m.phase = SPhase.HANDED_OFF
            return [Send(m.move.target, HandoffMsg(m.move, m.txid)),
                    self._schedule(m.move.move_id)]
        if event.record.kind in (Kind.DROP, Kind.CANCEL) and m.phase is SPhase.FINISHING:
            m.phase = SPhase.DONE
            return [Send(m.move.controller, AckMsg(m.move.move_id, self.name))]
        return []

    def _on_CommitMsg(self, event: CommitMsg) -> list[MoveAction]:
        return self._finish(event.move, Kind.DROP)

    def _on_CancelMsg(self, event: CancelMsg) -> list[MoveAction]:
        return self._finish(event.move, Kind.CANCEL)

    def _finish(self, move: Move, kind: Kind) -> list[MoveAction]:
        m = self.moves.get(move.move_id)
        if m is None or m.phase is SPhase.DONE:
            # unknown: never started here, or a repeat (the CAS needs our HANDOFF, which a
            # restart replays, so a COMMIT is never news to a source that forgot)
            return [Send(move.controller, AckMsg(move.move_id, self.name))]
        if m.phase is SPhase.FINISHING:
            return []
        if kind is Kind.DROP and m.phase is not SPhase.HANDED_OFF:
            return []  # impossible before our HANDOFF (the target acquires after it)
        stop: list[MoveAction] = [Stream(move, stop=True)] if m.phase is SPhase.COPYING else []
        m.phase = SPhase.FINISHING
        m.dropped = kind is Kind.DROP
        return [*stop, Journal(MoveRecord(kind, move))]

    def _on_Tick(self, event: Tick) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or not self._current(event) or m.phase is not SPhase.HANDED_OFF:
            return []
        return [Send(m.move.target, HandoffMsg(m.move, m.txid)),
                Send(m.move.controller, QueryMsg(m.move, self.name)),
                self._schedule(m.move.move_id)]

    def _on_Recover(self, event: Recover) -> list[MoveAction]:
        self.moves.clear()
        for r in event.records:
            if r.kind is Kind.HANDOFF:
                self.moves[r.move.move_id] = SourceMove(r.move, SPhase.HANDED_OFF, r.txid)
            elif r.kind in (Kind.DROP, Kind.CANCEL) and r.move.move_id in self.moves:
                self.moves[r.move.move_id].phase = SPhase.DONE
                self.moves[r.move.move_id].dropped = r.kind is Kind.DROP
        actions: list[MoveAction] = []
        for m in self.moves.values():
            if m.phase is SPhase.HANDED_OFF:
                actions += [Send(m.move.target, HandoffMsg(m.move, m.txid)),
                            Send(m.move.controller, QueryMsg(m.move, self.name)),
                            self._schedule(m.move.move_id)]
        return actions


# --- the target -----------------------------------------------------------------------------


class TPhase(Enum):
    STAGING = "staging"
    ACQUIRING = "acquiring"  # ACQUIRE being journaled
    ACQUIRED = "acquired"  # ready, in doubt until the controller answers
    FINISHING = "finishing"  # OWN or DISCARD being journaled
    DONE = "done"


@dataclass
class TargetMove:
    move: Move
    phase: TPhase
    staged: int = -1  # staged through this txid
    handoff: int | None = None  # the source's HANDOFF txid, once heard
    owned: bool = False


class MoveTarget(_Machine):
    def __init__(self, name: str, settings: MoveSettings | None = None) -> None:
        super().__init__(name, settings)
        self.moves: dict[str, TargetMove] = {}

    def accepts(self, move_id: str) -> bool:
        """Whether the driver should journal more of this move's stream (not once it was
        acquired, discarded or owned)."""
        m = self.moves.get(move_id)
        return m is None or m.phase is TPhase.STAGING

    def _get(self, move: Move) -> tuple[TargetMove, list[MoveAction]]:
        """The move, and a first timer when it is new here: a staging target asks the
        controller now and then, so staging for a move that ended is dropped."""
        m = self.moves.get(move.move_id)
        if m is not None:
            return m, []
        m = self.moves[move.move_id] = TargetMove(move, TPhase.STAGING)
        return m, [self._schedule(move.move_id)]

    def _on_Staged(self, event: Staged) -> list[MoveAction]:
        m, timer = self._get(event.move)
        if m.phase is not TPhase.STAGING:
            return timer
        m.staged = max(m.staged, event.txid)
        return [*timer, *self._maybe_acquire(m)]

    def _on_HandoffMsg(self, event: HandoffMsg) -> list[MoveAction]:
        m, timer = self._get(event.move)
        if m.phase is TPhase.ACQUIRED:
            return [Send(m.move.controller, ReadyMsg(m.move))]
        if m.phase is not TPhase.STAGING:
            return timer
        m.handoff = event.txid
        return [*timer, *self._maybe_acquire(m)]

    def _maybe_acquire(self, m: TargetMove) -> list[MoveAction]:
        if m.handoff is None or m.staged < m.handoff:
            return []  # the stream still has edits through the handoff to bring
        m.phase = TPhase.ACQUIRING
        return [Journal(MoveRecord(Kind.ACQUIRE, m.move, txid=m.handoff))]

    def _on_Journaled(self, event: Journaled) -> list[MoveAction]:
        m = self.moves.get(event.record.move.move_id)
        if m is None:
            return []
        if event.record.kind is Kind.ACQUIRE and m.phase is TPhase.ACQUIRING:
            m.phase = TPhase.ACQUIRED
            return [Send(m.move.controller, ReadyMsg(m.move)),
                    self._schedule(m.move.move_id)]
        if event.record.kind in (Kind.OWN, Kind.DISCARD) and m.phase is TPhase.FINISHING:
            m.phase = TPhase.DONE
            return [Send(m.move.controller, AckMsg(m.move.move_id, self.name))]
        return []

    def _on_CommitMsg(self, event: CommitMsg) -> list[MoveAction]:
        m = self.moves.get(event.move.move_id)
        if m is None or m.phase is TPhase.DONE:
            return [Send(event.move.controller, AckMsg(event.move.move_id, self.name))]
        if m.phase is not TPhase.ACQUIRED:
            return []  # the CAS needs our ACQUIRE: a commit cannot come first
        m.phase, m.owned = TPhase.FINISHING, True
        return [Journal(MoveRecord(Kind.OWN, m.move))]

    def _on_CancelMsg(self, event: CancelMsg) -> list[MoveAction]:
        m = self.moves.get(event.move.move_id)
        if m is None or m.phase is TPhase.DONE:
            return [Send(event.move.controller, AckMsg(event.move.move_id, self.name))]
        if m.phase in (TPhase.ACQUIRING, TPhase.FINISHING):
            return []  # answered once the record in flight settles (the resend)
        m.phase = TPhase.FINISHING
        return [Journal(MoveRecord(Kind.DISCARD, m.move))]

    def _on_Tick(self, event: Tick) -> list[MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or not self._current(event):
            return []
        if m.phase is TPhase.STAGING:
            return [Send(m.move.controller, QueryMsg(m.move, self.name)),
                    self._schedule(m.move.move_id)]
        if m.phase is TPhase.ACQUIRED:
            return [Send(m.move.controller, ReadyMsg(m.move)),
                    self._schedule(m.move.move_id)]
        return []

    def _on_Recover(self, event: Recover) -> list[MoveAction]:
        self.moves.clear()
        for r in event.records:
            if r.kind is Kind.ACQUIRE:
                self.moves[r.move.move_id] = TargetMove(r.move, TPhase.ACQUIRED, r.txid,
                                                         r.txid)
            elif r.kind in (Kind.OWN, Kind.DISCARD) and r.move.move_id in self.moves:
                self.moves[r.move.move_id].phase = TPhase.DONE
                self.moves[r.move.move_id].owned = r.kind is Kind.OWN
        actions: list[MoveAction] = []
        for m in self.moves.values():
            if m.phase is TPhase.ACQUIRED:
                actions += [Send(m.move.controller, ReadyMsg(m.move)),
                            self._schedule(m.move.move_id)]
        return actions

    def _on_StagingLost(self, event: StagingLost) -> list[MoveAction]:
        if event.move.move_id in self.moves:
            return []
        self.moves[event.move.move_id] = TargetMove(event.move, TPhase.FINISHING)
        return [Journal(MoveRecord(Kind.DISCARD, event.move)),
                Send(event.move.controller, FailedMsg(event.move.move_id, self.name))]
