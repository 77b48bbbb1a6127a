"""Seeded fault runs of the sharding two-phase commit (see xdfs.testing.twophase_sim for
the faults and the invariants), and proof that the simulator catches a broken rule.

``XDFS_2PC_SEEDS=N`` runs N seeds per scenario (default 1000), ``XDFS_2PC_SEED=S`` just S.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from xdfs.sharding import twophase as tp
from xdfs.testing.twophase_sim import Violation, run_seed

SEEDS = int(os.environ.get("XDFS_2PC_SEEDS", "1000"))
ONE_SEED = os.environ.get("XDFS_2PC_SEED")
SCENARIOS = ("top_layer", "rename")


def seeds() -> range:
    return range(int(ONE_SEED), int(ONE_SEED) + 1) if ONE_SEED else range(SEEDS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_seeded_runs_keep_every_invariant(scenario: str) -> None:
    coverage: Counter[str] = Counter()
    outcomes = Counter[str]()
    for seed in seeds():
        outcome = run_seed(seed, scenario)
        coverage += outcome.coverage
        outcomes["committed"] += outcome.committed
        outcomes["aborted"] += outcome.aborted
    if ONE_SEED:
        return
    # the seeds reach the cases that matter, both ways
    assert outcomes["committed"] > SEEDS // 10 and outcomes["aborted"] > SEEDS // 10
    assert coverage["restarted in doubt"] > SEEDS // 20
    assert coverage["coordinator restarted mid-transaction"] > SEEDS // 20


class EagerParticipant(tp.Participant):
    """Broken: votes YES as it starts journaling its PREPARE, not once it is durable."""

    def _on_PrepareMsg(self, event: tp.PrepareMsg) -> list[tp.Action]:
        actions = super()._on_PrepareMsg(event)
        if any(isinstance(a, tp.Prepare) for a in actions):
            actions.append(tp.Send(event.coordinator, tp.VoteMsg(event.txid, self.name, True)))
        return actions


class UnjournaledParticipant(tp.Participant):
    """Broken: prepares in memory only (no PREPARE record), then commits when told."""

    def _on_PrepareMsg(self, event: tp.PrepareMsg) -> list[tp.Action]:
        if event.txid in self.txs:
            return super()._on_PrepareMsg(event)
        tx = tp.ParticipantTx(event.txid, event.coordinator, event.change, tp.PPhase.PREPARED)
        self.txs[tx.txid] = tx
        return [tp.Send(tx.coordinator, tp.VoteMsg(tx.txid, self.name, True))]


class HastyCoordinator(tp.Coordinator):
    """Broken: sends COMMIT while its COMMIT record is still being journaled."""

    def _decide(self, tx: tp.CoordinatorTx, commit: bool, code: int = 0,
                reason: str = "") -> list[tp.Action]:
        actions = super()._decide(tx, commit, code, reason)
        if commit:
            actions += [tp.Send(p, tp.DecisionMsg(tx.txid, True, self.name))
                        for p in tx.changes]
        return actions


class UnorderedCoordinator(tp.Coordinator):
    """Broken for a rename: tells source and destination COMMIT at once."""

    def _on_Begin(self, event: tp.Begin) -> list[tp.Action]:
        return super()._on_Begin(tp.Begin(event.txid, event.changes))


@pytest.mark.parametrize(("scenario", "broken", "symptom"), [
    ("top_layer", {"participant_cls": EagerParticipant}, "no durable PREPARE"),
    ("rename", {"participant_cls": EagerParticipant}, "no durable PREPARE"),
    ("top_layer", {"participant_cls": UnjournaledParticipant}, "no durable PREPARE"),
    ("rename", {"participant_cls": UnjournaledParticipant}, "no durable PREPARE"),
    ("top_layer", {"coordinator_cls": HastyCoordinator}, "before the commit point"),
    ("rename", {"coordinator_cls": HastyCoordinator}, ""),
    ("rename", {"coordinator_cls": UnorderedCoordinator}, "on ['src', 'dst']"),
])
def test_a_broken_rule_is_caught(scenario: str, broken: dict[str, type], symptom: str) -> None:
    for seed in range(SEEDS):
        try:
            run_seed(seed, scenario, **broken)
        except Violation as e:
            assert symptom in str(e)
            return
    pytest.fail(f"{broken} went unnoticed in {SEEDS} seeds")
