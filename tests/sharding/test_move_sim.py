"""Seeded fault runs of one slot's online move (see xdfs.testing.move_sim for the faults
and the invariants), and broken rules the simulator catches.

``XDFS_MOVE_SEEDS=N`` runs N seeds (default 1000), ``XDFS_MOVE_SEED=S`` just seed S.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from xdfs.sharding import move as mv
from xdfs.testing.move_sim import MoveSim, Violation, run_move_seed

SEEDS = int(os.environ.get("XDFS_MOVE_SEEDS", "1000"))
ONE_SEED = os.environ.get("XDFS_MOVE_SEED")


def test_seeded_moves_keep_every_invariant() -> None:
    seeds = range(int(ONE_SEED), int(ONE_SEED) + 1) if ONE_SEED else range(SEEDS)
    coverage: Counter[str] = Counter()
    committed = 0
    for seed in seeds:
        outcome = run_move_seed(seed)
        coverage += outcome.coverage
        committed += outcome.committed
    if ONE_SEED:
        return
    assert SEEDS // 10 < committed < SEEDS  # both outcomes happen
    for what in ("src crashed", "dst crashed", "ctl crashed", "WrongShard",
                 "waited on a fenced slot"):
        assert coverage[what] > SEEDS // 20, what


class EarlyTarget(mv.MoveTarget):
    """Broken: acquires on the handoff without waiting to be staged through it."""

    def _maybe_acquire(self, m: mv.TargetMove) -> list[mv.MoveAction]:
        if m.handoff is None:
            return []
        m.phase = mv.TPhase.ACQUIRING
        return [mv.Journal(mv.MoveRecord(mv.Kind.ACQUIRE, m.move, txid=m.handoff))]


class UnfencedSource(mv.MoveSource):
    """Broken: journals the handoff at the target's txid without fencing the slot."""

    def _on_StreamProgress(self, event: mv.StreamProgress) -> list[mv.MoveAction]:
        m = self.moves.get(event.move_id)
        if m is None or m.phase is not mv.SPhase.COPYING:
            return []
        m.phase = mv.SPhase.FENCING
        return self._on_Fenced(mv.Fenced(event.move_id, event.staged_txid))


class HopefulController(mv.MoveController):
    """Broken: a restarted controller finishes a move it had not decided as committed,
    without looking at the map."""

    def _on_Recover(self, event: mv.Recover) -> list[mv.MoveAction]:
        actions = super()._on_Recover(event)
        undecided = [m for m in self.moves.values() if m.phase is mv.CPhase.ABORTING]
        kept = [a for a in actions
                if not (isinstance(a, mv.Journal) and a.record.kind is mv.Kind.ABORT)]
        for m in undecided:
            kept += self._tell(m, committed=True)
        return kept


@pytest.mark.parametrize(("broken", "symptom"), [
    ({"target_cls": EarlyTarget}, "ACQUIRE holds"),
    ({"source_cls": UnfencedSource}, "ACQUIRE holds"),
    ({"controller_cls": HopefulController}, "before the map's CAS"),
])
def test_a_broken_rule_is_caught(broken: dict[str, type], symptom: str) -> None:
    for seed in range(SEEDS):
        try:
            MoveSim(seed, **broken).run()
        except Violation as e:
            assert symptom in str(e)
            return
    pytest.fail(f"{broken} went unnoticed in {SEEDS} seeds")
