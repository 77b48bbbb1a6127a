"""RPC handlers of the BackupNode: its own service, and NotActive for the NameNode's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xdfs.errors import AccessDenied, NotActive, NotAuthenticated
from xdfs.namenode.security.auth import ANONYMOUS
from xdfs.protocol.backup import BackupStatus, TakeoverResponse
from xdfs.rpc.messages import Empty
from xdfs.rpc.server import CallContext

if TYPE_CHECKING:
    from xdfs.backupnode.server import BackupNode


class BackupHandlers:
    def __init__(self, node: BackupNode) -> None:
        self.node = node

    def _superuser(self, ctx: CallContext, what: str) -> None:
        user = ctx.principal.user
        if user == ANONYMOUS:
            raise NotAuthenticated("log in first: this call needs a user or a token")
        namespace = self.node.namespace
        if namespace is None or not namespace.is_superuser(user):
            raise AccessDenied(f"Permission denied: only the superuser may {what} (user={user})")

    def backup_status(self, ctx: CallContext, req: Empty) -> BackupStatus:
        self._superuser(ctx, "read the backup's status")
        return self.node.status()

    async def transition_to_active(self, ctx: CallContext, req: Empty) -> TakeoverResponse:
        self._superuser(ctx, "promote a backup")
        return await self.node.transition_to_active()


class NotActiveHandlers:
    """Every method answers NotActive, which makes the RPC client fail over to the next
    address: clients and DataNodes list the NameNode first and its backup second."""

    def __init__(self, why: Callable[[], str]) -> None:
        self._why = why

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)

        async def refuse(ctx: CallContext, request: object, chunks: object = None) -> None:
            raise NotActive(f"{name}: {self._why()}")

        return refuse
