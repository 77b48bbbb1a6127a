"""What a fenced NameNode applied in memory but never got onto the journal is dropped when
it goes back to standby: two NameNodes in this process over three JournalNode processes,
nn1 active, nn2 made active behind its back (a new journal epoch fences nn1), then a
mkdirs sent to nn1: it applies the op, logs it to its own name dir, and is refused by the
journal. nn1 never acknowledges it, goes back to standby without it (the bytes kept aside
as ``.unacked``), and, made active again later, still does not have it, while it has
every acknowledged one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig
from xdfs.errors import XdfsError
from xdfs.namenode.server import NameNode
from xdfs.protocol.ha import STATE_ACTIVE, STATE_STANDBY
from xdfs.testing.net import free_port

from ..journal.qjm_cluster import PASSWORD, USER, make_cluster, running

WAIT_S = 60.0


def _config(uri: str, secret: Path, addresses: dict[str, str]) -> XdfsConfig:
    base = XdfsConfig()
    return dataclasses.replace(
        base,
        # no heartbeat finds the fence first: the mkdirs below does
        namenode=dataclasses.replace(base.namenode, shared_edits=uri,
                                     journal_heartbeat_interval_s=3600.0,
                                     journal_write_timeout_s=5.0, journal_call_timeout_s=5.0),
        journalnode=dataclasses.replace(base.journalnode, secret_file=str(secret)),
        ha=dataclasses.replace(base.ha, namenodes=addresses, automatic_failover=False),
    )


def _client(address: str) -> AsyncClient:
    base = XdfsConfig()
    once = dataclasses.replace(base, rpc=dataclasses.replace(base.rpc, tries_per_address=1))
    return AsyncClient(f"xdfs://{address}", user=USER, password=PASSWORD, config=once)


async def _until(predicate: Callable[[], bool], what: str) -> None:
    """Poll state of servers in this process (nothing to wait on) until ``predicate``."""
    try:
        async with asyncio.timeout(WAIT_S):
            while not predicate():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {WAIT_S} s: {what}") from None


async def test_a_fenced_namenode_drops_what_the_journal_never_got(tmp_path: Path) -> None:
    with running(make_cluster(tmp_path, tmp_path)) as qjm:
        for index in range(3):
            qjm.start_journalnode(index)
        qjm.format(tmp_path / "nn1")
        shutil.copytree(tmp_path / "nn1", tmp_path / "nn2")
        ports = {"nn1": free_port(), "nn2": free_port()}
        addresses = {nn_id: f"127.0.0.1:{port}" for nn_id, port in ports.items()}
        config = _config(qjm.uri, qjm.secret, addresses)
        nn1 = NameNode(config, [tmp_path / "nn1"])
        nn2 = NameNode(config, [tmp_path / "nn2"])
        await nn1.start(port=ports["nn1"])
        await nn2.start(port=ports["nn2"])
        try:
            await nn1.transition_to_active()
            async with _client(addresses["nn1"]) as client:
                for i in range(5):
                    await client.mkdirs(f"/acked{i}")
            await _until(lambda: nn2.service_status().last_txid >= nn1.edits.synced_txid
                         if nn1.edits else False, "nn2 tails nn1's edits")

            await nn2.transition_to_active()  # behind nn1's back: nn1 is fenced
            async with _client(addresses["nn1"]) as client:
                try:
                    await client.mkdirs("/never-acknowledged")
                    outcome = "acknowledged"
                except XdfsError as exc:
                    outcome = type(exc).__name__
            assert outcome != "acknowledged"

            await _until(lambda: nn1.ha_state == STATE_STANDBY and nn1.standby is not None,
                         "nn1 back to standby")
            assert nn1.fatal is None
            assert nn1.fs is not None
            assert not nn1.fs.ns.exists("/never-acknowledged")
            assert all(nn1.fs.ns.exists(f"/acked{i}") for i in range(5))
            assert list((tmp_path / "nn1" / "current").glob("*.unacked*"))
            async with _client(addresses["nn2"]) as client:
                await client.mkdirs("/on-nn2")
            await _until(lambda: nn1.service_status().last_txid
                         >= nn2.service_status().last_txid, "nn1 tails nn2's edits")

            await nn2.stop()
            await nn1.transition_to_active()
            assert nn1.ha_state == STATE_ACTIVE
            async with _client(addresses["nn1"]) as client:
                assert await client.exists("/on-nn2")
                assert not await client.exists("/never-acknowledged")
                for i in range(5):
                    assert await client.exists(f"/acked{i}")
        finally:
            await nn1.stop()
            await nn2.stop()
