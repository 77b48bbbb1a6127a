"""Racks with real DataNodes (a topology file): blocks written to a two-rack cluster span
both racks; blocks written while the cluster had one rack are reported mis-replicated by
fsck once a second rack joins, and the replication monitor moves one replica of each to
the new rack, keeping the replication factor."""

from __future__ import annotations

from xdfs.testing.poll import eventually

from .conftest import Lifecycle


async def racks_of(lifecycle: Lifecycle) -> dict[str, str]:
    return {n.address: n.rack for n in (await lifecycle.report()).nodes}


async def test_mis_replicated_blocks_are_reported_then_spread_over_the_new_rack(
    lifecycle: Lifecycle,
) -> None:
    await lifecycle.start_namenode()
    for _ in range(2):
        await lifecycle.start_datanode(rack="/dc1/r1")
    files = await lifecycle.write_files(4, 600 * 1024, replication=2)
    fsck = await lifecycle.client.fsck("/")
    assert (fsck.racks, fsck.mis_replicated_blocks) == (1, 0)  # one rack: nothing to judge
    await lifecycle.client.safe_mode("enter")  # the monitor waits: fsck sees the problem
    for _ in range(2):
        await lifecycle.start_datanode(rack="/dc1/r2")
    fsck = await lifecycle.client.fsck("/", files=True, blocks=True)
    assert fsck.racks == 2 and fsck.mis_replicated_blocks == fsck.total_blocks == 12
    assert all(b.mis_replicated for f in fsck.listed for b in f.blocks)
    await lifecycle.client.safe_mode("leave")
    racks = await racks_of(lifecycle)
    assert sorted(set(racks.values())) == ["/dc1/r1", "/dc1/r2"]

    async def spread() -> bool:
        report = await lifecycle.client.fsck("/")
        blocks = [h for path in files for h in await lifecycle.holders(path)]
        return report.mis_replicated_blocks == 0 and all(
            len(holders) == 2 and {racks[a] for a in holders} == {"/dc1/r1", "/dc1/r2"}
            for holders in blocks
        )

    await eventually(spread, timeout_s=90, what="one replica of each block on the new rack")
    for path, data in files.items():
        assert await lifecycle.client.read_file(path) == data


async def test_new_blocks_span_two_racks(lifecycle: Lifecycle) -> None:
    await lifecycle.start_namenode()
    for rack in ("/r1", "/r1", "/r2", "/r2"):
        await lifecycle.start_datanode(rack=rack)
    racks = await racks_of(lifecycle)
    files = await lifecycle.write_files(4, 600 * 1024, replication=3)
    for path in files:
        for holders in await lifecycle.holders(path):
            assert len(holders) == 3 and {racks[a] for a in holders} == {"/r1", "/r2"}
    report = await lifecycle.client.fsck("/")
    assert report.healthy and report.mis_replicated_blocks == 0
