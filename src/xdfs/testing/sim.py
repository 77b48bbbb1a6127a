"""Seeded deterministic simulation (in the spirit of FoundationDB's simulator and
TigerBeetle's VOPR): logical time, a network that delays, reorders, duplicates and drops
messages, and processes that crash (losing their memory and their timers) and restart.

Everything is chosen by one ``random.Random``: a run of a seed is always the same run, and
no wall-clock time passes, so a thousand seeds take seconds. The pieces:

* :class:`FaultPlan`: how likely a fault is at a decision point, and which ones may happen;
* :class:`Scheduler`: callbacks at logical ticks, ties in the order they were scheduled;
* :class:`Process`: a named party that is up or down, whose timers die with it;
* :class:`JournaledProcess`: a process whose journal writes are durable once synced;
* :class:`Network`: messages between processes, each after a random delay.

A protocol's simulator builds its parties on these, feeds its pure cores and checks its
invariants (``xdfs.testing.twophase_sim``; the quorum journal's ``tests/quorum/sim.py``
uses the fault plan).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass
class FaultPlan:
    """The seed's choices: how likely a fault is, and which ones may happen."""

    rng: random.Random
    rate: float
    faults: tuple[str, ...]
    enabled: bool = True

    def pick(self) -> str | None:
        if not self.enabled or self.rng.random() >= self.rate:
            return None
        return self.rng.choice(self.faults)


class Scheduler:
    """Logical time. ``at(delay, fn)`` runs ``fn`` ``delay`` ticks from now."""

    def __init__(self) -> None:
        self.now = 0
        self.steps = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0

    def at(self, delay: int, fn: Callable[[], None]) -> None:
        assert delay >= 0
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, fn))

    @property
    def idle(self) -> bool:
        return not self._queue

    def step(self) -> bool:
        """Run the next callback; False when none is left."""
        if not self._queue:
            return False
        self.now, _, fn = heapq.heappop(self._queue)
        self.steps += 1
        fn()
        return True

    def run(self, *, until: int | None = None, max_steps: int = 1_000_000,
            after_step: Callable[[], None] | None = None) -> None:
        """Step until nothing is left (or logical time ``until``); AssertionError when
        ``max_steps`` pass first (the protocol does not terminate)."""
        for _ in range(max_steps):
            if not self._queue or (until is not None and self._queue[0][0] > until):
                return
            self.step()
            if after_step is not None:
                after_step()
        raise AssertionError(f"still busy after {max_steps} steps at tick {self.now}")


class Process:
    """A party that can crash and restart. Its timers (``later``) belong to one incarnation:
    a crash cancels them, as it would a real process's."""

    def __init__(self, name: str, scheduler: Scheduler) -> None:
        self.name = name
        self.scheduler = scheduler
        self.up = True
        self.incarnation = 0

    def later(self, delay: int, fn: Callable[[], None]) -> None:
        incarnation = self.incarnation

        def fire() -> None:
            if self.up and self.incarnation == incarnation:
                fn()

        self.scheduler.at(delay, fire)

    def crash(self) -> None:
        self.up = False
        self.incarnation += 1

    def restart(self) -> None:
        self.up = True
        self.incarnation += 1

    def receive(self, sender: str, message: object) -> None:
        raise NotImplementedError


class JournaledProcess(Process):
    """A process with a journal: an append is durable only once its sync completes, a few
    ticks later (with every record before it); a crash keeps a random prefix of what was
    not yet synced (what reached the disk). ``durable + pending`` is what the process has
    written; ``durable`` is what survives its crash."""

    def __init__(self, name: str, scheduler: Scheduler, rng: random.Random) -> None:
        super().__init__(name, scheduler)
        self.rng = rng
        self.durable: list[object] = []
        self.pending: list[object] = []

    def journal_changed(self) -> None:
        """Called whenever ``pending`` or ``durable`` changes: where a simulator checks its
        invariants."""

    def journal(self, record: object, then: Callable[[], None]) -> None:
        """Append ``record`` unsynced; ``then`` runs once its sync completes."""
        self.pending.append(record)
        self.journal_changed()

        def synced() -> None:
            for i, r in enumerate(self.pending):
                if r is record:
                    self.durable += self.pending[:i + 1]
                    del self.pending[:i + 1]
                    break
            self.journal_changed()
            then()

        self.later(self.rng.randint(1, 3), synced)

    def lose_unsynced(self) -> None:
        """A crash's effect on the journal: a random prefix of the unsynced records reached
        the disk, the rest is lost."""
        keep = self.rng.randint(0, len(self.pending))
        self.durable += self.pending[:keep]
        self.pending = []


class Network:
    """Messages between processes. Each takes 1..``delay_max`` ticks (so they reorder); the
    plan may ``drop`` one, ``duplicate`` it, or ``delay`` it up to ten times longer. A
    message for a process that is down when it arrives is lost."""

    FAULTS = ("drop", "duplicate", "delay")

    def __init__(self, scheduler: Scheduler, rng: random.Random, plan: FaultPlan,
                 processes: Mapping[str, Process], delay_max: int = 4) -> None:
        self.scheduler = scheduler
        self.rng = rng
        self.plan = plan
        self.processes = processes
        self.delay_max = delay_max
        self.sent = 0

    def send(self, sender: str, to: str, message: object) -> None:
        self.sent += 1
        fault = self.plan.pick()
        if fault == "drop":
            return
        copies = 2 if fault == "duplicate" else 1
        for _ in range(copies):
            delay = self.rng.randint(1, self.delay_max)
            if fault == "delay":
                delay *= self.rng.randint(2, 10)
            self.scheduler.at(delay, lambda: self._deliver(sender, to, message))

    def _deliver(self, sender: str, to: str, message: object) -> None:
        process = self.processes.get(to)
        if process is not None and process.up:
            process.receive(sender, message)
