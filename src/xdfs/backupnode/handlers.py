"""RPC handlers of the BackupNode's own service (the NameNode's answer NotActive:
:class:`xdfs.rpc.service.NotActiveHandlers`)."""

from __future__ import annotations

from typing import Protocol

from xdfs.backupnode.local import Local
from xdfs.errors import AccessDenied, NotAuthenticated
from xdfs.namenode.security.auth import ANONYMOUS
from xdfs.protocol.backup import BackupStatus, TakeoverResponse
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import Empty


class Backup(Protocol):
    """What the handlers call on the BackupNode."""

    def status(self) -> BackupStatus: ...

    async def transition_to_active(self) -> TakeoverResponse: ...


class BackupHandlers:
    def __init__(self, local: Local, node: Backup) -> None:
        self.local = local  # its namespace says who the superusers are
        self.node = node

    def _superuser(self, ctx: CallContext, what: str) -> None:
        user = ctx.principal.user
        if user == ANONYMOUS:
            raise NotAuthenticated("log in first: this call needs a user or a token")
        namespace = self.local.namespace
        if namespace is None or not namespace.is_superuser(user):
            raise AccessDenied(f"Permission denied: only the superuser may {what} (user={user})")

    def backup_status(self, ctx: CallContext, req: Empty) -> BackupStatus:
        self._superuser(ctx, "read the backup's status")
        return self.node.status()

    async def transition_to_active(self, ctx: CallContext, req: Empty) -> TakeoverResponse:
        self._superuser(ctx, "promote a backup")
        return await self.node.transition_to_active()
