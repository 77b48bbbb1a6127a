"""RPC handlers of the NameNode's client and admin services (xdfs.protocol.namenode).

Thin: authenticate the caller, translate the request, call the namesystem. Reads are plain
functions (run inline on the event loop, the fast path); the common mutations too, made in
one step and answered through a Deferred once their edits are synced; the other mutations
are coroutines because they wait for the edits log to sync.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from xdfs.errors import AccessDenied, AuthenticationFailed, InvalidArgument, NotAuthenticated
from xdfs.namenode import hosts
from xdfs.namenode.blocks import balancing, blockmap_export
from xdfs.namenode.blocks import fsck as health
from xdfs.namenode.fs_core import Pending
from xdfs.namenode.namesystem import Namesystem
from xdfs.namenode.security.auth import ANONYMOUS, DataNodePrincipal, NameNodeAuth, UserPrincipal
from xdfs.namenode.webhdfs.scoped_urls import read_token_user, write_token_user
from xdfs.protocol import namenode as p
from xdfs.protocol.datanode import BadReplicasRequest
from xdfs.rpc.handling import CallContext, Deferred, Download, Principal, call_key, deferring
from xdfs.rpc.messages import Empty

log = logging.getLogger(__name__)

T = TypeVar("T")


def caller(ctx: CallContext, fs: Namesystem) -> str:
    """The authenticated user of a call (every method but login needs one)."""
    return principal_user(ctx.principal, fs)


def principal_user(principal: Principal, fs: Namesystem) -> str:
    """The user a principal acts as, checked as every client call checks it (also used by
    the WebHDFS gateway, whose requests authenticate without a connection)."""
    user = principal.user
    if user == ANONYMOUS:
        raise NotAuthenticated("log in first: this call needs a user or a token")
    if isinstance(principal, DataNodePrincipal):
        raise AccessDenied(f"{user} is a DataNode: its credential serves no client call")
    record = fs.ns.users.get(user)
    if record is None:
        # removed since this connection authenticated: its sessions end with it
        raise AuthenticationFailed(f"user {user} no longer exists")
    if isinstance(principal, UserPrincipal) and principal.generation != record.generation:
        raise AuthenticationFailed(
            f"the password of {user} changed since this connection authenticated; log in again"
        )
    return user


def answer_after_sync(
    fs: Namesystem,
    pending: Pending[T] | None,
    slow: Callable[[], Awaitable[object]],
    convert: Callable[[T], object] | None = None,
) -> Deferred:
    """The reply of a mutation made in one step: its answer (``convert`` ed), once its
    edits are durable; the edits log's error if they never will be. ``pending`` None (it
    must wait for something first): ``slow()``, the async API, in a task of its own."""
    if pending is None:
        return Deferred.running(slow())
    reply = Deferred(convert)
    fs.after_sync(pending, reply.settle)
    return reply


def _deleted(trash_path: str) -> p.DeleteResponse:
    return p.DeleteResponse(True, trash_path)


class ClientHandlers:
    def __init__(self, namesystem: Namesystem, auth: NameNodeAuth) -> None:
        self.fs = namesystem
        self.auth = auth

    async def login(self, ctx: CallContext, req: p.LoginRequest) -> p.LoginResponse:
        # A connection that proved req.user's password (SCRAM) asks with none; a password
        # in the request (older clients) is checked as HTTP Basic auth's is.
        issued = None if req.password else await self.auth.login_as(
            ctx.principal, req.user, req.lifetime_s)
        if issued is None:
            issued = await self.auth.login(req.user, req.password, req.lifetime_s, ctx.peer)
        token, expires_ms = issued
        return p.LoginResponse(req.user, token, expires_ms)

    # The common mutations are plain handlers: the mutation in one step, answered once its
    # edits are synced with no coroutine, future or task (answer_after_sync); what must
    # wait first (a full edits buffer, a lease to recover, replicas not yet reported, a
    # retry) takes the async API in a task of its own (Deferred.running).

    @deferring
    def mkdirs(self, ctx: CallContext, req: p.MkdirsRequest) -> Deferred:
        user = caller(ctx, self.fs)
        pending = self.fs.mkdirs_now(call_key(ctx), user, req.path, req.mode, req.parents)
        return answer_after_sync(
            self.fs, pending, lambda: self.fs.mkdirs(user, req.path, req.mode, req.parents))

    @deferring
    def create(self, ctx: CallContext, req: p.CreateRequest) -> Deferred:
        return self._create(ctx, req, first_block=False)

    @deferring
    def create_with_block(self, ctx: CallContext, req: p.CreateRequest) -> Deferred:
        return self._create(ctx, req, first_block=True)

    def _create(self, ctx: CallContext, req: p.CreateRequest, *, first_block: bool) -> Deferred:
        if not req.client:
            raise InvalidArgument("create needs a client name (the lease holder)")
        fs = self.fs
        user = caller(ctx, fs)
        pending = fs.create_now(
            call_key(ctx), user, req.client, req.path, mode=req.mode,
            replication=req.replication, block_size=req.block_size, overwrite=req.overwrite,
            create_parents=req.create_parents, first_block=first_block,
        )
        slow = fs.create_with_block if first_block else fs.create
        return answer_after_sync(fs, pending, lambda: slow(
            user, req.client, req.path, mode=req.mode, replication=req.replication,
            block_size=req.block_size, overwrite=req.overwrite,
            create_parents=req.create_parents,
        ), fs.with_block if first_block else None)

    async def add_block(self, ctx: CallContext, req: p.AddBlockRequest) -> p.LocatedBlock:
        return await self.fs.add_block(
            caller(ctx, self.fs), req.client, req.path, req.previous, req.excluded,
            writer=ctx.peer,
        )

    async def abandon_block(self, ctx: CallContext, req: p.AbandonBlockRequest) -> Empty:
        await self.fs.abandon_block(caller(ctx, self.fs), req.client, req.path, req.block_id)
        return Empty()

    def additional_datanode(
        self, ctx: CallContext, req: p.AdditionalDataNodeRequest
    ) -> p.LocatedBlock:
        return self.fs.additional_datanode(
            caller(ctx, self.fs), req.client, req.path, req.block, req.existing, req.excluded
        )

    def report_bad_replicas(self, ctx: CallContext, req: BadReplicasRequest) -> Empty:
        """From a DataNode, a superuser, or a client with a token for each block it names
        (a reader reports what its checksums caught, nothing else)."""
        if not isinstance(ctx.principal, DataNodePrincipal):
            user = caller(ctx, self.fs)
            if not self.fs.ns.is_superuser(user):
                for bad in req.replicas:
                    self.fs.blocks.check_block_token(bad.token, bad.block_id, "r")
        self.fs.report_bad_replicas([(bad.block_id, bad.address) for bad in req.replicas])
        return Empty()

    @deferring
    def complete(self, ctx: CallContext, req: p.CompleteRequest) -> Deferred:
        user = caller(ctx, self.fs)
        pending = self.fs.complete_now(call_key(ctx), user, req.client, req.path, req.blocks)
        return answer_after_sync(
            self.fs, pending, lambda: self.fs.complete(user, req.client, req.path, req.blocks))

    async def append(self, ctx: CallContext, req: p.AppendRequest) -> p.AppendResponse:
        return await self.fs.append(caller(ctx, self.fs), req.client, req.path)

    async def fsync(self, ctx: CallContext, req: p.FsyncRequest) -> Empty:
        await self.fs.fsync(caller(ctx, self.fs), req.client, req.path, req.last_block)
        return Empty()

    async def truncate(self, ctx: CallContext, req: p.TruncateRequest) -> p.TruncateResponse:
        done = await self.fs.truncate(caller(ctx, self.fs), req.path, req.new_length)
        return p.TruncateResponse(done)

    async def concat(self, ctx: CallContext, req: p.ConcatRequest) -> Empty:
        await self.fs.concat(caller(ctx, self.fs), req.target, req.sources)
        return Empty()

    def renew_lease(self, ctx: CallContext, req: p.RenewLeaseRequest) -> Empty:
        self.fs.renew_lease(caller(ctx, self.fs), req.client)
        return Empty()

    async def recover_lease(
        self, ctx: CallContext, req: p.RecoverLeaseRequest
    ) -> p.RecoverLeaseResponse:
        return p.RecoverLeaseResponse(await self.fs.recover_lease(caller(ctx, self.fs), req.path))

    def block_locations(self, ctx: CallContext, req: p.BlockLocationsRequest) -> p.LocatedBlocks:
        user = (read_token_user(self.fs, req.ticket, req.path) if req.ticket
                else caller(ctx, self.fs))
        return self.fs.block_locations(user, req.path, req.offset, req.length)

    async def webhdfs_write_login(
        self, ctx: CallContext, req: p.WebHdfsWriteRequest
    ) -> p.LoginResponse:
        """For a DataNode only (or a superuser acting as one, as the DataNode protocol
        allows): whoever else holds a write URL can send it to a DataNode, not use it."""
        if not isinstance(ctx.principal, DataNodePrincipal):
            self.auth.require_superuser(caller(ctx, self.fs), "exchange a WebHDFS write token")
        user, expires_ms = write_token_user(self.fs, req.ticket, req.op, req.path)
        lifetime_s = max(0.001, (expires_ms - self.fs.now_ms()) / 1000)
        token, expires_ms = await self.auth.issue_token(self.fs.ns.users[user], user,
                                                        lifetime_s)
        return p.LoginResponse(user, token, expires_ms)

    def stat(self, ctx: CallContext, req: p.PathRequest) -> p.FileStatus:
        return self.fs.stat(caller(ctx, self.fs), req.path)

    def list(self, ctx: CallContext, req: p.ListRequest) -> p.Listing:
        user = caller(ctx, self.fs)
        entries, remaining = self.fs.list_dir(user, req.path, req.start_after, req.limit)
        return p.Listing(entries, remaining)

    @deferring
    def delete(self, ctx: CallContext, req: p.DeleteRequest) -> Deferred:
        user = caller(ctx, self.fs)
        pending = self.fs.delete_now(call_key(ctx), user, req.path, req.recursive,
                                     req.skip_trash)
        return answer_after_sync(self.fs, pending, lambda: self._delete(user, req), _deleted)

    async def _delete(self, user: str, req: p.DeleteRequest) -> p.DeleteResponse:
        return _deleted(await self.fs.delete(
            user, req.path, recursive=req.recursive, skip_trash=req.skip_trash))

    @deferring
    def rename(self, ctx: CallContext, req: p.RenameRequest) -> Deferred:
        user = caller(ctx, self.fs)
        pending = self.fs.rename_now(call_key(ctx), user, req.src, req.dst)
        return answer_after_sync(
            self.fs, pending, lambda: self._rename(user, req), p.RenameResponse)

    async def _rename(self, user: str, req: p.RenameRequest) -> p.RenameResponse:
        return p.RenameResponse(await self.fs.rename(user, req.src, req.dst))

    async def set_permission(self, ctx: CallContext, req: p.SetPermissionRequest) -> Empty:
        await self.fs.set_permission(caller(ctx, self.fs), req.path, req.mode)
        return Empty()

    async def set_owner(self, ctx: CallContext, req: p.SetOwnerRequest) -> Empty:
        await self.fs.set_owner(caller(ctx, self.fs), req.path, req.owner, req.group)
        return Empty()

    async def set_replication(self, ctx: CallContext, req: p.SetReplicationRequest) -> Empty:
        await self.fs.set_replication(caller(ctx, self.fs), req.path, req.replication)
        return Empty()

    async def set_times(self, ctx: CallContext, req: p.SetTimesRequest) -> Empty:
        await self.fs.set_times(caller(ctx, self.fs), req.path, req.mtime_ms, req.atime_ms)
        return Empty()

    async def content_summary(self, ctx: CallContext, req: p.PathRequest) -> p.ContentSummary:
        return await self.fs.content_summary(caller(ctx, self.fs), req.path)

    def access(self, ctx: CallContext, req: p.AccessRequest) -> Empty:
        self.fs.access(caller(ctx, self.fs), req.path, req.access)
        return Empty()

    async def restore(self, ctx: CallContext, req: p.RestoreRequest) -> p.RestoreResponse:
        return p.RestoreResponse(await self.fs.restore(caller(ctx, self.fs), req.trash_path))

    async def expunge(self, ctx: CallContext, req: p.ExpungeRequest) -> Empty:
        await self.fs.expunge(caller(ctx, self.fs), req.immediate)
        return Empty()


class AdminHandlers:
    """Operator calls; the NameNode server supplies the storage-level actions."""

    def __init__(
        self,
        namesystem: Namesystem,
        auth: NameNodeAuth,
        save_namespace: Callable[[], Awaitable[int]],
        roll_edits: Callable[[], Awaitable[int]],
        status: Callable[[], p.NameNodeStatus],
    ) -> None:
        self.fs = namesystem
        self.auth = auth
        self._save_namespace = save_namespace
        self._roll_edits = roll_edits
        self._status = status

    def _superuser(self, ctx: CallContext, what: str) -> str:
        user = caller(ctx, self.fs)
        self.auth.require_superuser(user, what)
        return user

    def safe_mode(self, ctx: CallContext, req: p.SafeModeRequest) -> p.SafeModeStatus:
        if req.action == "enter":
            log.info("safe mode entered by %s", self._superuser(ctx, "enter safe mode"))
            self.fs.safe_mode.enter()
        elif req.action == "leave":
            user = self._superuser(ctx, "leave safe mode")
            log.info("safe mode left by %s (was: %s)", user, self.fs.safe_mode.reason or "off")
            self.fs.safe_mode.leave()
        elif req.action != "get":
            raise InvalidArgument("safe mode action must be get, enter or leave")
        else:
            caller(ctx, self.fs)
        return p.SafeModeStatus(self.fs.safe_mode.on, self.fs.safe_mode.reason)

    async def save_namespace(self, ctx: CallContext, req: Empty) -> p.TxidResponse:
        self._superuser(ctx, "save the namespace")
        return p.TxidResponse(await self._save_namespace())

    async def roll_edits(self, ctx: CallContext, req: Empty) -> p.TxidResponse:
        self._superuser(ctx, "roll the edits log")
        return p.TxidResponse(await self._roll_edits())

    async def add_user(self, ctx: CallContext, req: p.UserRequest) -> Empty:
        await self.auth.add_user(caller(ctx, self.fs), req.name, req.password, req.groups)
        return Empty()

    async def remove_user(self, ctx: CallContext, req: p.UserRequest) -> Empty:
        await self.auth.remove_user(caller(ctx, self.fs), req.name)
        return Empty()

    async def set_password(self, ctx: CallContext, req: p.UserRequest) -> Empty:
        await self.auth.set_password(caller(ctx, self.fs), req.name, req.password)
        return Empty()

    def status(self, ctx: CallContext, req: Empty) -> p.NameNodeStatus:
        caller(ctx, self.fs)
        return self._status()

    def datanode_report(self, ctx: CallContext, req: Empty) -> p.DataNodeReport:
        caller(ctx, self.fs)
        return health.datanode_report(self.fs.ns, self.fs.blocks)

    async def fsck(self, ctx: CallContext, req: p.FsckRequest) -> p.FsckReport:
        user = caller(ctx, self.fs)
        return await self.fs.fsck_walks.run(health.fsck_steps(
            self.fs.ns, self.fs.blocks, self.fs.config, user, req.path,
            files=req.files, with_blocks=req.blocks, locations=req.locations,
        ))

    async def set_quota(self, ctx: CallContext, req: p.SetQuotaRequest) -> Empty:
        user = self._superuser(ctx, "set quotas")
        await self.fs.set_quota(user, req.path, req.ns_quota, req.ds_quota)
        return Empty()

    async def block_map(self, ctx: CallContext, req: Empty) -> Download:
        self._superuser(ctx, "dump the block map")
        head, block_ids = await self.fs.walks.run(
            blockmap_export.snapshot_steps(self.fs.ns, self.fs.blocks))
        return Download(head, blockmap_export.frames(self.fs.ns, self.fs.blocks, block_ids))

    def refresh_nodes(self, ctx: CallContext, req: Empty) -> p.RefreshNodesResponse:
        user = self._superuser(ctx, "refresh the DataNode host lists")
        refused = hosts.refresh_nodes(self.fs.blocks, self.fs.config)
        log.info("host lists re-read by %s", user)
        return health.admin_summary(self.fs.blocks, [node.address for node in refused])

    def balancer_blocks(
        self, ctx: CallContext, req: p.BalancerBlocksRequest
    ) -> p.BalancerBlocksResponse:
        self._superuser(ctx, "list blocks for the balancer")
        return p.BalancerBlocksResponse(
            balancing.movable_blocks(self.fs.blocks.replication, req.node_id, req.bytes_max)
        )

    async def move_replica(
        self, ctx: CallContext, req: p.MoveReplicaRequest
    ) -> p.MoveReplicaResponse:
        """Schedule the move, then wait (bounded) for the target's copy to be reported."""
        self._superuser(ctx, "move replicas")
        monitor = self.fs.blocks.replication
        balancing.schedule_move(monitor, req.block_id, req.source, req.target)
        arrived = asyncio.Event()
        self.fs.blocks.watch(req.block_id, arrived.set)
        try:
            async with asyncio.timeout(self.fs.config.balancer_move_timeout_s):
                while (done := balancing.move_done(monitor, req.block_id, req.target)) is None:
                    arrived.clear()
                    await arrived.wait()
        except TimeoutError:
            return p.MoveReplicaResponse(False, "the target did not report the copy in time")
        finally:
            self.fs.blocks.unwatch(req.block_id, arrived.set)
        return p.MoveReplicaResponse(done, "" if done else "the copy failed or expired")
