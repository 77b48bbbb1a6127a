"""A seeded simulator of the sharding two-phase commit (:mod:`xdfs.sharding.twophase`).

Shards (and, for top-layer changes, a controller) run the real pure cores over
:mod:`xdfs.testing.sim`: messages are delayed, reordered, duplicated and lost; a party may
crash before any action it was told to carry out and restarts later from its journal. A
journal write is durable only once its sync completes: a crash keeps a random prefix of
the unsynced records and loses the rest, memory and timers with them. Clients send their
request again until they hear an answer, and may crash too.

Each shard's namespace is a function of its journal (as a NameNode's is of its edit log):
the model replays it. Two scenarios:

* ``top_layer``: a controller sets top-layer directory attributes on every shard; two
  transactions on one directory conflict (the second finds it locked and is refused);
* ``rename``: one cross-partition rename of a subtree from the source shard (the
  coordinator) to the destination shard, while clients create files in the subtree.

Invariants, checked after every journal change and at the end:

1. no record twice, no decision without a PREPARE before it, at most one decision per
   transaction in each journal (a decision never changes once journaled);
2. a participant commits only what the coordinator's journal holds a COMMIT for, and never
   aborts one it does;
3. (rename) the subtree is never present on two shards;

and, once faults stop and everything went quiet (which must happen: termination):

4. every transaction is ENDed and no participant is left prepared (no lock held);
5. (top layer) all shards committed a transaction or none did, and they agree on every
   directory; (rename) exactly one of source and destination exists, holding the subtree
   with every acknowledged create, once;
6. every answer a client heard for a transaction is the same, and a success matches the
   outcome.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from functools import partial

from xdfs.sharding import twophase as tp
from xdfs.testing.sim import FaultPlan, JournaledProcess, Network, Process, Scheduler

TICKS_PER_S = 10
SETTINGS = tp.Settings(resend_s=2.0, prepare_ticks_max=6)
FAULT_TICKS = 400  # faults happen in the first ticks of a run only
STEPS_MAX = 100_000  # after the faults: more means the protocol does not terminate
REFUSED = 999  # the error code of a participant's refusal in the model

Record = tp.CoordinatorRecord | tp.ParticipantRecord


class Violation(AssertionError):
    """An invariant of the protocol broke (the message says which, at which tick)."""


# --- the changes the model knows ----------------------------------------------------------


@dataclass(frozen=True)
class SetAttr:
    """A top-layer change: directory ``path`` gets attribute ``value`` (every shard)."""

    path: str
    value: str


@dataclass(frozen=True)
class RemoveTree:
    """The rename's source: drop the subtree at ``path``, as of ``version``."""

    path: str
    version: int


@dataclass(frozen=True)
class AddTree:
    """The rename's destination: the subtree's image, to appear at ``path``."""

    path: str
    inodes: frozenset[int]


@dataclass(frozen=True)
class Created:
    """A create in a subtree (a plain, single-shard edit)."""

    path: str
    inode: int


# --- client requests ----------------------------------------------------------------------


@dataclass(frozen=True)
class SetAttrRequest:
    txid: str
    path: str
    value: str


@dataclass(frozen=True)
class RenameRequest:
    txid: str
    src: str
    dst: str
    dst_shard: str


@dataclass(frozen=True)
class Answer:
    txid: str
    code: int


# --- a shard's namespace, replayed from its journal -----------------------------------------


@dataclass
class Namespace:
    trees: dict[str, set[int]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    attrs: dict[str, str] = field(default_factory=dict)
    staged: dict[str, object] = field(default_factory=dict)  # txid -> prepared change
    broken: list[str] = field(default_factory=list)

    def locked(self, path: str) -> bool:
        return any(getattr(c, "path", None) == path for c in self.staged.values())

    def apply(self, record: object) -> None:
        if isinstance(record, Created):
            self.trees[record.path].add(record.inode)
            self.versions[record.path] = self.versions.get(record.path, 0) + 1
        elif isinstance(record, tp.ParticipantRecord):
            self._apply_tx(record)

    def _apply_tx(self, record: tp.ParticipantRecord) -> None:
        if record.kind is tp.Kind.PREPARE:
            self.staged[record.txid] = record.change
            return
        change = self.staged.pop(record.txid, None)
        if record.kind is not tp.Kind.COMMIT:
            return
        if isinstance(change, SetAttr):
            self.attrs[change.path] = change.value
        elif isinstance(change, RemoveTree):
            del self.trees[change.path]
        elif isinstance(change, AddTree):
            self.trees[change.path] = set(change.inodes)
            self.versions[change.path] = 0
        else:
            self.broken.append(f"COMMIT of {record.txid} without a PREPARE")


def replay(initial: dict[str, set[int]], records: list[object]) -> Namespace:
    ns = Namespace({p: set(i) for p, i in initial.items()}, {p: 0 for p in initial})
    for record in records:
        ns.apply(record)
    return ns


# --- one party ----------------------------------------------------------------------------


class Node(JournaledProcess):
    """A shard (participant; the coordinator too for a rename it started) or the
    controller (coordinator only, its journal standing for ZooKeeper)."""

    def __init__(self, name: str, sim: TwoPhaseSim, *, coordinates: bool,
                 participates: bool, initial: dict[str, set[int]] | None = None) -> None:
        super().__init__(name, sim.scheduler, sim.rng)
        self.sim = sim
        self.coordinates = coordinates
        self.participates = participates
        self.initial = initial or {}
        self.coordinator: tp.Coordinator | None = None
        self.participant: tp.Participant | None = None
        self._boot()

    # --- life -----------------------------------------------------------------------------

    def _boot(self) -> None:
        settings = self.sim.settings
        self.coordinator = (self.sim.coordinator_cls(self.name, settings)
                            if self.coordinates else None)
        self.participant = (self.sim.participant_cls(self.name, settings)
                            if self.participates else None)
        records = tuple(r for r in self.durable
                        if isinstance(r, tp.CoordinatorRecord | tp.ParticipantRecord))
        for core in (self.coordinator, self.participant):
            if core is not None:
                self._run(core, tp.Recover(records))
        if self.participant is not None and self.participant.in_doubt():
            self.sim.coverage["restarted in doubt"] += 1
        if self.coordinator is not None and self.coordinator.txs:
            self.sim.coverage["coordinator restarted mid-transaction"] += 1

    def crash(self) -> None:
        if not self.up:
            return
        self.lose_unsynced()
        self.coordinator = self.participant = None
        self.sim.coverage["crashes"] += 1
        super().crash()
        self.sim.journal_changed(self)
        if self.sim.faults.enabled:
            self.scheduler.at(self.sim.rng.randint(5, 80), self.restart)

    def restart(self) -> None:
        if self.up:
            return
        super().restart()
        self._boot()

    def namespace(self, *, durable_only: bool = False) -> Namespace:
        return replay(self.initial, self.durable if durable_only else
                      self.durable + self.pending)

    # --- input ----------------------------------------------------------------------------

    def receive(self, sender: str, message: object) -> None:
        if self.sim.faults.pick() == "crash":
            self.crash()
            return
        if isinstance(message, tp.PrepareMsg | tp.DecisionMsg):
            if self.participant is not None:
                self._run(self.participant, message)
        elif isinstance(message, tp.VoteMsg | tp.AckMsg):
            if self.coordinator is not None:
                self._run(self.coordinator, message)
        elif isinstance(message, SetAttrRequest | RenameRequest):
            self._request(message)
        elif isinstance(message, Created):
            self._create(message)

    def _request(self, request: SetAttrRequest | RenameRequest) -> None:
        assert self.coordinator is not None
        changes: dict[str, object]
        order: tuple[tuple[str, ...], ...] = ()
        if isinstance(request, SetAttrRequest):
            change = SetAttr(request.path, request.value)
            changes = dict.fromkeys(self.sim.shards, change)
        else:
            ns = self.namespace()  # the driver takes the image as the request arrives
            tree = ns.trees.get(request.src, set())
            changes = {self.name: RemoveTree(request.src, ns.versions.get(request.src, -1)),
                       request.dst_shard: AddTree(request.dst, frozenset(tree))}
            order = ((self.name,), (request.dst_shard,))
        self._run(self.coordinator, tp.Begin(request.txid, changes, order))

    def _create(self, create: Created) -> None:
        ns = self.namespace()
        if create.path in ns.trees and not ns.locked(create.path):
            self.journal(create, lambda: self.sim.acknowledged.add(create.inode))

    # --- actions --------------------------------------------------------------------------

    def _run(self, core: tp.Coordinator | tp.Participant, event: tp.Event) -> None:
        for action in core.on(event):
            if self.sim.faults.pick() == "crash":
                self.crash()  # the actions left are never carried out
                return
            self._act(core, action)

    def _act(self, core: tp.Coordinator | tp.Participant, action: tp.Action) -> None:
        if isinstance(action, tp.Journal):
            record = action.record
            self.journal(record, lambda: self._run(core, tp.Journaled(record)))
        elif isinstance(action, tp.Prepare):
            self._prepare(core, action.record)
        elif isinstance(action, tp.Send):
            self.sim.sent(self, action.message)
            self.sim.network.send(self.name, action.to, action.message)
        elif isinstance(action, tp.Reply):
            self.sim.network.send(self.name, "client", Answer(action.txid, action.code))
        else:
            event = action.event
            self.later(max(1, round(action.delay_s * TICKS_PER_S)),
                       lambda: self._run(core, event))

    def _prepare(self, core: tp.Coordinator | tp.Participant,
                 record: tp.ParticipantRecord) -> None:
        problem = self.sim.check(self, record.change)
        if problem is not None:
            self.later(1, lambda: self._run(core, tp.Refused(record.txid, REFUSED, problem)))
            return
        self.journal(record, lambda: self._run(core, tp.Prepared(record.txid)))

    def journal_changed(self) -> None:
        self.sim.journal_changed(self)


# --- the clients --------------------------------------------------------------------------


class Client(Process):
    """Sends each request until it hears an answer (or crashes, and never asks again)."""

    def __init__(self, sim: TwoPhaseSim) -> None:
        super().__init__("client", sim.scheduler)
        self.sim = sim
        self.answers: dict[str, list[int]] = {}

    def ask(self, to: str, request: SetAttrRequest | RenameRequest) -> None:
        if request.txid in self.answers:
            return
        if self.sim.faults.enabled and self.sim.rng.random() < 0.02:
            self.crash()  # gone for good: nobody asks again
            return
        self.sim.network.send(self.name, to, request)
        self.later(self.sim.rng.randint(20, 60), lambda: self.ask(to, request))

    def receive(self, sender: str, message: object) -> None:
        if isinstance(message, Answer):
            self.answers.setdefault(message.txid, []).append(message.code)


# --- the simulation -----------------------------------------------------------------------


@dataclass
class Outcome:
    coverage: Counter[str]
    seed: int
    steps: int
    ticks: int
    messages: int
    committed: int
    aborted: int


class TwoPhaseSim:
    def __init__(self, seed: int, scenario: str, *,
                 participant_cls: type[tp.Participant] = tp.Participant,
                 coordinator_cls: type[tp.Coordinator] = tp.Coordinator,
                 settings: tp.Settings = SETTINGS) -> None:
        self.seed = seed
        self.scenario = scenario
        self.rng = random.Random(seed)
        self.scheduler = Scheduler()
        self.settings = settings
        self.participant_cls = participant_cls
        self.coordinator_cls = coordinator_cls
        rate = self.rng.choice([0.0, 0.02, 0.05, 0.1])
        self.faults = FaultPlan(self.rng, rate, ("crash",))
        self.net_faults = FaultPlan(self.rng, self.rng.choice([0.0, 0.05, 0.15, 0.3]),
                                    Network.FAULTS)
        self.nodes: dict[str, Process] = {}
        self.network = Network(self.scheduler, self.rng, self.net_faults, self.nodes)
        self.acknowledged: set[int] = set()
        self.coverage: Counter[str] = Counter()
        self.shards: list[str] = []
        self.client = Client(self)
        self.nodes["client"] = self.client
        self.rename: RenameRequest | None = None
        self.subtree: set[int] = set()
        if scenario == "top_layer":
            self._top_layer()
        else:
            self._rename()

    # --- scenarios --------------------------------------------------------------------------

    def _top_layer(self) -> None:
        self.shards = [f"s{i}" for i in range(self.rng.randint(2, 4))]
        for s in self.shards:
            self.nodes[s] = Node(s, self, coordinates=False, participates=True)
        self.nodes["ctl"] = Node("ctl", self, coordinates=True, participates=False)
        for i in range(self.rng.randint(1, 4)):
            request = SetAttrRequest(f"t{i}", self.rng.choice(["/user", "/data"]), f"v{i}")
            self.scheduler.at(self.rng.randint(0, 100), partial(self.client.ask, "ctl", request))

    def _rename(self) -> None:
        self.shards = ["src", "dst"]
        self.subtree = set(range(1, self.rng.randint(2, 6)))
        self.nodes["src"] = Node("src", self, coordinates=True, participates=True,
                                 initial={"/user/a/x": set(self.subtree)})
        taken = self.rng.random() < 0.1  # the destination name exists: the rename fails
        self.nodes["dst"] = Node("dst", self, coordinates=False, participates=True,
                                 initial={"/user/b/y": {100}} if taken else {})
        self.rename = RenameRequest("r1", "/user/a/x", "/user/b/y", "dst")
        request = self.rename
        self.scheduler.at(self.rng.randint(0, 60), lambda: self.client.ask("src", request))
        for inode in range(10, 10 + self.rng.randint(0, 6)):
            create = Created("/user/a/x", inode)
            self.scheduler.at(self.rng.randint(0, 150),
                              partial(self.network.send, "client", "src", create))

    # --- the model's checks -----------------------------------------------------------------

    def check(self, node: Node, change: object) -> str | None:
        """Why a participant cannot prepare ``change`` now (None: it can)."""
        ns = node.namespace()
        if isinstance(change, SetAttr):
            if ns.locked(change.path):
                return f"{change.path} is locked by another change"
            return "refused by the shard" if self.rng.random() < 0.05 else None
        if isinstance(change, RemoveTree):
            if change.path not in ns.trees or ns.locked(change.path):
                return f"{change.path} is gone or locked"
            if ns.versions.get(change.path) != change.version:
                return f"{change.path} changed since the image was taken"
            return None
        if isinstance(change, AddTree):
            if change.path in ns.trees or ns.locked(change.path):
                return f"{change.path} exists"
            return None
        return f"unknown change {change!r}"

    def sent(self, node: Node, message: object) -> None:
        """YES only once the PREPARE is durable: the promise must survive a crash."""
        if isinstance(message, tp.VoteMsg) and message.yes and not any(
                isinstance(r, tp.ParticipantRecord) and r.kind is tp.Kind.PREPARE
                and r.txid == message.txid for r in node.durable):
            self._fail(f"{node.name} voted YES for {message.txid} with no durable PREPARE")

    def _node(self, name: str) -> Node:
        node = self.nodes[name]
        assert isinstance(node, Node)
        return node

    def _fail(self, what: str) -> None:
        raise Violation(f"seed {self.seed} ({self.scenario}) tick {self.scheduler.now}: {what}")

    def journal_changed(self, node: Node) -> None:
        self._check_records(node)
        if self.scenario == "top_layer":
            self._check_decisions(node)
        else:
            self._check_decisions(node)
            self._check_one_copy()

    def _coordinator_records(self) -> list[object]:
        host = "ctl" if self.scenario == "top_layer" else "src"
        return self._node(host).durable

    def _check_records(self, node: Node) -> None:
        seen: set[tuple[type, str, tp.Kind]] = set()
        for r in node.durable + node.pending:
            if not isinstance(r, tp.CoordinatorRecord | tp.ParticipantRecord):
                continue
            key = (type(r), r.txid, r.kind)
            if key in seen:
                self._fail(f"{node.name} journaled {r.kind.value} of {r.txid} twice")
            if r.kind is not tp.Kind.PREPARE and (type(r), r.txid, tp.Kind.PREPARE) not in seen:
                self._fail(f"{node.name} journaled {r.kind.value} of {r.txid} unprepared")
            if {tp.Kind.COMMIT, tp.Kind.ABORT} <= {k for t, x, k in seen | {key}
                                                   if t is type(r) and x == r.txid}:
                self._fail(f"{node.name} journaled both decisions for {r.txid}")
            seen.add(key)

    def _check_decisions(self, node: Node) -> None:
        decided = {r.txid: r.kind for r in self._coordinator_records()
                   if isinstance(r, tp.CoordinatorRecord)
                   and r.kind in (tp.Kind.COMMIT, tp.Kind.ABORT)}
        for r in node.durable:
            if isinstance(r, tp.ParticipantRecord) and r.kind is tp.Kind.COMMIT \
                    and decided.get(r.txid) is not tp.Kind.COMMIT:
                self._fail(f"{node.name} committed {r.txid} before the commit point")
            if isinstance(r, tp.ParticipantRecord) and r.kind is tp.Kind.ABORT \
                    and decided.get(r.txid) is tp.Kind.COMMIT:
                self._fail(f"{node.name} aborted {r.txid}, which committed")

    def _check_one_copy(self) -> None:
        assert self.rename is not None
        holders = [n for n, path in (("src", self.rename.src), ("dst", self.rename.dst))
                   if path in self._node(n).namespace().trees
                   and (n == "src" or self._moved_in())]
        if len(holders) > 1:
            self._fail(f"the subtree is on {holders}")

    def _moved_in(self) -> bool:
        """The destination holds the renamed subtree (not a name that existed before)."""
        assert self.rename is not None
        return self.rename.dst not in self._node("dst").initial

    # --- the run ----------------------------------------------------------------------------

    def run(self) -> Outcome:
        self.scheduler.run(until=FAULT_TICKS)
        self.faults.enabled = self.net_faults.enabled = False
        for node in self.nodes.values():
            if isinstance(node, Node):
                node.restart()
        try:
            self.scheduler.run(max_steps=STEPS_MAX)
        except AssertionError as e:
            self._fail(f"no end once faults stopped ({e})")
        return self._final()

    def _final(self) -> Outcome:
        nodes = [n for n in self.nodes.values() if isinstance(n, Node)]
        for node in nodes:
            self._check_records(node)
            self._check_decisions(node)
            ns = node.namespace(durable_only=True)
            if ns.staged:
                self._fail(f"{node.name} is left prepared for {sorted(ns.staged)}")
            if ns.broken:
                self._fail(f"{node.name}: {ns.broken}")
        coordinator = self._coordinator_records()
        begun = {r.txid for r in coordinator
                 if isinstance(r, tp.CoordinatorRecord) and r.kind is tp.Kind.PREPARE}
        ended = {r.txid for r in coordinator
                 if isinstance(r, tp.CoordinatorRecord) and r.kind is tp.Kind.END}
        if begun != ended:
            self._fail(f"transactions never ended: {sorted(begun - ended)}")
        committed = {r.txid for r in coordinator
                     if isinstance(r, tp.CoordinatorRecord) and r.kind is tp.Kind.COMMIT}
        if self.scenario == "top_layer":
            self._final_top_layer(nodes, committed)
        else:
            self._final_rename(committed)
        self._final_answers(committed, begun)
        return Outcome(self.coverage, self.seed, self.scheduler.steps, self.scheduler.now,
                       self.network.sent, len(committed), len(begun - committed))

    def _final_top_layer(self, nodes: list[Node], committed: set[str]) -> None:
        for node in nodes:
            if not node.participates:
                continue
            mine = {r.txid for r in node.durable
                    if isinstance(r, tp.ParticipantRecord) and r.kind is tp.Kind.COMMIT}
            if mine != committed:
                self._fail(f"{node.name} committed {sorted(mine)}, the cluster "
                           f"{sorted(committed)}")
        views = {n.name: n.namespace().attrs for n in nodes if n.participates}
        if len({tuple(sorted(v.items())) for v in views.values()}) != 1:
            self._fail(f"shards disagree on the top layer: {views}")

    def _final_rename(self, committed: set[str]) -> None:
        assert self.rename is not None
        src = self._node("src").namespace(durable_only=True).trees
        dst = self._node("dst").namespace(durable_only=True).trees
        moved = self.rename.txid in committed
        here = dst.get(self.rename.dst) if moved else src.get(self.rename.src)
        if moved and self.rename.src in src:
            self._fail("the rename committed but the source still exists")
        if here is None:
            self._fail(f"the subtree is lost (committed: {moved})")
            return
        if not moved and self._moved_in() and self.rename.dst in dst:
            self._fail("the rename aborted but the destination exists")
        expected = self.subtree | self.acknowledged
        if not expected <= here or not here <= expected | set(range(10, 20)):
            self._fail(f"the subtree holds {sorted(here)}, expected {sorted(expected)}")

    def _final_answers(self, committed: set[str], begun: set[str]) -> None:
        for txid, codes in self.client.answers.items():
            if len(set(codes)) != 1:
                self._fail(f"the client heard {codes} for {txid}")
            if (codes[0] == 0) != (txid in committed):
                self._fail(f"the client heard {codes[0]} for {txid}, committed: "
                           f"{txid in committed}")
            if txid not in begun:
                self._fail(f"an answer for {txid}, which never began")


def run_seed(seed: int, scenario: str, *,
             participant_cls: type[tp.Participant] = tp.Participant,
             coordinator_cls: type[tp.Coordinator] = tp.Coordinator) -> Outcome:
    """One seeded run; Violation when an invariant breaks."""
    return TwoPhaseSim(seed, scenario, participant_cls=participant_cls,
                       coordinator_cls=coordinator_cls).run()
