"""A seeded simulator of one slot's online move (:mod:`xdfs.sharding.move`).

A controller (its journal and the slot map standing for ZooKeeper), a source shard and a
target shard run the real cores over :mod:`xdfs.testing.sim`, while clients create files in
the slot: each client asks the shard the map names, waits while the slot is fenced, and
after a ``WrongShard`` reads the map again. Messages are delayed, reordered, duplicated and
lost; any party crashes before any action and restarts from its journal (a random prefix
of the unsynced records survives). The source's driver streams the slot (its synced
creates) to the target in chunks, the target journals them as staging records.

Invariants, after every journal or map change:

1. the slot is served by at most one shard (the source while it has the slot and is not
   fenced, the target once it journaled OWN);
2. the target owns and the source drops only after the map's CAS; CANCEL only while the
   map still names the source;
3. ACQUIRE holds exactly what the source had at HANDOFF;

and once faults stop and everything went quiet (termination):

4. the move ended, nothing is fenced, no staging is left;
5. the shard the map names holds every acknowledged create, none twice; the other holds
   nothing of the slot.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from functools import partial

from xdfs.sharding import move as mv
from xdfs.testing.sim import FaultPlan, JournaledProcess, Network, Process, Scheduler

TICKS_PER_S = 10
SETTINGS = mv.MoveSettings(resend_s=2.0, fence_lag_max=2, copy_ticks_max=40)
FAULT_TICKS = 400
STEPS_MAX = 100_000
SLOT = 7
MOVE = mv.Move("m1", SLOT, "src", "dst", "ctl")


class Violation(AssertionError):
    """An invariant of the move broke (the message says which, at which tick)."""


@dataclass(frozen=True)
class Created:
    inode: int


@dataclass(frozen=True)
class Stage:
    """The target's staging record: the slot as the source had it through ``txid``."""

    move_id: str
    inodes: tuple[int, ...]
    txid: int


@dataclass(frozen=True)
class Chunk:
    move: mv.Move
    inodes: tuple[int, ...]
    txid: int


@dataclass(frozen=True)
class ChunkAck:
    move_id: str
    txid: int


@dataclass(frozen=True)
class Create:
    inode: int


@dataclass(frozen=True)
class CreateAnswer:
    inode: int
    outcome: str  # "ok", "wait", "wrong_shard"


@dataclass
class SlotState:
    """A shard's view of the slot, replayed from its journal."""

    inodes: list[int] = field(default_factory=list)
    fenced: bool = False
    dropped: bool = False
    owned: bool = False  # target: OWN journaled
    staging: tuple[int, ...] | None = None
    staged_txid: int = -1
    acquired: tuple[int, ...] | None = None
    kinds: list[mv.Kind] = field(default_factory=list)

    def apply(self, record: object) -> None:
        if isinstance(record, Created):
            self.inodes.append(record.inode)
        elif isinstance(record, Stage):
            self.staging, self.staged_txid = record.inodes, record.txid
        elif isinstance(record, mv.MoveRecord):
            self.kinds.append(record.kind)
            self._apply_move(record)

    def _apply_move(self, record: mv.MoveRecord) -> None:
        kind = record.kind
        if kind is mv.Kind.HANDOFF:
            self.fenced = True
        elif kind is mv.Kind.CANCEL:
            self.fenced = False
        elif kind is mv.Kind.DROP:
            self.fenced, self.dropped, self.inodes = False, True, []
        elif kind is mv.Kind.ACQUIRE:
            self.acquired = self.staging if self.staging is not None else ()
        elif kind is mv.Kind.OWN:
            self.owned, self.inodes = True, list(self.acquired or ())
            self.staging = self.acquired = None
        elif kind is mv.Kind.DISCARD:
            self.staging = self.acquired = None


class Shard(JournaledProcess):
    def __init__(self, name: str, sim: MoveSim, inodes: list[int]) -> None:
        super().__init__(name, sim.scheduler, sim.rng)
        self.sim = sim
        self.initial = inodes
        self.core: mv.MoveSource | mv.MoveTarget | mv.MoveController | None = None
        self.fencing = False
        self.boot()

    def boot(self) -> None:
        self.core = self.sim.roles[self.name](self.name, SETTINGS)
        self.fencing = False
        records = tuple(r for r in self.durable if isinstance(r, mv.MoveRecord))
        owners = ((SLOT, self.sim.owner),) if self.name == "ctl" else ()
        self.run(mv.Recover(records, owners))
        if self.name == "dst":
            state = self.state()
            if state.staging is not None and state.acquired is None:
                self.run(mv.StagingLost(MOVE))

    def state(self, *, durable_only: bool = False) -> SlotState:
        state = SlotState(list(self.initial))
        for r in self.durable if durable_only else self.durable + self.pending:
            state.apply(r)
        return state

    def crash(self) -> None:
        if not self.up:
            return
        self.lose_unsynced()
        self.core = None
        self.sim.coverage[f"{self.name} crashed"] += 1
        super().crash()
        self.sim.changed()
        if self.sim.faults.enabled:
            self.scheduler.at(self.sim.rng.randint(5, 80), self.restart)

    def restart(self) -> None:
        if not self.up:
            super().restart()
            self.boot()

    # --- input --------------------------------------------------------------------------

    def receive(self, sender: str, message: object) -> None:
        if self.sim.faults.pick() == "crash":
            self.crash()
        elif isinstance(message, Create):
            self.create(message)
        elif isinstance(message, Chunk):
            self.chunk(message)
        elif isinstance(message, ChunkAck):
            head = self.head()
            self.run(mv.StreamProgress(message.move_id, message.txid, head))
        elif isinstance(message, mv.MoveMessage):
            self.run(message)

    def serves(self) -> bool:
        state = self.state()
        if self.name == "src":
            return not state.dropped and not state.fenced and not self.fencing
        return state.owned

    def head(self) -> int:
        """The slot's last synced edit here (its txid: the count of creates)."""
        return sum(isinstance(r, Created) for r in self.durable)

    def create(self, create: Create) -> None:
        state = self.state()
        if create.inode in self.state(durable_only=True).inodes:
            self.answer(create, "ok")  # a retry of one applied (the retry cache)
        elif create.inode in state.inodes:
            return  # a retry of one being synced: the first answer comes with the sync
        elif self.serves():
            self.journal(Created(create.inode), partial(self.answer, create, "ok"))
        elif self.name == "src" and (state.fenced or self.fencing) and not state.dropped:
            self.answer(create, "wait")
        else:
            self.answer(create, "wrong_shard")

    def answer(self, create: Create, outcome: str) -> None:
        if outcome == "ok":
            self.sim.acknowledged.add(create.inode)
        self.sim.network.send(self.name, "client", CreateAnswer(create.inode, outcome))

    def chunk(self, chunk: Chunk) -> None:
        assert isinstance(self.core, mv.MoveTarget)
        if not self.core.accepts(chunk.move.move_id) or chunk.txid < self.state().staged_txid:
            return  # over, or older than what is staged (the stream's sequence check)
        record = Stage(chunk.move.move_id, chunk.inodes, chunk.txid)

        def staged() -> None:
            self.sim.network.send(self.name, "src", ChunkAck(chunk.move.move_id, chunk.txid))
            self.run(mv.Staged(chunk.move, chunk.txid))

        self.journal(record, staged)

    # --- actions ------------------------------------------------------------------------

    def run(self, event: mv.MoveEvent) -> None:
        core = self.core
        if core is None:
            return
        for action in core.on(event):
            if self.sim.faults.pick() == "crash":
                self.crash()
                return
            self.act(action)

    def act(self, action: mv.MoveAction) -> None:
        if isinstance(action, mv.Journal):
            record = action.record
            if record.kind is mv.Kind.CANCEL:
                self.fencing = False  # the driver unfences as it journals CANCEL
            self.journal(record, partial(self.run, mv.Journaled(record)))
        elif isinstance(action, mv.Send):
            self.sim.network.send(self.name, action.to, action.message)
        elif isinstance(action, mv.Stream):
            if not action.stop:
                self.later(1, partial(self.pump, action.move, self.incarnation))
        elif isinstance(action, mv.Fence):
            self.fencing = True
            self.later(1, partial(self.fenced, action.move))
        elif isinstance(action, mv.CasMap):
            self.sim.cas(action.move)
        elif isinstance(action, mv.Done):
            self.sim.done.append(action)
        else:
            event = action.event
            self.later(max(1, round(action.delay_s * TICKS_PER_S)), partial(self.run, event))

    def pump(self, move: mv.Move, incarnation: int) -> None:
        """Stream the slot's synced state to the target, over and over, until the move
        leaves the source (this incarnation's stream)."""
        assert isinstance(self.core, mv.MoveSource)
        m = self.core.moves.get(move.move_id)
        if m is None or m.phase is mv.SPhase.DONE or incarnation != self.incarnation:
            return
        inodes = tuple(self.state(durable_only=True).inodes)
        self.sim.network.send(self.name, move.target, Chunk(move, inodes, self.head()))
        self.later(self.sim.rng.randint(2, 6), partial(self.pump, move, incarnation))

    def fenced(self, move: mv.Move) -> None:
        if any(isinstance(r, Created) for r in self.pending):
            self.later(1, partial(self.fenced, move))  # in-flight creates sync first
            return
        self.run(mv.Fenced(move.move_id, self.head()))

    def journal_changed(self) -> None:
        self.sim.changed()


class Client(Process):
    """Creates files in the slot, each until it is acknowledged (or the client crashes)."""

    def __init__(self, sim: MoveSim) -> None:
        super().__init__("client", sim.scheduler)
        self.sim = sim
        self.cached_owner = "src"
        self.done: set[int] = set()

    def create(self, inode: int) -> None:
        if inode in self.done:
            return
        if self.sim.faults.enabled and self.sim.rng.random() < 0.01:
            self.crash()
            return
        self.sim.network.send(self.name, self.cached_owner, Create(inode))
        self.later(self.sim.rng.randint(15, 40), partial(self.create, inode))

    def receive(self, sender: str, message: object) -> None:
        if not isinstance(message, CreateAnswer):
            return
        if message.outcome == "ok":
            self.done.add(message.inode)
        elif message.outcome == "wrong_shard":
            self.cached_owner = self.sim.owner  # read the map again
            self.sim.coverage["WrongShard"] += 1
        else:
            self.sim.coverage["waited on a fenced slot"] += 1


@dataclass
class MoveOutcome:
    seed: int
    committed: bool
    steps: int
    coverage: Counter[str]


Role = type[mv.MoveSource] | type[mv.MoveTarget] | type[mv.MoveController]


class MoveSim:
    def __init__(self, seed: int, *, source_cls: type[mv.MoveSource] = mv.MoveSource,
                 target_cls: type[mv.MoveTarget] = mv.MoveTarget,
                 controller_cls: type[mv.MoveController] = mv.MoveController) -> None:
        self.seed = seed
        self.roles: dict[str, Role] = {"src": source_cls, "dst": target_cls,
                                       "ctl": controller_cls}
        self.rng = random.Random(seed)
        self.scheduler = Scheduler()
        self.faults = FaultPlan(self.rng, self.rng.choice([0.0, 0.02, 0.05, 0.1]), ("crash",))
        net = FaultPlan(self.rng, self.rng.choice([0.0, 0.05, 0.15, 0.3]), Network.FAULTS)
        self.net_faults = net
        self.processes: dict[str, Process] = {}
        self.network = Network(self.scheduler, self.rng, net, self.processes)
        self.owner = "src"  # the slot map in ZooKeeper
        self.acknowledged: set[int] = set()
        self.done: list[mv.Done] = []
        self.coverage: Counter[str] = Counter()
        self.ready = False
        self.initial = list(range(1, self.rng.randint(2, 6)))
        self.client = Client(self)
        self.processes["client"] = self.client
        for name in ("ctl", "src", "dst"):
            self.processes[name] = Shard(name, self, self.initial if name == "src" else [])
        self.ready = True
        self.scheduler.at(self.rng.randint(0, 50),
                          partial(self.shard("ctl").run, mv.StartMove(MOVE)))
        for inode in range(100, 100 + self.rng.randint(0, 12)):
            self.scheduler.at(self.rng.randint(0, 300), partial(self.client.create, inode))

    def shard(self, name: str) -> Shard:
        p = self.processes[name]
        assert isinstance(p, Shard)
        return p

    def cas(self, move: mv.Move) -> None:
        """The controller's compare-and-set in ZooKeeper: atomic; the answer may be lost
        with the controller."""
        ok = self.owner == move.source
        if ok:
            self.owner = move.target
            self.coverage["map CAS"] += 1
            self.changed()
        ctl = self.shard("ctl")
        ctl.later(1, partial(ctl.run, mv.CasDone(move.move_id, ok)))

    def _fail(self, what: str) -> None:
        raise Violation(f"seed {self.seed} tick {self.scheduler.now}: {what}")

    def changed(self) -> None:
        if not self.ready:
            return
        src, dst = self.shard("src"), self.shard("dst")
        if src.serves() and dst.serves():
            self._fail("the slot is served by both shards")
        s, d = src.state(), dst.state()
        if (d.owned or s.dropped) and self.owner != "dst":
            self._fail("the slot changed hands before the map's CAS")
        if mv.Kind.CANCEL in s.kinds and self.owner != "src":
            self._fail("the source cancelled a move that committed")
        for r in src.durable:
            if isinstance(r, mv.MoveRecord) and r.kind is mv.Kind.HANDOFF:
                self._check_acquire(src, dst, r.txid)

    def _check_acquire(self, src: Shard, dst: Shard, txid: int) -> None:
        acquired = dst.state().acquired
        if acquired is None:
            return
        created = [r.inode for r in src.durable if isinstance(r, Created)][:txid]
        if sorted(acquired) != sorted(self.initial + created):
            self._fail(f"ACQUIRE holds {sorted(acquired)}, the source had "
                       f"{sorted(self.initial + created)} at HANDOFF")

    def run(self) -> MoveOutcome:
        self.scheduler.run(until=FAULT_TICKS)
        self.faults.enabled = self.net_faults.enabled = False
        for name in ("ctl", "src", "dst"):
            self.shard(name).restart()
        try:
            self.scheduler.run(max_steps=STEPS_MAX)
        except AssertionError as e:
            self._fail(f"no end once faults stopped ({e})")
        self._final()
        return MoveOutcome(self.seed, self.owner == "dst", self.scheduler.steps,
                           self.coverage)

    def _final(self) -> None:
        ctl = self.shard("ctl")
        assert isinstance(ctl.core, mv.MoveController)
        if ctl.core.moves:
            self._fail(f"moves never ended: {sorted(ctl.core.moves)}")
        src, dst = self.shard("src"), self.shard("dst")
        s, d = src.state(durable_only=True), dst.state(durable_only=True)
        if s.fenced or d.staging is not None or d.acquired is not None:
            self._fail(f"left fenced ({s.fenced}) or staging ({d.staging}, {d.acquired})")
        owner, other = (d, s) if self.owner == "dst" else (s, d)
        if other.inodes:
            self._fail(f"the shard that does not own the slot holds {other.inodes}")
        if len(owner.inodes) != len(set(owner.inodes)):
            self._fail(f"a create applied twice: {sorted(owner.inodes)}")
        missing = (set(self.initial) | self.acknowledged) - set(owner.inodes)
        if missing:
            self._fail(f"acknowledged creates lost: {sorted(missing)}")


def run_move_seed(seed: int, *, source_cls: type[mv.MoveSource] = mv.MoveSource,
                  target_cls: type[mv.MoveTarget] = mv.MoveTarget,
                  controller_cls: type[mv.MoveController] = mv.MoveController) -> MoveOutcome:
    """One seeded run; Violation when an invariant breaks."""
    return MoveSim(seed, source_cls=source_cls, target_cls=target_cls,
                   controller_cls=controller_cls).run()
