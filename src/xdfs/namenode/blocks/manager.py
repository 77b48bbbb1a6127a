"""The NameNode's block management (pure core): which DataNode holds what, and what to do.

Inputs are DataNode calls (register, full reports in batches, heartbeats, incremental
reports), client calls (targets for a new block, locations, bad replicas) and namespace
changes; outputs are answers and commands that wait in per-node queues for heartbeats
(replicate, delete). The rules, as HDFS's BlockManager:

* a reported replica of a block no file holds is an **orphan** and is deleted; one with a
  wrong generation stamp, or a length other than the committed length of a complete block,
  is **corrupt**. Except a replica **from the future** (block id or genstamp beyond what
  this namespace allocated: a newer NameNode wrote it): it is kept, never deleted, and only
  counted (``admin -report``, fsck). A block is *complete* unless it is the last block of
  a file being written (its length is not known until the writer says so);
* blocks with fewer live good replicas than their file's replication are queued for
  copying (:mod:`~xdfs.namenode.blocks.replication`), **excess** replicas are deleted from the
  fullest node, corrupt ones once enough good ones exist;
* while in safe mode nothing is deleted or copied for those reasons (the namespace may not
  have heard from every DataNode yet): the decisions are postponed until it ends;
* replicas of blocks that leave the namespace are deleted only once the change is durable
  (``ops_durable``), so a crash cannot leave a file whose replicas were already deleted;
* replicas in state rbw (a write broke) are only recorded, for block recovery
  (:mod:`~xdfs.namenode.blocks.recovery`), which closes abandoned files with the length
  their replicas agree on; once the block is complete they are deleted (replication.py).

Pure: time and randomness are injected, nothing here does I/O or logs (drivers do).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NamedTuple

from xdfs.common import tokens
from xdfs.config import NameNodeConfig
from xdfs.errors import InternalError, InvalidArgument
from xdfs.namenode.blocks import placement
from xdfs.namenode.blocks.block_state import (
    BlockState,
    another_shards,
    block_state,
    from_the_future,
    replica_flags,
)
from xdfs.namenode.blocks.blockmap import REPORTED_BAD, BlockMap, FullReports, Replica
from xdfs.namenode.blocks.datanodes import DataNode, DataNodeManager, RecoveryWork
from xdfs.namenode.blocks.failover import HaView
from xdfs.namenode.blocks.recovery import (
    Attempt,
    BlockRecoveries,
    CloseNow,
    RecoverBlock,
    plan_lease_recovery,
    recovery_holders,
)
from xdfs.namenode.blocks.replication import ReplicationMonitor
from xdfs.namenode.blocks.safemode import SafeMode
from xdfs.namenode.namespace.ops import (
    CloseFileOp,
    ConcatOp,
    Op,
    SetReplicationOp,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.resolved import INodesInPath
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import RecoverBlockTask, ReplicateTask, StorageReport

#: A block report batch may be this many times the configured batch size before it is
#: refused (DataNodes of another configuration are tolerated, runaway ones are not).
REPORT_BATCH_SLACK = 10


#: The ops whose blocks are looked at again once durable (:meth:`BlockManager.affected_blocks`;
#: ops are final msgspec types, never subclassed).
_AFFECTING_OPS: Final = frozenset({CloseFileOp, UpdateBlocksOp, SetReplicationOp, ConcatOp})


class Commands(NamedTuple):
    """What one heartbeat reply carries to its DataNode."""

    replicate: list[ReplicateTask]
    delete: list[int]
    send_full_report: bool
    recover: list[RecoverBlockTask] = []


class BlockManager:
    def __init__(
        self,
        ns: Namespace,
        config: NameNodeConfig,
        safe_mode: SafeMode,
        *,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.ns = ns
        self.config = config
        self.safe_mode = safe_mode
        self.clock = clock
        self.rng = rng
        self.datanodes = DataNodeManager(config.heartbeat_interval_s, config.heartbeat_misses_dead)
        self.map = BlockMap(config.min_replication)
        self.reports = FullReports()
        self.replication = ReplicationMonitor(
            ns, config, safe_mode, self.datanodes, self.map, clock=clock, rng=rng
        )
        # Blocks dropped from the namespace whose removal is not durable yet: not orphans.
        self._leaving: set[int] = set()
        self._watchers: dict[int, list[Callable[[], None]]] = {}
        self._liveness_checked_s: float | None = None
        # Dead node id -> its replicas found corrupt, to delete when it registers again.
        self._bad_on_dead: dict[str, set[int]] = {}
        #: Block recoveries under way (lease recovery of files whose writer went away).
        self.recoveries = BlockRecoveries(config.block_recovery_timeout_s)
        # The last block of each open file -> the nodes it was sent to (HDFS's expected
        # locations): a recovery asks them even before they report the replica.
        self._expected: dict[int, set[str]] = {}
        #: Standby or just failed over: reports held back, deletions postponed (failover.py).
        self.ha = HaView(self.replication)
        # The block-token key derived from each login-token key (an HMAC), kept with the
        # key it came from: every block allocation signs a token with it.
        self._block_keys: dict[int, tuple[tokens.SigningKey, tokens.BlockKey]] = {}

    # --- DataNode protocol ---------------------------------------------------------------

    def register(self, node_id: str, address: str, storage: StorageReport) -> DataNode:
        node, displaced = self.datanodes.register(node_id, address, storage, self.clock())
        for other in displaced:
            self._node_dead(other)
        self.reports.forget(node_id)
        self.ha.pending.forget_node(node_id)
        for block_id in self._bad_on_dead.pop(node_id, ()):
            node.deletions[block_id] = None  # see _node_dead
        return node

    def block_report(
        self, node_id: str, report_id: int, batch_index: int, batch_count: int,
        blocks: Sequence[BlockRecord], rbw: Sequence[BlockRecord] = (),
    ) -> bool:
        """Process one batch (finalized replicas and replicas in state rbw); True when it
        completed a full report."""
        node = self.datanodes.get_live(node_id)
        batch_max = REPORT_BATCH_SLACK * self.config.block_report_batch_max
        if len(blocks) + len(rbw) > batch_max:
            raise InvalidArgument(
                f"block report batch of {len(blocks) + len(rbw)} entries (max {batch_max})"
            )
        ids = [b.block_id for b in blocks] + [b.block_id for b in rbw]
        seen = self.reports.add_batch(node_id, report_id, batch_index, batch_count, ids)
        for record in blocks:
            self._reported(node, record)
        for record in rbw:
            self._reported_rbw(node, record)
        if seen is None:
            return False
        node.future &= seen
        node.foreign &= seen
        self.ha.pending.forget_node(node_id, keep=seen)
        for block_id in self.map.node_blocks(node_id) - seen:
            replica = self._lost(block_id, node_id)
            if replica is not None and replica.flags & REPORTED_BAD:
                # DataNodes leave replicas they found corrupt out of their reports, but
                # keep the files until told: tell them
                node.deletions[block_id] = None
        for block_id in self.map.node_rbw_blocks(node_id) - seen:
            self.map.remove_rbw(block_id, node_id)
        node.deleting.clear()  # what it still holds, it just said
        node.full_reports += 1
        return True

    def incremental_report(
        self, node_id: str, received: Iterable[BlockRecord], deleted: Iterable[int],
        rbw: Iterable[BlockRecord] = (),
    ) -> None:
        node = self.datanodes.get_live(node_id)
        for record in received:
            self.reports.note_received(node_id, record.block_id)
            self._reported(node, record)
        for record in rbw:
            self.reports.note_received(node_id, record.block_id)
            self._reported_rbw(node, record)
        for block_id in deleted:
            self.reports.note_deleted(node_id, block_id)
            self.ha.pending.forget(node_id, block_id)
            node.future.discard(block_id)
            node.foreign.discard(block_id)
            node.deleting.discard(block_id)
            self.map.remove_rbw(block_id, node_id)
            self._lost(block_id, node_id)

    def heartbeat(self, node_id: str, storage: StorageReport, transfers: int) -> Commands:
        node = self.datanodes.heartbeat(node_id, storage, transfers, self.clock())
        if self.ha.heartbeat(node):  # a standby: no commands, whatever was computed
            return Commands([], [], self._full_report_overdue(node), [])
        work, deletions = self.datanodes.take_commands(node, self.config.deletions_per_heartbeat)
        replicate = []
        for item in work:
            task = self._replicate_task(item.block_id, item.targets)
            if task is not None:
                replicate.append(task)
        recover = [task for task in map(self._recover_task, node.recover) if task is not None]
        node.recover.clear()
        return Commands(replicate, deletions, self._full_report_overdue(node), recover)

    def _full_report_overdue(self, node: DataNode) -> bool:
        """A node registered a while ago has not sent (or finished) a full report since:
        ask for one now, and again every dead interval until one completes. Without it
        the NameNode would not know the node's replicas until its next periodic report."""
        now_s = self.clock()
        if node.full_reports or self.reports.is_open(node.node_id):
            return False
        if now_s - node.report_requested_s < self.datanodes.dead_after_s:
            return False
        node.report_requested_s = now_s
        return True

    def check_heartbeats(self) -> list[DataNode]:
        """Declare silent nodes dead (their replicas stop counting at once). Meant to run
        every heartbeat interval; a round that comes much later than that means the
        NameNode itself was not listening (a long checkpoint on the event loop, a paused
        process): heartbeats may be waiting unread, so nobody is declared dead this round.
        """
        now_s = self.clock()
        last_s, self._liveness_checked_s = self._liveness_checked_s, now_s
        if last_s is not None and now_s - last_s > 2 * self.config.heartbeat_interval_s:
            return []
        dead = self.datanodes.expired(now_s)
        for node in dead:
            self._node_dead(node)
        return dead

    def block_keys(self) -> list[tokens.BlockKey]:
        """The block-token keys DataNodes verify with (derived: they cannot sign logins)."""
        now_ms = int(self.clock() * 1000)
        keys = sorted(self.ns.token_keys.values(), key=lambda key: key.key_id)
        return [self._block_key(key) for key in keys if key.expires_ms > now_ms]

    def _block_key(self, key: tokens.SigningKey) -> tokens.BlockKey:
        """``key``'s derived block-token key, derived once per key (rotation replaces a
        key object, and expired ones are dropped from here as from the namespace)."""
        known = self._block_keys.get(key.key_id)
        if known is not None and known[0] is key:
            return known[1]
        if len(self._block_keys) >= len(self.ns.token_keys):
            live = self.ns.token_keys
            self._block_keys = {k: v for k, v in self._block_keys.items() if live.get(k) is v[0]}
        derived = tokens.derive_block_key(key)
        self._block_keys[key.key_id] = (key, derived)
        return derived

    # --- client path ---------------------------------------------------------------------

    def choose_targets(
        self, count: int, excluded_addresses: Iterable[str], block_size_bytes: int,
        writer: str = "",
    ) -> list[DataNode]:
        excluded = {
            node.node_id
            for node in map(self.datanodes.live_at, excluded_addresses)
            if node is not None
        }
        return placement.choose_targets(
            self.datanodes.live_nodes(), count, excluded=excluded,
            block_size_bytes=block_size_bytes, rng=self.rng, writer=writer or None,
        )

    def block_token(self, user: str, block_id: int, mode: str) -> str:
        now_ms = int(self.clock() * 1000)
        expires_ms = now_ms + int(self.config.block_token_lifetime_s * 1000)
        key = tokens.block_signing_key(self.ns.token_keys, now_ms, expires_ms)
        if key is None:
            raise InternalError("no valid token key to sign block tokens with")
        body = tokens.TokenBody(
            "block", user, key.key_id, now_ms, min(expires_ms, key.expires_ms),
            scope=tokens.block_scope(block_id, mode),
        )
        return tokens.issue_token(body, self._block_key(key))

    def check_block_token(self, token: str, block_id: int, mode: str) -> None:
        """As a DataNode would: AccessDenied (or AuthenticationFailed) unless ``token`` is a
        valid block token for ``mode`` access to ``block_id``."""
        keys = {key.key_id: self._block_key(key) for key in self.ns.token_keys.values()}
        tokens.check_block_token(token, keys, int(self.clock() * 1000), block_id, mode)

    def locations(self, block_id: int) -> list[str]:
        """Addresses of the good replicas in random order (readers spread over them), those
        on nodes being decommissioned or in maintenance last (as HDFS); the corrupt ones
        only when nothing else exists."""
        replicas = self.map.replicas(block_id)
        good = [r.node_id for r in replicas if not r.flags]
        self.rng.shuffle(good)
        good.sort(key=self._draining)  # decommissioning or in maintenance: read last
        return [self.address(n) for n in good] or [self.address(r.node_id) for r in replicas]

    def _draining(self, node_id: str) -> bool:
        node = self.datanodes.get(node_id)
        return node is not None and not node.accepts_replicas

    def replicas_matching(self, block: BlockRecord) -> int:
        """Replicas with exactly this genstamp and length (and no checksum failure): what
        ``complete`` counts, the writer's lengths being the truth."""
        return sum(
            1
            for r in self.map.replicas(block.block_id)
            if (r.genstamp, r.num_bytes) == (block.genstamp, block.num_bytes)
            and not r.flags & REPORTED_BAD
        )

    # --- lease and block recovery (decisions in block_recovery.py) -----------------------

    def expect(self, block_id: int, node_ids: Iterable[str]) -> None:
        """The last block of an open file was sent to these nodes (add_block, or a
        replacement target): a recovery asks them even if they never report it."""
        self._expected.setdefault(block_id, set()).update(node_ids)

    def plan_lease_recovery(
        self, blocks: Sequence[BlockRecord], truncating: bool = False
    ) -> CloseNow | RecoverBlock:
        """How to close an open file with these blocks (see block_recovery.py). A last
        block with acknowledged bytes (the namespace has a length for it: hflushed, reopened
        by append, or cut by a truncate) is only closed by a block recovery, from what its
        holders have now: replicas reported finalized may have been reopened since. With
        no holder to ask, the answer has no holders: the caller waits for one."""
        if not blocks:
            return CloseNow(())
        last = blocks[-1]
        if truncating or last.num_bytes > 0:
            return RecoverBlock(last, self.holders(last))
        finalized, rbw, expected = self._live_replicas(last.block_id)
        sent_to_dead = len(expected) < len(self._expected.get(last.block_id, ()))
        return plan_lease_recovery(blocks, finalized, rbw, expected, sent_to_dead)

    def holders(self, block: BlockRecord) -> tuple[str, ...]:
        """Node ids a recovery of ``block`` would ask (live holders, then expected)."""
        return recovery_holders(block, *self._live_replicas(block.block_id))

    def expect_holders(self, block_id: int) -> None:
        """A block reopened for append is written where its replicas are: a recovery asks
        those nodes even while they hold it under its old genstamp."""
        self.expect(block_id, [r.node_id for r in self.map.replicas(block_id)])

    def _live_replicas(
        self, block_id: int
    ) -> tuple[list[Replica], list[Replica], list[str]]:
        """The block's finalized and rbw replicas on live nodes, and its live expected
        holders (for recovery decisions)."""
        live = {node.node_id for node in self.datanodes.live_nodes()}
        return (
            [r for r in self.map.replicas(block_id) if r.node_id in live],
            [r for r in self.map.rbw_replicas(block_id) if r.node_id in live],
            sorted(live & self._expected.get(block_id, set())),
        )

    def begin_recovery(self, plan: RecoverBlock, genstamp: int) -> Attempt:
        """A new attempt at recovering ``plan.block`` with ``genstamp`` (logged by the
        caller, who then calls :meth:`dispatch_recovery` once the log is durable)."""
        heartbeats = {
            node_id: node.last_heartbeat_s
            for node_id in plan.holders
            if (node := self.datanodes.get(node_id)) is not None
        }
        primary = self.recoveries.choose_primary(plan.block.block_id, plan.holders, heartbeats)
        return self.recoveries.begin(plan.block.block_id, genstamp, primary, self.clock())

    def dispatch_recovery(self, attempt: Attempt) -> bool:
        """Queue the attempt's command for its primary's next heartbeat (False: the attempt
        was superseded, or its primary is gone: the next lease check starts another)."""
        node = self.datanodes.get(attempt.primary)
        if self.recoveries.current(attempt.block_id) is not attempt or node is None:
            return False
        if not node.live:
            self.recoveries.node_dead(node.node_id)
            return False
        node.recover.append(RecoveryWork(attempt.block_id, attempt.genstamp))
        return True

    def recovery_due(self, block_id: int) -> bool:
        """True unless an attempt at recovering ``block_id`` may still commit."""
        return self.recoveries.active(block_id, self.clock()) is None

    def _recover_task(self, work: RecoveryWork) -> RecoverBlockTask | None:
        attempt = self.recoveries.current(work.block_id)
        state = block_state(self.ns, work.block_id)
        if attempt is None or attempt.genstamp != work.recovery_genstamp or state is None:
            return None  # superseded or finished since it was queued
        holders = recovery_holders(state.record, *self._live_replicas(work.block_id))
        token = self.block_token(self.ns.superuser, work.block_id, "w")
        targets = [self.address(node_id) for node_id in holders]
        # a truncate cuts to the namespace's length; a lease recovery agrees on one
        new_length = state.record.num_bytes if self.ns.is_truncating(state.file) else -1
        return RecoverBlockTask(state.record, attempt.genstamp, targets, token, new_length)

    def report_bad_replica(self, block_id: int, address: str) -> bool:
        """A reader found a checksum error; ignored unless that node holds the replica."""
        node = self.datanodes.live_at(address)
        replica = self.map.replica(block_id, node.node_id) if node is not None else None
        if node is None or replica is None:
            return False
        self.map.set_flags(block_id, node.node_id, replica.flags | REPORTED_BAD)
        self.replication.check(block_id)
        return True

    def watch(self, block_id: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever ``block_id`` gains a replica (until unwatched)."""
        self._watchers.setdefault(block_id, []).append(callback)

    def watched(self, block_id: int) -> bool:
        """True while someone (a ``complete``) waits for replicas of ``block_id``."""
        return block_id in self._watchers

    def unwatch(self, block_id: int, callback: Callable[[], None]) -> None:
        callbacks = self._watchers.get(block_id, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            self._watchers.pop(block_id, None)

    # --- namespace changes ---------------------------------------------------------------

    def affected_blocks(self, op: Op, at: Sequence[INodesInPath] = ()) -> tuple[int, ...]:
        """Blocks to look at again once ``op`` (just applied) is durable. Computed at apply
        time: a later op may rename or delete the path before the sync completes."""
        if type(op) not in _AFFECTING_OPS:
            return ()  # (most ops: one set probe, not four isinstance checks)
        if isinstance(op, CloseFileOp):
            return tuple(b.block_id for b in op.blocks)
        if isinstance(op, UpdateBlocksOp):
            return tuple(b.block_id for b in op.blocks[-2:])  # the committed and the new last
        if isinstance(op, SetReplicationOp):
            return tuple(b.block_id for b in self.ns.get_blocks(self.ns.resolved(op.path, at)))
        if isinstance(op, ConcatOp):  # the moved blocks take the target's replication
            return tuple(b.block_id for b in self.ns.get_blocks(self.ns.resolved(op.target, at)))
        return ()

    def leaving(self, block_ids: Iterable[int]) -> None:
        """Blocks just dropped from the namespace, not durably yet: their replicas are
        neither orphans nor deleted until :meth:`ops_durable`."""
        self._leaving.update(block_ids)

    def ops_durable(self, dropped: Iterable[int], affected: Iterable[int]) -> None:
        """The ops are synced: delete the replicas of ``dropped`` blocks everywhere, and
        look again at ``affected`` ones (committed lengths, replication changed)."""
        for block_id in dropped:
            self._leaving.discard(block_id)
            self._expected.pop(block_id, None)
            self.recoveries.finish(block_id)
            self.replication.forget_block(block_id)
        for block_id in affected:
            state = block_state(self.ns, block_id)
            if state is not None and state.complete:  # written: no recovery wants it now
                self._expected.pop(block_id, None)
                self.recoveries.finish(block_id)
            self._reevaluate(block_id, state)

    # --- HA (failover.py) ------------------------------------------------------------------

    def become_standby(self) -> None:
        self.ha.become_standby(self.datanodes)

    def tailed(self, dropped: Iterable[int], affected: Iterable[int]) -> None:
        """A standby applied a batch of edits: the namespace changes as ops_durable, then
        the reports that waited for them."""
        self.ops_durable(dropped, affected)
        self.retry_pending()

    def retry_pending(self) -> None:
        for message in self.ha.ready(self.ns):
            node = self.datanodes.get(message.node_id)
            if node is not None and node.live:
                (self._reported_rbw if message.rbw else self._reported)(node, message.record)

    def become_active(self) -> None:
        """After the final catch-up: place what waited, then judge every replica again;
        deletions stay postponed until each live DataNode has heartbeated to us."""
        self.retry_pending()
        self.ha.become_active(self.datanodes)
        self.retry_pending()  # what is still ahead is now from the future: kept, counted
        # the final catch-up applied ops the map did not follow: every replica again
        mapped: set[int] = set().union(*(self.map.node_blocks(n.node_id) for n in self.datanodes))
        for block_id in mapped:
            state = block_state(self.ns, block_id)
            if state is not None:
                self._reevaluate(block_id, state)
                continue
            for replica in self.map.drop_block(block_id):  # orphans: postponed deletions
                node = self.datanodes.get(replica.node_id)
                if node is not None and node.live:
                    self.replication.orphan(node, block_id)

    # --- replication monitor -------------------------------------------------------------

    def replication_tick(self) -> int:
        return self.replication.tick()

    def update_safe_mode(self) -> str | None:
        """Feed safe mode the current counts; a message when it ends now."""
        safe, total = self.safe_counts()
        return self.safe_mode.update(safe, total, self.datanodes.live_count(), self.clock())

    def safe_counts(self) -> tuple[int, int]:
        """(blocks with min_replication good replicas, blocks) over complete blocks."""
        open_last = self.ns.open_last_blocks()
        minimum = self.config.min_replication
        total = self.ns.block_count() - len(open_last)
        safe = self.map.safe_blocks - sum(
            1 for b in open_last if self.map.good_count(b) >= minimum
        )
        return max(0, min(safe, total)), total

    def pending_deletion_count(self) -> int:
        return sum(len(node.deletions) for node in self.datanodes)

    def future_block_count(self) -> int:
        """Blocks from the future (see the module doc) held by live nodes."""
        return len(set().union(*(node.future for node in self.datanodes.live_nodes())))

    # --- reports in -----------------------------------------------------------------------

    def _reported(self, node: DataNode, record: BlockRecord) -> None:
        block_id = record.block_id
        if block_id in node.deletions:
            return  # already being deleted there: not a replica to count again
        if another_shards(self.ns, block_id):
            node.foreign.add(block_id)  # never counted, never deleted: the driver logs it
            return
        if self.ha.hold(self.ns, node, record):
            return
        if from_the_future(self.ns, record):
            node.future.add(block_id)  # kept: never an orphan, never corrupt
            return
        state = block_state(self.ns, block_id)
        if state is None and block_id not in self._leaving:
            self.replication.orphan(node, block_id)
            return
        flags = 0 if state is None else replica_flags(state, record)
        self.map.put(block_id, node.node_id, record.num_bytes, record.genstamp, flags)
        self.replication.replica_arrived(block_id, node.node_id)
        for callback in list(self._watchers.get(block_id, ())):
            callback()  # (wakes a waiting complete later, in a task: nothing changed yet)
        self.replication.check_state(block_id, state)

    def _reported_rbw(self, node: DataNode, record: BlockRecord) -> None:
        """A replica in state rbw: kept for block recovery, deleted as an orphan or (by the
        replication monitor) once its block is complete."""
        block_id = record.block_id
        if block_id in node.deletions:
            return
        if another_shards(self.ns, block_id):
            node.foreign.add(block_id)
            return
        if self.ha.hold(self.ns, node, record, rbw=True):
            return
        if block_state(self.ns, block_id) is None and block_id not in self._leaving:
            self.replication.orphan(node, block_id)
            return
        self._lost(block_id, node.node_id)  # it held a finalized replica: no longer
        self.map.put_rbw(block_id, node.node_id, record.num_bytes, record.genstamp)
        self.replication.check(block_id)

    def _lost(self, block_id: int, node_id: str) -> Replica | None:
        replica = self.map.remove(block_id, node_id)
        if replica is not None:
            self.replication.check(block_id)
        return replica

    def _reevaluate(self, block_id: int, state: BlockState | None) -> None:
        """Recompute every replica's flags (the committed length or genstamp changed);
        ``state``: the block's, just looked up."""
        if state is None:
            return
        for replica in list(self.map.replicas(block_id)):
            reported = BlockRecord(block_id, replica.genstamp, replica.num_bytes)
            flags = replica_flags(state, reported) | (replica.flags & REPORTED_BAD)
            if flags != replica.flags:
                self.map.set_flags(block_id, replica.node_id, flags)
        self.replication.check_state(block_id, state)

    def declare_dead(self, node: DataNode) -> None:
        """Treat ``node`` as dead now (admin -refreshNodes refused it)."""
        self._node_dead(node)

    def _node_dead(self, node: DataNode) -> None:
        # Replicas known bad are remembered: once back, the node will not report them (a
        # DataNode leaves its corrupt replicas out) but must still delete them.
        bad = {
            block_id
            for block_id in self.map.node_blocks(node.node_id)
            if (replica := self.map.replica(block_id, node.node_id)) is not None
            and replica.flags & REPORTED_BAD
        }
        if bad:
            self._bad_on_dead.setdefault(node.node_id, set()).update(bad)
        self.datanodes.mark_dead(node)
        self.ha.node_dead(node.node_id)
        self.recoveries.node_dead(node.node_id)
        self.reports.forget(node.node_id)
        self.replication.node_dead(node, self.map.drop_node(node.node_id))

    def _replicate_task(self, block_id: int, target_ids: tuple[str, ...]) -> ReplicateTask | None:
        state = block_state(self.ns, block_id)
        targets = [
            node.address
            for node in map(self.datanodes.get, target_ids)
            if node is not None and node.live
        ]
        if state is None or not targets:
            return None
        token = self.block_token(self.ns.superuser, block_id, "w")
        return ReplicateTask(state.record, targets, token)

    def address(self, node_id: str) -> str:
        node = self.datanodes.get(node_id)
        return node.address if node is not None else node_id
