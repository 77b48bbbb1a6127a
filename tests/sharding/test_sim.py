"""The generic seeded simulator: logical time, processes whose timers die with them, a
network that reorders and loses, and runs that repeat exactly for one seed."""

from __future__ import annotations

import random

import pytest

from xdfs.testing.sim import FaultPlan, Network, Process, Scheduler
from xdfs.testing.twophase_sim import run_seed


class Echo(Process):
    def __init__(self, name: str, scheduler: Scheduler) -> None:
        super().__init__(name, scheduler)
        self.got: list[object] = []

    def receive(self, sender: str, message: object) -> None:
        self.got.append(message)


def test_scheduler_runs_in_time_then_insertion_order() -> None:
    s = Scheduler()
    seen: list[str] = []
    s.at(2, lambda: seen.append("b"))
    s.at(1, lambda: seen.append("a"))
    s.at(2, lambda: seen.append("c"))
    s.run()
    assert seen == ["a", "b", "c"] and s.now == 2 and s.idle


def test_scheduler_reports_a_run_that_never_ends() -> None:
    s = Scheduler()

    def again() -> None:
        s.at(1, again)

    s.at(0, again)
    with pytest.raises(AssertionError, match="still busy"):
        s.run(max_steps=50)


def test_a_crash_cancels_the_timers_of_that_incarnation() -> None:
    s = Scheduler()
    p = Echo("p", s)
    fired: list[int] = []
    p.later(5, lambda: fired.append(1))
    p.crash()
    p.restart()
    p.later(5, lambda: fired.append(2))
    s.run()
    assert fired == [2]


def test_network_loses_messages_for_a_process_that_is_down() -> None:
    s = Scheduler()
    nodes = {"a": Echo("a", s), "b": Echo("b", s)}
    net = Network(s, random.Random(1), FaultPlan(random.Random(1), 0.0, Network.FAULTS),
                  nodes)
    net.send("a", "b", 1)
    nodes["b"].crash()
    net.send("a", "b", 2)
    s.run()
    assert nodes["b"].got == []
    nodes["b"].restart()
    for i in range(20):
        net.send("a", "b", i)
    s.run()
    assert sorted(int(str(m)) for m in nodes["b"].got) == list(range(20))  # in some order


def test_a_seed_is_one_run() -> None:
    assert run_seed(7, "rename") == run_seed(7, "rename")
    assert run_seed(7, "top_layer") == run_seed(7, "top_layer")
