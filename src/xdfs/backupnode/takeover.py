"""Takeover (``transition_to_active``): refused while the NameNode answers a ping;
otherwise the NameNode is *fenced* first (:mod:`xdfs.common.fencing`: a paused NameNode
must never come back as a second active one) and the takeover is refused when no configured method
succeeds. Then: stop following and checkpointing, sync and close the local edits log, and
run a NameNode on the same name dir, namespace (already in memory) and RPC server, which
logs a raised active epoch before it serves anything."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from xdfs.backupnode.local import BackupState, Local
from xdfs.common.fencing import FenceMethod, Target, fence
from xdfs.errors import RpcError, TakeoverRefused
from xdfs.namenode.ha import call_once
from xdfs.namenode.server import NameNode
from xdfs.protocol.backup import TakeoverResponse
from xdfs.protocol.system import PING
from xdfs.rpc.server import RpcServer
from xdfs.rpc.service import Service

log = logging.getLogger(__name__)

_BUSY = (BackupState.FENCING, BackupState.PROMOTING, BackupState.ACTIVE)


class Takeover:
    def __init__(self, local: Local, fencing: Sequence[FenceMethod]) -> None:
        self.local = local
        self.fencing = fencing

    async def run(
        self,
        server: RpcServer,
        services: Sequence[Service],
        stop_duties: Callable[[], Awaitable[None]],
    ) -> tuple[NameNode, TakeoverResponse]:
        """Fence, stop ``stop_duties`` (following, checkpoints), and serve as the NameNode
        on ``server`` (whose ``services`` answered NotActive until now)."""
        local = self.local
        started = time.monotonic()
        if local.state in _BUSY:
            raise TakeoverRefused(f"this BackupNode is already {local.state}")
        if await self._namenode_answers():
            raise TakeoverRefused(
                f"the NameNode at {', '.join(local.namenodes)} still answers: stop it first "
                "(two active NameNodes would diverge)"
            )
        previous, local.state = local.state, BackupState.FENCING
        try:
            fenced_by = await self._fence()
        except BaseException:
            local.state = previous
            raise
        local.state = BackupState.PROMOTING
        await stop_duties()
        async with local.replay_lock:
            namenode = await self._become_namenode(server, services)
        local.state = BackupState.ACTIVE
        took_s = time.monotonic() - started
        assert namenode.edits is not None and local.namespace is not None
        last_txid = namenode.edits.last_txid
        log.warning("promoted: serving as the NameNode at %s at epoch %d from txid %d "
                    "(%.2f s)", server.address, local.namespace.epoch, last_txid, took_s)
        return namenode, TakeoverResponse(server.address, last_txid, took_s,
                                          local.namespace.epoch, fenced_by)

    async def _fence(self) -> str:
        """Fence the NameNode last followed; TakeoverRefused when no method succeeds."""
        local = self.local
        if local.config.namenode.shared_edits and not self.fencing:
            # the NameNode this backup becomes takes a new journal epoch before it writes:
            # the old one, paused or not, can acknowledge nothing after that
            return "journal epoch"
        target = Target(local.namenode.current_address, local.namenode_pid)
        fenced_by = await fence(self.fencing, target, local.config.backupnode.fencing_timeout_s)
        if local.synced_txid < local.namenode_synced_txid:
            log.warning(
                "the NameNode had synced txid %d, this backup holds txid %d: edits %d..%d "
                "were never fetched and are not in the promoted namespace",
                local.namenode_synced_txid, local.synced_txid, local.synced_txid + 1,
                local.namenode_synced_txid,
            )
        return fenced_by

    async def _namenode_answers(self) -> bool:
        config = self.local.config
        try:
            await call_once(config, self.local.namenodes, PING,
                            config.backupnode.takeover_probe_timeout_s)
        except RpcError:
            return False
        return True

    async def _become_namenode(
        self, server: RpcServer, services: Sequence[Service]
    ) -> NameNode:
        local = self.local
        assert local.namespace is not None and local.edits is not None
        await local.edits.close()  # synced and finalized: the NameNode opens the next txid
        local.edits = None
        local.dir.unlock()  # the NameNode takes the lock again
        for service in services:
            server.remove_service(service)
        namenode = NameNode(local.config, [local.dir.root], clock=local.clock)
        await namenode.start(loaded=(local.namespace, local.synced_txid), server=server,
                             new_epoch=True)
        return namenode
