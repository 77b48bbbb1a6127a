"""A NameNode's place among its peers: the ``ha_status`` answer, and the check that a
NameNode never starts serving behind a peer that knows a newer namespace.

The check (``namenode.peers``) runs after the namespace is loaded and before anything is
served: each peer (another NameNode, or a BackupNode, at host:port) is asked its
``ha_status``. A peer whose (epoch, last txid) is above ours holds a namespace this one
never saw -- it was promoted after us, or we lost edits -- so this NameNode refuses to
start (``Fenced``, one line naming the peer). Epochs are compared first: a peer at a
lower epoch with more txids holds a branch that a promotion abandoned, not newer data
(the rule of HDFS's quorum journal recovery).

A peer that does not answer within ``namenode.peer_check_timeout_s`` (or belongs to
another namespace) cannot be compared: the NameNode starts anyway with a warning, unless
``namenode.peer_check_required`` is set, then it refuses. Availability is the default: a
NameNode whose only backup is down must still start; the DataNodes' epoch rule still keeps
a NameNode that missed a promotion from deleting anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple

from xdfs.config import XdfsConfig
from xdfs.errors import Fenced, RpcError
from xdfs.protocol.ha import HA_STATUS, HaStatus
from xdfs.rpc.client import RpcClient
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, Resp
from xdfs.rpc.tls import client_context

log = logging.getLogger(__name__)


class HaHandlers:
    """The ``ha`` service: ``ha_status`` for anyone (no credentials needed)."""

    def __init__(self, status: Callable[[], HaStatus]) -> None:
        self._status = status

    def ha_status(self, ctx: CallContext, req: Empty) -> HaStatus:
        return self._status()


class Position(NamedTuple):
    """Where a namespace stands: compared epoch first, then last txid."""

    epoch: int
    last_txid: int


def peer_verdict(
    own: Position, ids: tuple[str, int], address: str, peer: HaStatus | None
) -> tuple[bool, str]:
    """(refuse, reason) for one peer's answer (None: it did not answer). Pure."""
    if peer is None:
        return False, f"peer {address} did not answer"
    if (peer.cluster_id, peer.namespace_id) != ids:
        return False, (f"peer {address} serves namespace {peer.namespace_id} of cluster "
                       f"{peer.cluster_id}, not ours ({ids[1]} of {ids[0]})")
    theirs = Position(peer.epoch, peer.last_txid)
    if theirs > own:
        return True, (f"peer {address} ({peer.role}) is ahead: epoch {peer.epoch}, txid "
                      f"{peer.last_txid}; this name dir is at epoch {own.epoch}, txid "
                      f"{own.last_txid} (start the newer one as the NameNode, or make this "
                      f"one a backup)")
    return False, ""


async def check_peers(
    config: XdfsConfig, peers: Sequence[str], own: Position, ids: tuple[str, int]
) -> None:
    """Raise Fenced when a peer is ahead (or cannot be asked and that is required)."""
    if not peers:
        return
    answers = await asyncio.gather(*(_ask(config, address) for address in peers))
    for address, answer in zip(peers, answers, strict=True):
        refuse, reason = peer_verdict(own, ids, address, answer)
        if refuse:
            raise Fenced(f"refusing to become active: {reason}")
        if reason:
            if config.namenode.peer_check_required:
                raise Fenced(f"refusing to become active: {reason} "
                             "(namenode.peer_check_required is set)")
            log.warning("%s: starting without comparing with it", reason)


async def _ask(config: XdfsConfig, address: str) -> HaStatus | None:
    try:
        return await call_once(config, [address], HA_STATUS,
                               config.namenode.peer_check_timeout_s)
    except RpcError:
        return None


async def call_once(
    config: XdfsConfig, addresses: Sequence[str], method: Method[Empty, Resp],
    timeout_s: float,
) -> Resp:
    """One anonymous try per address within ``timeout_s`` (connect included): a probe of
    servers that may be paused or gone, never retried. RpcError when none answers."""
    rpc = dataclasses.replace(config.rpc, tries_per_address=1, connect_timeout_s=timeout_s,
                              call_timeout_s=timeout_s)
    client = RpcClient(list(addresses), rpc, ssl_context=client_context(rpc))
    try:
        return await client.call(method, Empty())
    finally:
        await client.close()
