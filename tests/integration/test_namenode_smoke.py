from __future__ import annotations

from xdfs.client.client import AsyncClient
from xdfs.config import XdfsConfig
from xdfs.testing.minicluster import MiniCluster


async def test_mkdir_survives_restart(minicluster: MiniCluster) -> None:
    nn = await minicluster.start_namenode()
    config = XdfsConfig()
    async with AsyncClient(f"xdfs://{nn.address}", user="root", password="rootpw",
                           config=config) as client:
        await client.mkdirs("/a/b")
        await client.touchz("/a/b/f")
    await minicluster.stop_namenode(nn)
    nn = await minicluster.start_namenode(format_dirs=False)
    async with AsyncClient(f"xdfs://{nn.address}", user="root", password="rootpw",
                           config=config) as client:
        names = [s.path for s in await client.list_dir("/a/b")]
        assert names == ["/a/b/f"]
