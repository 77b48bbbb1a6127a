"""JournalNodes served in-process over real sockets: who may call them, hostile ids, and
tailing readers (long poll, moving on to a node that has the records)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from xdfs.common.secrets import new_secret_file
from xdfs.config import XdfsConfig
from xdfs.editlog.framing import frame_record
from xdfs.errors import (
    AuthenticationFailed,
    ConfigError,
    InvalidArgument,
    NotFormatted,
    Unavailable,
)
from xdfs.journal.server import JournalNode
from xdfs.protocol import journal as j
from xdfs.quorum.channel import RpcJournalChannel
from xdfs.quorum.reader import JournalTailer
from xdfs.quorum.writer import QuorumJournalWriter, WriterSettings
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello

NS = j.JournalNamespace("CID-srv", 9)


def config_with(secret: Path) -> XdfsConfig:
    config = XdfsConfig()
    return replace(config, journalnode=replace(config.journalnode, secret_file=str(secret),
                                               sync_interval_s=3600))


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[list[JournalNode]]:
    secret = tmp_path / "secret"
    new_secret_file(secret)
    started = [JournalNode(config_with(secret), tmp_path / f"jn{i}") for i in range(3)]
    for node in started:
        await node.start()
    yield started
    for node in started:
        await node.stop()


def channel(node: JournalNode, *, password: str | None = None) -> RpcJournalChannel:
    secret = Path(node.config.journalnode.secret_file).read_text().strip()
    hello = Hello(PROTOCOL_VERSION, user=j.JOURNAL_USER,
                  password=secret if password is None else password)
    return RpcJournalChannel(node.address, node.config.rpc, hello, call_timeout_s=10)


def writer_for(nodes: list[JournalNode]) -> QuorumJournalWriter:
    return QuorumJournalWriter([channel(n) for n in nodes], WriterSettings(
        "nn", NS, commit_notify_s=0.0, heartbeat_interval_s=3600))


async def test_a_journalnode_needs_a_secret_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="secret_file"):
        await JournalNode(XdfsConfig(), tmp_path / "jn").start()


async def test_callers_without_the_secret_are_refused(nodes: list[JournalNode]) -> None:
    intruder = channel(nodes[0], password="0" * 64)
    with pytest.raises((AuthenticationFailed, Unavailable)):
        await intruder.get_journal_state("nn")
    await intruder.close()


async def test_hostile_journal_ids_get_a_typed_error(nodes: list[JournalNode]) -> None:
    c = channel(nodes[0])
    for bad in ("../etc", "a/b", "", "x" * 100):
        with pytest.raises(InvalidArgument):
            await c.get_journal_state(bad)
    with pytest.raises(NotFormatted):
        await c.get_journaled_edits(j.ReadEditsRequest("nobody", 1, 1, 1024))
    assert not (nodes[0].journal_dir / "nobody").exists()
    await c.close()


async def test_a_tailer_is_answered_at_the_next_commit_and_moves_to_a_node_that_has_it(
    nodes: list[JournalNode],
) -> None:
    writer = writer_for(nodes)
    await writer.format()
    await writer.become_writer()
    await writer.start_segment(1, 1)
    tailer = JournalTailer([channel(n) for n in nodes], "nn", wait_s=5.0)
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(tailer.next(0, 100))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # long poll: nothing committed yet
    started = loop.time()
    await writer.write(frame_record(1, 1, b"one"), 1, 1)
    answer = await asyncio.wait_for(waiting, 5)
    assert answer.count == 1 and answer.first_txid == 1
    assert loop.time() - started < 4  # answered at the commit, not at the end of the wait
    idle = await tailer.next(1, 100)  # nothing more: an empty answer after the wait
    assert idle.count == 0
    # the node the tailer prefers falls behind: it asks the others
    await nodes[[n.address for n in nodes].index(tailer.channels[0].name)].stop()
    await writer.write(frame_record(1, 2, b"two"), 2, 2)
    await writer.finalize_segment(1, 2)
    answer = await tailer.next(1, 100)
    assert answer.count == 1 and answer.first_txid == 2
    await tailer.close()
    await writer.close()
