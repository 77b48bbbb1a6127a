"""A namespace of known content built through a real NameNode (with fake DataNodes that
report every block with its length), and a pure-Python model of what every report table
must then say. Sizes, owners and ages are chosen; the model computes the expected rows."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.conftest import ROOT, ROOT_PW, add_stored_block, connect
from tests.integration.fake_datanodes import FakeDataNodes
from xdfs.client.client import AsyncClient
from xdfs.common.images import image_name
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.datanode import BadReplica
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

KiB, MiB = 1024, 1024 * 1024
DAY_MS = 86_400_000
BLOCK_SIZE = 8 * MiB  # small blocks: multi-block files without large numbers


@dataclass(frozen=True)
class FileSpec:
    path: str
    sizes: tuple[int, ...]  # one per block
    owner: str = ROOT
    group: str = ""  # "" leaves the NameNode's choice (checked at build time)
    replication: int = 3
    age_days: int | None = None  # mtime; None: created at build time
    access_age_days: int | None = None

    @property
    def size(self) -> int:
        return sum(self.sizes)


def _spread(total: int, block: int) -> tuple[int, ...]:
    full, rest = divmod(total, block)
    return (block,) * full + ((rest,) if rest else ())


def namespace_spec() -> list[FileSpec]:
    specs: list[FileSpec] = []
    for day in range(10):
        specs += [
            FileSpec(f"/data/logs/day{day}/part-{i:03d}", (1000 + day,), "alice", "staff",
                     age_days=10 + 40 * day, access_age_days=5 + 40 * day)
            for i in range(100)
        ]
    for table in range(5):
        specs += [
            FileSpec(f"/data/warehouse/t{table}/f{j:02d}", (3 * MiB,), "bob", "dev",
                     age_days=3, access_age_days=1)
            for j in range(20)
        ]
    specs += [
        FileSpec(f"/data/big/b{k}", _spread(20 * MiB + k, BLOCK_SIZE), "carol", "dev",
                 age_days=400, access_age_days=200)
        for k in range(4)
    ]
    specs += [FileSpec(f"/user/alice/tmp/e{m:03d}", (), "alice", "staff", age_days=0,
                       access_age_days=0) for m in range(500)]
    specs += [FileSpec(f"/user/bob/x{n:03d}", (100 * KiB,), "bob", "dev", age_days=100,
                       access_age_days=95) for n in range(500)]
    # replication health (ages left at build time)
    specs += [FileSpec(f"/health/under/u{i}", (MiB,), replication=5) for i in range(6)]
    specs += [FileSpec(f"/health/missing/m{i}", (2 * MiB,)) for i in range(2)]
    specs += [FileSpec("/health/corrupt/c0", (MiB + 1,))]
    specs += [FileSpec(f"/health/over/o{i}", (3 * MiB,), replication=2) for i in range(4)]
    return specs


#: A directory with name and space quotas (ns_quota, ds_quota in inodes.parquet).
WAREHOUSE, WAREHOUSE_QUOTAS = "/data/warehouse", (1000, 10 * 1024 * MiB)
#: Created after the image was saved: their replicas are orphans relative to the image.
LATE_FILES = [FileSpec(f"/health/new/n{i}", (4 * MiB,)) for i in range(3)]


@dataclass
class Built:
    specs: list[FileSpec]
    image: Path
    edits_dir: Path
    blockmap_dir: Path
    fetched_image: Path | None
    as_of_ms: int
    started_ms: int
    finished_ms: int
    root_group: str
    dirs: set[str] = field(default_factory=set)
    block_ids: dict[str, list[int]] = field(default_factory=dict)


async def _write(client: AsyncClient, spec: FileSpec, as_of_ms: int,
                 block_ids: dict[str, list[int]]) -> None:
    await client.create(spec.path, replication=spec.replication, block_size=BLOCK_SIZE)
    blocks: list[BlockRecord] = []
    for size in spec.sizes:
        blocks.append(await add_stored_block(client, spec.path, size,
                                             blocks[-1] if blocks else None))
    await client.complete(spec.path, blocks)
    block_ids[spec.path] = [b.block_id for b in blocks]
    if spec.owner != ROOT or spec.group:
        await client.set_owner(spec.path, spec.owner, spec.group)
    if spec.age_days is not None:
        access = spec.access_age_days if spec.access_age_days is not None else spec.age_days
        await client.set_times(spec.path, as_of_ms - spec.age_days * DAY_MS - 3_600_000,
                               as_of_ms - access * DAY_MS - 3_600_000)


async def _in_batches(client: AsyncClient, specs: list[FileSpec], as_of_ms: int,
                      block_ids: dict[str, list[int]], width: int = 24) -> None:
    for start in range(0, len(specs), width):
        await asyncio.gather(*(_write(client, s, as_of_ms, block_ids)
                               for s in specs[start:start + width]))


async def _settled(client: AsyncClient, path: str, replicas: int) -> None:
    async def settled() -> bool:
        report = await client.fsck(path, files=True, blocks=True)
        return all(b.live_replicas == replicas for e in report.listed for b in e.blocks)

    await eventually(settled, timeout_s=60, interval_s=0.2, what=f"{path} at {replicas} replicas")


async def build(base: Path) -> Built:
    from xdfs.cli.admin_export import dump_block_map

    started_ms = int(time.time() * 1000)
    as_of_ms = (started_ms // DAY_MS + 1) * DAY_MS  # the next midnight (UTC)
    specs = namespace_spec()
    block_ids: dict[str, list[int]] = {}
    async with MiniCluster(base, deadline_s=240) as mc:
        nn = await mc.start_namenode(superuser=ROOT, password=ROOT_PW)
        fakes = await FakeDataNodes.start(nn)
        client = connect(nn, ROOT, ROOT_PW)
        try:
            await _in_batches(client, specs, as_of_ms, block_ids)
            for spec in specs:  # both replicas gone at every DataNode
                if spec.path.startswith("/health/missing/"):
                    for node in fakes.nodes:
                        await node.drop(*block_ids[spec.path])
            # every replica of c0 found corrupt: the NameNode keeps them all (with a good
            # one left, it would replace the bad ones, in place if need be)
            located = await client.block_locations("/health/corrupt/c0")
            await client.report_bad_replicas([
                BadReplica(block_ids["/health/corrupt/c0"][0], address)
                for address in located.blocks[0].locations
            ])
            root_group = (await client.stat("/health/under/u0")).group
            await client.set_quota(WAREHOUSE, *WAREHOUSE_QUOTAS)  # in the image's export
            image_txid = await client.save_namespace()
            for spec in specs:
                if spec.path.startswith("/health/over/"):
                    await client.set_replication(spec.path, 3)
            await _in_batches(client, LATE_FILES, as_of_ms, block_ids)
            await _settled(client, "/health/over", 3)
            fetched = None
            try:
                fetched = await client.fetch_image(base / "fetched")
            except Exception:  # the fetch_image handler may not be registered yet
                fetched = None
            await asyncio.to_thread(_dump, nn.address, base / "blockmap", dump_block_map)
        finally:
            await client.close()
            await fakes.close()
        finished_ms = int(time.time() * 1000)
    current = base / "nn-dir0" / "current"
    return Built(specs, current / image_name(image_txid), current, base / "blockmap", fetched,
                 as_of_ms, started_ms, finished_ms, root_group, block_ids=block_ids)


def _dump(address: str, out: Path, dump: object) -> None:
    from xdfs.client.client import Client
    from xdfs.config import XdfsConfig

    with Client(f"xdfs://{address}", user=ROOT, password=ROOT_PW, token="",
                config=XdfsConfig()) as client:
        assert callable(dump)
        assert dump(client, str(out)) == 0
