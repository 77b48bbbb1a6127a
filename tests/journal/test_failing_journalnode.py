"""A JournalNode whose disk fails leaves the quorum at its first failed write and rejoins
at the next segment once its disk works again (HDFS's quorum journal does the same); one
whose disk hangs leaves once a batch it got is unanswered for ``lag_max_s``, and gets no
batch after that.

Three real ``xdfs journalnode`` processes; the writer is the NameNode's own
``QuorumJournalWriter`` in this process, over channels that count the calls made to each
node. jn0's journal dir is a small tmpfs filled to the last byte (a real ENOSPC; needs
root), or, without root, jn0 runs with a fault hook that fails each of its writes with
ENOSPC (``XDFS_FAULTS=editlog.before_write=enospc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xdfs.config import XdfsConfig
from xdfs.editlog.framing import frame_record
from xdfs.editlog.segments import segment_index
from xdfs.protocol import journal as j
from xdfs.protocol.journal import JOURNAL_USER, JournalNamespace
from xdfs.quorum.channel import RpcJournalChannel
from xdfs.quorum.writer import QuorumJournalWriter, WriterSettings
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.testing.disk import fill, tmpfs
from xdfs.testing.poll import eventually

from .qjm_cluster import JOURNAL_ID, QjmCluster, make_cluster, running

pytestmark = pytest.mark.slow

BATCHES = 50


class CountingChannel(RpcJournalChannel):
    """An RPC channel that records the outcome of each ``journal`` call made through it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.journal_calls = 0  # made (answered or not)
        self.outcomes: list[bool] = []  # of those answered, in order
        #: Calls made after a failed one had been answered (the writer knew it failed).
        self.calls_after_a_known_failure = 0

    async def journal(self, request: j.JournalRecordsRequest) -> None:
        self.journal_calls += 1
        self.calls_after_a_known_failure += False in self.outcomes
        try:
            await super().journal(request)
        except BaseException:
            self.outcomes.append(False)
            raise
        self.outcomes.append(True)


def _records(first: int, count: int) -> bytes:
    return b"".join(frame_record(1, txid, b"x" * 40) for txid in range(first, first + count))


@contextlib.contextmanager
def _tmpfs(path: Path) -> Iterator[Path]:
    with contextlib.ExitStack() as stack:
        try:  # only the mount may skip the test (not an OSError of the test itself)
            mounted = stack.enter_context(tmpfs(path, "2m"))
        except OSError as e:
            pytest.skip(str(e))
        yield mounted


def _writer(qjm: QjmCluster, lag_max_s: float = 2.0
            ) -> tuple[QuorumJournalWriter, list[CountingChannel]]:
    hello = Hello(PROTOCOL_VERSION, user=JOURNAL_USER, password=qjm.secret.read_text().strip())
    channels = [CountingChannel(f"127.0.0.1:{port}", XdfsConfig().rpc, hello,
                                call_timeout_s=60.0) for port in qjm.ports]
    # generous timeouts: a writer that waited on the failing node would be slow, not fail
    return QuorumJournalWriter(channels, WriterSettings(
        JOURNAL_ID, JournalNamespace("CID-test", 1), write_timeout_s=60.0,
        call_timeout_s=60.0, lag_max_s=lag_max_s)), channels


async def _scenario(qjm: QjmCluster, jn0_dir: Path, *, recovers: bool) -> None:
    writer, channels = _writer(qjm)
    failing = channels[0]
    try:
        await writer.format()
        await writer.become_writer()
        await writer.start_segment(1, 1)
        txid = 1
        if recovers:  # (the hook fails every write from the first)
            await writer.write(_records(txid, 10), txid, txid + 9)
            txid += 10
            assert failing.name in writer.in_sync
        filler = fill(jn0_dir) if recovers else None
        before = [c.journal_calls for c in channels]
        for _ in range(BATCHES):  # each acknowledged by the other two
            await writer.write(_records(txid, 10), txid, txid + 9)
            txid += 10
        # the failing node got no batch once its first failed write was answered (a full
        # tmpfs still takes the writes that fit in the page it has); on a loaded machine
        # that answer may come after the others acknowledged the next batch too, which
        # then went to it as well: count once every call to it is answered
        await eventually(lambda: failing.outcomes and
                         len(failing.outcomes) == failing.journal_calls,
                         what="every call to jn0 answered")
        assert failing.name not in writer.in_sync
        first_failure = failing.outcomes.index(False)
        assert not any(failing.outcomes[first_failure:])
        assert failing.calls_after_a_known_failure == 0
        assert all(c.journal_calls - b >= BATCHES
                   for c, b in zip(channels[1:], before[1:], strict=True))
        if filler is None:
            return
        filler.unlink()  # the disk works again: it rejoins at the next segment
        await writer.finalize_segment(1, txid - 1)
        await writer.start_segment(txid, 1)
        await writer.write(_records(txid, 10), txid, txid + 9)
        assert failing.name in writer.in_sync
        journal = jn0_dir / JOURNAL_ID / "current"
        assert any(s.start == txid for s in segment_index(journal))
    finally:
        await writer.close()


def test_a_full_journalnode_leaves_at_once_and_rejoins_at_the_next_segment(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a tmpfs needs root")
    with running(make_cluster(tmp_path, tmp_path)) as qjm, _tmpfs(tmp_path / "jn0") as jn0:
        for index in range(3):
            qjm.start_journalnode(index)
        asyncio.run(_scenario(qjm, jn0, recovers=True))


def test_a_journalnode_failing_every_write_is_left_out_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with running(make_cluster(tmp_path, tmp_path)) as qjm:
        for index in range(3):
            if index == 0:
                monkeypatch.setenv("XDFS_FAULTS", "editlog.before_write=enospc")
            qjm.start_journalnode(index)
            monkeypatch.delenv("XDFS_FAULTS", raising=False)
        assert "fault points armed" in qjm.journalnodes[0].log_text()
        asyncio.run(_scenario(qjm, tmp_path / "jn0", recovers=False))


def test_a_hung_journalnode_gets_no_batch_once_it_lags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    lag_max_s = 0.5
    with running(make_cluster(tmp_path, tmp_path)) as qjm:
        for index in range(3):
            if index == 0:  # its first write stops the process: a disk that hangs
                monkeypatch.setenv("XDFS_FAULTS", "editlog.before_write=stop")
            qjm.start_journalnode(index)
            monkeypatch.delenv("XDFS_FAULTS", raising=False)

        async def scenario() -> None:
            writer, channels = _writer(qjm, lag_max_s)
            try:
                await writer.format()
                await writer.become_writer()
                await writer.start_segment(1, 1)
                await writer.write(_records(1, 10), 1, 10)  # jn0 hangs on it
                await asyncio.sleep(lag_max_s * 2)  # (let its lag pass)
                txid = 11
                for _ in range(BATCHES):
                    await writer.write(_records(txid, 10), txid, txid + 9)
                    txid += 10
                assert channels[0].name not in writer.in_sync
                assert channels[0].journal_calls == 1  # the one it hangs on, no other
                assert channels[0].outcomes == []  # (still unanswered)
                assert all(c.journal_calls == BATCHES + 1 for c in channels[1:])
            finally:
                await writer.close()

        asyncio.run(scenario())
