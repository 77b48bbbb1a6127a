"""``ha.service`` on a NameNode (HDFS's HAServiceProtocol): called by its failover
controller (``xdfs zkfc``) and by ``xdfs admin``.

``get_service_state`` and ``monitor_health`` answer from memory at once; transitions need
a superuser, and a user's request (not a controller's) is refused while
``ha.automatic_failover`` is on, unless forced (``--forcemanual``). Transitions are
idempotent: asking an active NameNode to become active answers its status.
"""

from __future__ import annotations

from typing import Protocol

from xdfs.errors import AccessDenied, InvalidArgument, NotAuthenticated
from xdfs.namenode.security.auth import ANONYMOUS, NameNodeAuth
from xdfs.protocol.ha import (
    SOURCE_USER,
    TRANSITION_SOURCES,
    HealthReport,
    ServiceStatus,
    TransitionRequest,
)
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import Empty


class HaNode(Protocol):
    """What the handlers ask of the NameNode."""

    def service_status(self) -> ServiceStatus: ...

    def health(self) -> HealthReport: ...

    async def transition_to_active(self) -> ServiceStatus: ...

    async def transition_to_standby(self) -> ServiceStatus: ...


class HaServiceHandlers:
    def __init__(self, node: HaNode, auth: NameNodeAuth, automatic_failover: bool) -> None:
        self.node = node
        self.auth = auth
        self.automatic_failover = automatic_failover

    def get_service_state(self, ctx: CallContext, req: Empty) -> ServiceStatus:
        return self.node.service_status()

    def monitor_health(self, ctx: CallContext, req: Empty) -> HealthReport:
        return self.node.health()

    async def transition_to_active(self, ctx: CallContext,
                                   req: TransitionRequest) -> ServiceStatus:
        self._check(ctx, req, "make this NameNode active")
        return await self.node.transition_to_active()

    async def transition_to_standby(self, ctx: CallContext,
                                    req: TransitionRequest) -> ServiceStatus:
        self._check(ctx, req, "make this NameNode standby")
        return await self.node.transition_to_standby()

    def _check(self, ctx: CallContext, req: TransitionRequest, what: str) -> None:
        if req.source not in TRANSITION_SOURCES:
            raise InvalidArgument(f"unknown transition source {req.source!r}")
        user = ctx.principal.user
        if user == ANONYMOUS:
            raise NotAuthenticated("log in first: HA transitions need a superuser")
        self.auth.require_superuser(user, what)
        if self.automatic_failover and req.source == SOURCE_USER:
            raise AccessDenied("manual HA transitions are refused: automatic failover is on "
                               "(ha.automatic_failover); use xdfs admin -failover, or "
                               "--forcemanual")
