"""Calls to NameNodes' ``ha.service`` (a controller's own NameNode, an old active being
fenced, ``xdfs admin``'s targets), each bounded as a whole, connect included: a paused
NameNode accepts TCP connections and never completes a handshake."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from xdfs.common.fencing import FenceMethod, Target, fence
from xdfs.config import XdfsConfig
from xdfs.errors import RpcTimeout, XdfsError
from xdfs.protocol.ha import TRANSITION_TO_STANDBY, ServiceStatus, TransitionRequest
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.service import Method, Req, Resp
from xdfs.rpc.tls import client_context

log = logging.getLogger(__name__)

FENCING_KEY = "ha.fencing_methods"


def describe(exc: BaseException) -> str:
    """One line for a failed call."""
    if isinstance(exc, XdfsError):
        return f"{type(exc).__name__}: {exc.message}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"  # a ZooKeeper operation's deadline
    return f"{type(exc).__name__}: {exc}"


#: What a call to a NameNode may fail with (an error answer, no answer, no connection).
CALL_ERRORS = (XdfsError, TimeoutError, OSError)


class BoundedClient:
    """One server (a NameNode, or with ``hello`` another controller), one try per call,
    each bounded as a whole; by default with the configured client credentials (the
    NameNode's transitions need a superuser)."""

    def __init__(self, config: XdfsConfig, address: str, client_name: str,
                 *, hello: Hello | None = None) -> None:
        rpc = dataclasses.replace(
            config.rpc, tries_per_address=1,
            connect_timeout_s=min(config.rpc.connect_timeout_s,
                                  config.ha.health_check_timeout_s),
        )
        self.address = address
        hello = hello or Hello(
            PROTOCOL_VERSION, client_name=client_name, user=config.client.user,
            password=config.client.password, token=config.client.token,
        )
        self._rpc = RpcClient([address], rpc, hello=hello, ssl_context=client_context(rpc))

    async def call(self, method: Method[Req, Resp], request: Req, timeout_s: float) -> Resp:
        """The answer, or an XdfsError (RpcTimeout after ``timeout_s``, connect included)."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self._rpc.call(method, request, timeout_s=timeout_s)
        except TimeoutError:
            raise RpcTimeout(f"{self.address}: no answer to {method.name} within "
                             f"{timeout_s} s") from None

    async def close(self) -> None:
        await self._rpc.close()

    async def __aenter__(self) -> BoundedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def ask_standby(config: XdfsConfig, address: str, source: str,
                      timeout_s: float) -> ServiceStatus:
    """``transition_to_standby`` on the NameNode at ``address`` (CALL_ERRORS on failure)."""
    async with BoundedClient(config, address, f"ha-{source}") as client:
        return await client.call(TRANSITION_TO_STANDBY, TransitionRequest(source), timeout_s)


async def fence_old_active(config: XdfsConfig, address: str, source: str,
                           methods: Sequence[FenceMethod]) -> str:
    """Make the NameNode at ``address`` stop acting as active: ask it to step down within
    ``ha.graceful_fence_timeout_s``; when it does not, run the fencing methods
    (TakeoverRefused when none succeeds). With none configured the journal epoch is the
    fence: the new active's first journal call fences the old writer. What happened, as
    text."""
    try:
        status = await ask_standby(config, address, source, config.ha.graceful_fence_timeout_s)
        return f"it stepped down when asked (now {status.state})"
    except CALL_ERRORS as exc:
        refusal = describe(exc)
    if not methods:
        log.warning("the old active NameNode at %s did not step down (%s); no %s: relying on "
                    "the journal epoch to fence it", address, refusal, FENCING_KEY)
        return f"it did not step down ({refusal}); no {FENCING_KEY}: the journal epoch fences it"
    how = await fence(methods, Target(address), config.ha.fencing_timeout_s, key=FENCING_KEY)
    return f"it did not step down ({refusal}); fenced by {how}"
