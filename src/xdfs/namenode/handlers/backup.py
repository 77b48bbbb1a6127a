"""RPC handlers of ``namenode.backup`` (xdfs.protocol.backup): what a BackupNode calls.

The backup authenticates as an xdfs superuser (it holds the whole namespace, users and
token keys included). ``fetch_image`` is also what ``xdfs admin -fetchImage`` uses.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from xdfs.common.images import image_chunks
from xdfs.namenode.editlog.replicator import EditsReplicator
from xdfs.namenode.handlers.client import caller
from xdfs.namenode.namesystem import Namesystem
from xdfs.namenode.security.auth import NameNodeAuth
from xdfs.protocol.backup import (
    FetchEditsRequest,
    FetchEditsResponse,
    ImageHead,
    UploadImageResponse,
)
from xdfs.rpc.handling import CallContext, Download
from xdfs.rpc.messages import Empty
from xdfs.rpc.streams import StreamReceiver


class BackupProtocolHandlers:
    def __init__(
        self,
        namesystem: Namesystem,
        auth: NameNodeAuth,
        replicator: EditsReplicator,
        newest_image: Callable[[], Awaitable[tuple[ImageHead, Path]]],
        install_image: Callable[[ImageHead, StreamReceiver], Awaitable[UploadImageResponse]],
    ) -> None:
        self.fs = namesystem
        self.auth = auth
        self.replicator = replicator
        self._newest_image = newest_image
        self._install_image = install_image

    def _superuser(self, ctx: CallContext, what: str) -> None:
        self.auth.require_superuser(caller(ctx, self.fs), what)

    async def fetch_edits(self, ctx: CallContext, req: FetchEditsRequest) -> FetchEditsResponse:
        self._superuser(ctx, "fetch the edits log")
        answer = await self.replicator.fetch(req, ctx.peer)
        answer.namenode_pid = os.getpid()  # the backup's $target_pid should it fence us
        return answer

    async def fetch_image(self, ctx: CallContext, req: Empty) -> Download:
        self._superuser(ctx, "fetch the fsimage")
        head, path = await self._newest_image()
        return Download(head, image_chunks(path))

    async def upload_image(
        self, ctx: CallContext, req: ImageHead, chunks: StreamReceiver
    ) -> UploadImageResponse:
        self._superuser(ctx, "upload a checkpoint")
        return await self._install_image(req, chunks)
