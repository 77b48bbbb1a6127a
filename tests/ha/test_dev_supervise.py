"""``xdfs dev``'s supervisor with an HA pair: one NameNode exiting is reported and the
cluster goes on (the other serves); it stops once no NameNode is left (nothing can serve),
and then stops the rest."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from xdfs.cli.dev import _supervise


class FakeProcess:
    """Alive for ``polls`` looks (None: until terminated)."""

    def __init__(self, pid: int, polls: int | None) -> None:
        self.pid = pid
        self.polls = polls
        self.log_path = Path(f"/logs/{pid}.log")
        self.terminated = False

    def alive(self) -> bool:
        if self.terminated:
            return False
        if self.polls is None:
            return True
        self.polls -= 1
        return self.polls >= 0

    def terminate(self) -> None:
        self.terminated = True


@pytest.fixture(autouse=True)
def _signals() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_one_namenode_of_the_pair_exiting_does_not_stop_the_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nn1, nn2 = FakeProcess(101, 3), FakeProcess(102, 30)
    others = [FakeProcess(201, None), FakeProcess(202, None), FakeProcess(203, None)]
    children = [("zookeeper", others[0]), ("journalnode", others[1]), ("namenode", nn1),
                ("zkfc", others[2]), ("namenode", nn2)]
    ticks: list[int] = []
    status = _supervise(cast(Any, children), lambda: ticks.append(nn2.polls or 0))
    err = capsys.readouterr().err
    assert "namenode (pid 101) exited; 1 of 2 left to serve" in err
    assert "namenode (pid 102) exited;" in err
    # it went on after nn1 exited, until nn2 did too; then it stopped the rest
    assert len(ticks) > 5
    assert status == 1
    assert all(proc.terminated for proc in others)
