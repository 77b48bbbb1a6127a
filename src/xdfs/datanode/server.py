"""The DataNode process: storage, the ``datanode`` RPC service, the NameNode actor, the
replicator, block recovery, the block scanner and the directory scanner.

Metadata sharding: one actor set (an offer) per shard of ``datanode.shards`` (else one, for
``datanode.namenode``: shard 0), each with the shard's block pool (``layout.py``), block keys,
epoch watermark and reports; a replica's shard is that of its block id.

Start: lock the data dir (a second DataNode on it refuses to start), read or create
VERSION, load the rbw replicas (cut to what their checksums cover) and the finalized ones,
serve, then register with the NameNode in the background (block writes are refused until
its block keys arrive). Stop (SIGTERM): stop the background tasks, close the server
(writes in progress stop; what they wrote is kept in rbw), release the lock. Fatal errors
(wrong cluster, rejected credentials) set ``fatal`` and ``stopped``; whoever runs the node
then calls ``stop()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from xdfs.common.aio import KernelSyncs, open_kernel_syncs
from xdfs.common.tokens import BlockKey, check_block_token
from xdfs.config import XdfsConfig
from xdfs.datanode import direct
from xdfs.datanode.actor import NameNodeActor
from xdfs.datanode.block_recovery import BlockRecovery
from xdfs.datanode.directory_scanner import DirectoryScanner
from xdfs.datanode.handlers import DataNodeHandlers
from xdfs.datanode.idle_work import work_while_idle
from xdfs.datanode.offer import NameNodeOffer
from xdfs.datanode.peers import Peers
from xdfs.datanode.replica import Replica, ReplicaReader
from xdfs.datanode.replication import Replicator
from xdfs.datanode.scanner import BlockScanner
from xdfs.datanode.storage import DataStorage
from xdfs.datanode.transfer import Transfers, in_thread
from xdfs.errors import (
    BlockNotFound,
    ConfigError,
    CorruptReplica,
    ShardNotServed,
    StorageError,
    Unavailable,
    XdfsError,
)
from xdfs.http.server import HttpServer
from xdfs.http.ui.status import start_status_http
from xdfs.protocol.datanode import DATANODE_SERVICE, DATANODE_USER_PREFIX, DataNodeInfoResponse
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.server import RpcServer
from xdfs.rpc.tls import client_context, server_context
from xdfs.sharding.ids import shard_of_id

log = logging.getLogger(__name__)


class DataNode:
    def __init__(
        self,
        config: XdfsConfig,
        data_dir: Path,
        namenode_addresses: list[str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        dn = config.datanode
        #: Shard -> its NameNode address(es) (``datanode.shards``, else shard 0).
        self.shard_addresses = _shard_addresses(config, namenode_addresses)
        self.namenode_addresses = next(iter(self.shard_addresses.values()))
        self.clock = clock
        self.storage = DataStorage(data_dir, dn.checksum_chunk_bytes, dn.reserved_bytes,
                                   dn.capacity_bytes, dn.direct_io,
                                   dn.loop_write_max_bytes, dn.small_direct_io,
                                   dn.spare_files_max, shards=self.shard_addresses)
        #: Each shard's block-token keys (key id -> key), replaced as it rotates them: a
        #: block's token is checked with the keys of the block's shard.
        self.shard_keys: dict[int, dict[int, BlockKey]] = {k: {} for k in self.shard_addresses}
        #: Set once a registration installed a shard's first keys: data calls wait for it.
        self._keys_installed = {k: asyncio.Event() for k in self.shard_addresses}
        self.transfers = Transfers()
        #: Block bytes served to readers and stored from writers (xdfs_datanode_*_bytes).
        self.bytes_read = 0
        self.bytes_written = 0
        self.server: RpcServer | None = None
        self.http: HttpServer | None = None
        #: Each shard's NameNode actors (one offer per shard).
        self.offers: dict[int, NameNodeOffer] = {}
        peers = Peers(config.rpc, self.storage)  # replication copies, recovery steps
        self.replicator = Replicator(self, dn, peers)
        self.block_recovery = BlockRecovery(self, dn, peers)
        self.scanner = BlockScanner(
            self.storage, dn, config.rpc.stream_chunk_bytes, self.on_corrupt, self.on_missing
        )
        self.directory_scanner = DirectoryScanner(
            self.storage, dn, self.discard_missing, self.on_found
        )
        #: Block id -> the call writing it now (a block recovery stops it).
        self.writers: dict[int, asyncio.Task[Any]] = {}
        #: The kernel's AIO for small replicas' fsyncs (``aio.py``); None: threads.
        self.syncs: KernelSyncs | None = None
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._chores: set[asyncio.Task[Any]] = set()
        self._started = False

    @property
    def address(self) -> str:
        assert self.server is not None, "DataNode not started"
        return self.server.address

    @property
    def http_address(self) -> str:
        """host:port of the HTTP server (WebHDFS data); "" when datanode.http_address is
        unset. Sent to the NameNode at registration, for its redirects."""
        return self.http.address if self.http is not None else ""

    @property
    def cluster_id(self) -> str:
        return self.storage.cluster_id

    @property
    def actor(self) -> NameNodeOffer | None:
        """The actors of the first shard served (the only one without sharding)."""
        return next(iter(self.offers.values()), None)

    @property
    def block_keys(self) -> dict[int, BlockKey]:
        """The first shard's block keys (the only ones without sharding)."""
        return next(iter(self.shard_keys.values()))

    @property
    def registered(self) -> bool:
        """Registered with (a NameNode of) every shard."""
        return bool(self.offers) and all(offer.registered for offer in self.offers.values())

    def offer_of(self, block_id: int) -> NameNodeOffer:
        """The actors of the block's shard; ShardNotServed when this node serves none."""
        offer = self.offers.get(shard_of_id(block_id))
        if offer is None:
            raise ShardNotServed(_not_served(block_id, self.shard_addresses))
        return offer

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        try:
            summary = await in_thread(self.storage.open, self.now_ms())
        except XdfsError as exc:
            self.fatal = exc
            self.stopped.set()
            raise
        self._started = True
        self.syncs = open_kernel_syncs(asyncio.get_running_loop())
        try:
            hello = self._namenode_hello()
        except XdfsError as exc:
            self.fatal = exc
            await self.stop()
            raise
        log.info("data dir %s: node %s, %d replica(s) (%d in rbw)", self.data_dir,
                 self.storage.node_id, summary.replicas, summary.rbw_kept)
        rpc = self.config.rpc
        try:
            self.server = RpcServer(
                "datanode", rpc, cluster_id=self.storage.cluster_id,
                ssl_context=server_context(rpc),
            )
            add_system_services(self.server, "datanode")
            self.server.add_service(DATANODE_SERVICE, DataNodeHandlers(self))
            await self.server.start(host, port)
            await self._start_http()
        except BaseException:
            await self.stop()
            raise
        persist = asyncio.Lock()  # VERSION is one file: one write at a time of any shard
        for shard, addresses in self.shard_addresses.items():
            self.offers[shard] = offer = self._offer(hello, shard, addresses, persist)
            self._spawn(f"namenode actors of shard {shard}", offer.run())
        self._spawn("block scanner", self.scanner.run())
        self._spawn("directory scanner", self.directory_scanner.run())
        self._spawn("work while idle", work_while_idle(self.storage, in_thread))
        return self.server.address

    def _offer(self, hello: Hello, shard: int, addresses: list[str], persist: asyncio.Lock
               ) -> NameNodeOffer:
        """One actor per NameNode of an HA pair, else one for the address list (offer.py).
        A shard of ``datanode.shards`` with two addresses is an HA pair (a shard is a
        nameservice); ``datanode.namenode``'s are when ``ha.namenodes`` lists them."""
        rpc = self.config.rpc
        paired = bool(self.config.datanode.shards) or set(addresses) <= set(
            self.config.ha.namenodes.values())
        ha = len(addresses) > 1 and paired
        actors = [
            NameNodeActor(self, RpcClient(group, rpc, hello=hello,
                                          ssl_context=client_context(rpc)), shard=shard)
            for group in ([[a] for a in addresses] if ha else [addresses])
        ]
        offer = NameNodeOffer(self.storage, self.on_fatal, actors, ha=ha, shard=shard,
                              persist=persist)
        for actor in actors:
            actor.offer = offer
        return offer

    async def _start_http(self) -> None:
        """WebHDFS data, the status page and /metrics on datanode.http_address (if set)."""
        assert self.server is not None
        from xdfs.datanode.metrics import register_metrics, status_facts
        from xdfs.datanode.webhdfs import DataNodeWebHdfs

        register_metrics(self, self.server.metrics)
        self.http = await start_status_http(
            "datanode", self.config.datanode.http_address, self.config.http.body_bytes_max,
            self.server.metrics, lambda: status_facts(self),
            DataNodeWebHdfs(self.config, self.namenode_addresses, self._namenode_hello).routes(),
            self.config.http)

    def _namenode_hello(self) -> Hello:
        """How this DataNode logs in to its NameNodes: as ``dn/<node id>`` with the cluster's
        DataNode secret (``datanode.secret_file``), or else as ``client.user``."""
        name = f"datanode:{self.storage.node_id}"
        secret_file = self.config.datanode.secret_file
        if secret_file:
            try:
                secret = Path(secret_file).read_text("ascii").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(
                    f"datanode.secret_file: cannot read {secret_file}: {exc}"
                ) from None
            return Hello(PROTOCOL_VERSION, cluster_id=self.storage.cluster_id, client_name=name,
                         user=DATANODE_USER_PREFIX + self.storage.node_id, password=secret)
        client = self.config.client
        log.warning("datanode.secret_file is not set: logging in to the NameNode as user %r "
                    "(give DataNodes the cluster's datanode.secret, not a superuser's password)",
                    client.user)
        return Hello(PROTOCOL_VERSION, cluster_id=self.storage.cluster_id, client_name=name,
                     user=client.user, password=client.password, token=client.token)

    def _spawn(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:  # a bug: the node cannot go on half-working
            log.critical("%s failed", task.get_name(), exc_info=error)
            self.on_fatal(error)

    async def stop(self) -> None:
        """Graceful stop; safe to call more than once."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for chore in self._chores:
            chore.cancel()
        await asyncio.gather(*self._chores, return_exceptions=True)
        await self.replicator.close()
        await self.block_recovery.close()
        for offer in self.offers.values():
            await offer.close()
        if self.http is not None:
            await self.http.stop()
        if self.server is not None:
            await self.server.close()  # cancels writes in progress: their rbw files go
        for offer in self.offers.values():
            await offer.close_rpc()
        if self.syncs is not None:  # (no write is left to use it)
            self.syncs.close()
            self.syncs = None
        if self._started:
            with contextlib.suppress(Exception):
                self.storage.close()
            self._started = False
        self.stopped.set()

    def on_fatal(self, error: BaseException) -> None:
        if self.fatal is None:
            self.fatal = error
            message = error.message if isinstance(error, XdfsError) else repr(error)
            log.critical("DataNode stopping: %s: %s", type(error).__name__, message)
        self.stopped.set()

    def joined_cluster(self, cluster_id: str) -> None:
        """Registration told us the cluster: clients of another cluster are refused now."""
        if self.server is not None:
            self.server.cluster_id = cluster_id

    # -- used by the data path ----------------------------------------------------------

    def install_keys(self, keys: list[BlockKey], shard: int = 0) -> None:
        """A shard's block keys, given at registration and as its NameNode rotates them."""
        if keys:
            installed = self.shard_keys[shard]
            installed.clear()
            installed.update((key.key_id, key) for key in keys)
            self._keys_installed[shard].set()

    async def check_token(self, token: str, block_id: int, mode: str) -> None:
        """Unavailable or InvalidToken unless ``token`` grants ``mode`` on ``block_id``.

        A call that comes before the first keys waits for them: the NameNode may place a
        block here as soon as it has answered the registration, while this node is still
        making that registration durable (an fsync or two), and a client of a restarted
        node may come before it has registered again. The keys are those of the block's
        shard; a block of a shard this node does not serve is refused (ShardNotServed)."""
        shard = shard_of_id(block_id)
        keys = self.shard_keys.get(shard)
        if keys is None:
            raise ShardNotServed(_not_served(block_id, self.shard_addresses))
        if not keys:
            wait_s = self.config.datanode.registration_wait_s
            try:
                async with asyncio.timeout(wait_s):
                    await self._keys_installed[shard].wait()
            except TimeoutError:
                raise Unavailable(
                    f"this DataNode has no block keys yet (not registered with a NameNode "
                    f"of shard {shard} within {wait_s:g} s)"
                ) from None
        check_block_token(token, keys, self.now_ms(), block_id, mode)

    def open_replica(self, replica: Replica, offset: int, length: int) -> ReplicaReader:
        """A verified reader of a local replica; a replica found corrupt or without its
        files is dealt with (reported) before the error goes to the caller."""
        try:
            direct_io = self.config.datanode.direct_io
            piece = self.config.rpc.stream_chunk_bytes
            if direct_io:  # no kernel read-ahead: larger pieces, read in parts at once
                piece = max(piece, direct.READ_PIECE_BYTES)
            kernel_reads = (self.storage.small_direct_io and self.syncs is not None
                            and self.syncs.enabled and direct.KERNEL_WRITES)
            return ReplicaReader(replica, offset, length, piece, direct_io, kernel_reads)
        except CorruptReplica as exc:
            self.on_corrupt(replica, exc)
            raise
        except BlockNotFound:
            self.on_missing(replica)
            raise

    def on_missing(self, replica: Replica) -> None:
        """A read, a copy or a scan found the replica's files gone: report it at once."""
        self._chore(self.discard_missing([replica]))

    async def discard_missing(self, replicas: list[Replica]) -> None:
        """Drop replicas whose files vanished (unless the map changed meanwhile): out of
        the map, what is left of their files deleted, and reported deleted to the NameNode
        at once, so it copies the blocks again (to this node too: nothing is left here)."""
        storage = self.storage
        gone = [
            r for r in replicas
            if storage.get(r.block_id) is r and not storage.is_busy(r.block_id)
        ]
        if not gone:
            return
        for replica in gone:
            storage.claim(replica.block_id)
            storage.take(replica.block_id)
        try:
            await in_thread(storage.delete_files, gone)
        except StorageError as exc:
            log.error("cannot delete what is left of vanished replicas: %s", exc.message)
        finally:
            for replica in gone:
                storage.release(replica.block_id)
        ids = [replica.block_id for replica in gone]
        log.warning("replica file(s) of block(s) %s vanished from disk: dropped and "
                    "reported to the NameNode", ids)
        for offer, of_shard in self._by_offer(gone):
            offer.report_soon(deleted=[replica.block_id for replica in of_shard])

    def on_found(self, replicas: list[Replica]) -> None:
        """The directory scanner added replicas the map did not know: report them."""
        for offer, of_shard in self._by_offer(replicas):
            offer.report_soon(received=[replica.record for replica in of_shard])

    def on_kept(self, replica: Replica) -> None:
        """A write broke and its bytes were kept in state rbw: report them."""
        for offer, _ in self._by_offer([replica]):
            offer.report_soon(rbw=[replica.record])

    def _by_offer(self, replicas: list[Replica]) -> list[tuple[NameNodeOffer, list[Replica]]]:
        """``replicas`` grouped by the actors of their shards (the storage holds only the
        pools of shards served; none before the node started)."""
        groups: dict[int, list[Replica]] = {}
        for replica in replicas:
            groups.setdefault(shard_of_id(replica.block_id), []).append(replica)
        return [(self.offers[k], group) for k, group in groups.items() if k in self.offers]

    async def stop_writer(self, block_id: int) -> None:
        """Stop a write of ``block_id`` in progress (a block recovery takes over; what was
        written is kept in rbw) and wait until it has stopped."""
        task = self.writers.get(block_id)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait([task])

    def _chore(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    def on_corrupt(self, replica: Replica, error: CorruptReplica) -> None:
        """A checksum failed: exclude the replica from reads and report it (once)."""
        if not self.storage.mark_corrupt(replica):
            return
        log.error("corrupt replica of block %d: %s", replica.block_id, error.message)
        for offer, _ in self._by_offer([replica]):
            offer.report_bad(replica.block_id)

    def info(self) -> DataNodeInfoResponse:
        return DataNodeInfoResponse(
            self.storage.node_id,
            self.storage.cluster_id,
            self.address,
            self.storage.storage_report(),
            len(self.storage.replicas),
            self.registered,
        )


def _shard_addresses(config: XdfsConfig, namenode_addresses: list[str]) -> dict[int, list[str]]:
    """Shard -> NameNode addresses: ``datanode.shards`` (each value resolved as
    ``datanode.namenode`` is, nameservices included), else ``namenode_addresses`` as shard 0."""
    from xdfs.common.addresses import parse_fs_uri

    table = config.datanode.shard_table()
    if not table:
        assert namenode_addresses, "a DataNode needs at least one NameNode address"
        return {0: list(namenode_addresses)}
    nameservices = config.ha.nameservices()
    return {shard: parse_fs_uri(value, nameservices) for shard, value in table.items()}


def _not_served(block_id: int, shards: dict[int, list[str]]) -> str:
    return (f"block {block_id} belongs to shard {shard_of_id(block_id)}, and this DataNode "
            f"keeps block pools for shard(s) {', '.join(map(str, shards))} only "
            "(datanode.shards)")
