"""A fenced NameNode goes back to standby by itself, with real processes (ZooKeeper, three
JournalNodes, nn1 and nn2 with their controllers, a DataNode).

The active is paused (SIGSTOP) past the ZooKeeper session; the other takes over and
acknowledges more operations; a call sent to the paused one meanwhile waits in its socket.
Resumed, the old active finds itself fenced by the journal (the call it then applies in
memory is never acknowledged), and instead of exiting it reloads its namespace as a
restart would, tails the journal as a standby, and its controller sees it healthy and
puts it back in the election. Killing the new active then fails over to it, and every
acknowledged operation is there (the unacknowledged one is not).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import threading

import pytest

from xdfs.client.client import AsyncClient
from xdfs.common.secrets import read_secret_file
from xdfs.config import XdfsConfig
from xdfs.errors import XdfsError
from xdfs.protocol.ha import GET_SERVICE_STATE, ServiceStatus
from xdfs.protocol.zkfc import ZKFC_STATUS, ZkfcStatus
from xdfs.rpc.messages import Empty
from xdfs.zkfc.namenodes import BoundedClient
from xdfs.zkfc.server import controller_hello

from ..journal.qjm_cluster import PASSWORD, USER
from .cluster import HaCluster

pytestmark = pytest.mark.slow

SESSION_S = 4.0  # the test controllers' ZooKeeper session (HaCluster.automatic)


def _status(ha: HaCluster, nn_id: str) -> ServiceStatus | None:
    async def ask() -> ServiceStatus:
        async with ha.client(nn_id) as client:
            async with asyncio.timeout(2.0):
                return await client.rpc.call(GET_SERVICE_STATE, Empty())

    try:
        return asyncio.run(ask())
    except (XdfsError, TimeoutError):
        return None


def _controller(ha: HaCluster, nn_id: str) -> ZkfcStatus | None:
    match = ha.controllers[nn_id].match
    assert match is not None
    secret = read_secret_file(str(ha.base / "zkfc.secret"), "ha.zkfc_secret_file")

    async def ask() -> ZkfcStatus:
        async with BoundedClient(XdfsConfig(), match.group(1), "test",
                                 hello=controller_hello(secret)) as client:
            return await client.call(ZKFC_STATUS, Empty(), 5.0)

    try:
        return asyncio.run(ask())
    except (XdfsError, TimeoutError):
        return None


def _mkdirs(ha: HaCluster, paths: list[str], *ids: str) -> None:
    async def make() -> None:
        async with ha.client(*ids) as client:
            for path in paths:
                await client.mkdirs(path)

    asyncio.run(make())


def _listed(ha: HaCluster, nn_id: str) -> set[str]:
    async def ls() -> set[str]:
        async with ha.client(nn_id) as client:
            return {s.path.rsplit("/", 1)[-1] for s in await client.list_dir("/t")}

    return asyncio.run(ls())


class Unacknowledged(threading.Thread):
    """One mkdirs sent to the paused NameNode only (it waits in its socket until SIGCONT):
    the outcome, "acknowledged" or the error's name."""

    def __init__(self, ha: HaCluster, nn_id: str, path: str) -> None:
        super().__init__(daemon=True)
        self.ha, self.nn_id, self.path = ha, nn_id, path
        self.outcome = ""

    def run(self) -> None:
        base = XdfsConfig()
        patient = dataclasses.replace(base, rpc=dataclasses.replace(
            base.rpc, connect_timeout_s=120.0, call_timeout_s=120.0, tries_per_address=1))

        async def call() -> None:
            async with AsyncClient("xdfs://" + self.ha.addresses[self.nn_id], user=USER,
                                   password=PASSWORD, config=patient) as client:
                await client.mkdirs(self.path)

        try:
            asyncio.run(call())
            self.outcome = "acknowledged"
        except XdfsError as exc:
            self.outcome = type(exc).__name__


def test_a_fenced_active_rejoins_as_standby_and_takes_over_later(auto_ha: HaCluster) -> None:
    ha = auto_ha
    old = ha.active()
    assert old is not None
    new = "nn2" if old == "nn1" else "nn1"
    acked = [f"/t/before{i}" for i in range(5)]
    _mkdirs(ha, ["/t", *acked])
    old_proc = ha.namenodes[old]

    os.kill(old_proc.pid, signal.SIGSTOP)
    try:
        pending = Unacknowledged(ha, old, "/t/sent-to-the-paused-one")
        pending.start()
        ha.wait(lambda: ha.state(new) == "active", f"{new} takes over from the paused {old}")
        during = [f"/t/during{i}" for i in range(20)]
        _mkdirs(ha, during, new)
        acked += during
        # past the ZooKeeper session, counted from the takeover
        threading.Event().wait(SESSION_S + 1.0)
    finally:
        os.kill(old_proc.pid, signal.SIGCONT)

    ha.wait(lambda: ha.state(old) == "standby", f"the fenced {old} is standby again")
    assert old_proc.alive(), f"{old} exited instead of rejoining\n{ha.logs()}"
    pending.join(timeout=120)
    assert pending.outcome != "acknowledged"
    new_status = _status(ha, new)
    assert new_status is not None and new_status.state == "active"

    def caught_up() -> bool:
        status = _status(ha, old)
        return (status is not None and status.ready_to_become_active
                and status.last_txid >= new_status.last_txid)

    ha.wait(caught_up, f"{old} tails the new operations from the journal")

    def healthy_standby() -> bool:
        seen = _controller(ha, old)
        return seen is not None and (seen.health, seen.role) == ("healthy", "standby")

    ha.wait(healthy_standby, f"{old}'s controller sees it healthy and back in the election")

    ha.namenodes[new].kill()
    ha.wait(lambda: ha.state(old) == "active", f"failover to the resumed {old}")
    after = [f"/t/after{i}" for i in range(5)]
    _mkdirs(ha, after, old)
    acked += after
    listed = _listed(ha, old)
    missing = {p.rsplit("/", 1)[-1] for p in acked} - listed
    assert not missing, f"acknowledged but missing: {sorted(missing)}"
    assert "sent-to-the-paused-one" not in listed
