"""``xdfs namenode -bootstrapStandby``: a second HA NameNode's name dirs from the active
one's newest image (HDFS's BootstrapStandby).

The dirs are formatted with the active's cluster and namespace ids, then its newest image
is downloaded (md5 checked while streaming) into each; the standby starts from it and tails
the quorum journal from the next txid. The active is found among ``ha.namenodes``: a
standby answers Standby and the client moves on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from xdfs.common.images import image_chunks, receive_image
from xdfs.config import XdfsConfig
from xdfs.errors import ConfigError
from xdfs.namenode.image.fsimage import header_check
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.protocol import namenode as nn_protocol
from xdfs.protocol.backup import FETCH_IMAGE
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.tls import client_context


async def bootstrap_standby(config: XdfsConfig, dirs: Sequence[Path], *,
                            force: bool = False) -> int:
    """Format ``dirs`` like the active's and install its newest image; returns its txid."""
    addresses = list(config.ha.namenodes.values())
    if not addresses:
        raise ConfigError("-bootstrapStandby needs ha.namenodes (the NameNodes of the pair)")
    client = config.client
    hello = Hello(PROTOCOL_VERSION, client_name="xdfs-bootstrap-standby", user=client.user,
                  password=client.password, token=client.token)
    rpc = RpcClient(addresses, config.rpc, hello=hello, ssl_context=client_context(config.rpc))
    storage = [StorageDirectory(d) for d in dirs]
    try:
        status = await rpc.call(nn_protocol.STATUS, Empty())
        for d in storage:
            d.format(status.cluster_id, status.namespace_id, int(time.time() * 1000),
                     force=force)
        ids = (status.namespace_id, status.cluster_id)
        async with await rpc.download(FETCH_IMAGE, Empty()) as stream:
            check = header_check(stream.head, ids)
            first = await receive_image(stream.head, stream, storage[0].current, check=check)
            txid = int(stream.head.txid)
            for d in storage[1:]:
                await receive_image(stream.head, image_chunks(first), d.current, check=check)
        for d in storage:
            d.write_seen_txid(txid)
        return txid
    finally:
        for d in storage:
            d.unlock()
        await rpc.close()
