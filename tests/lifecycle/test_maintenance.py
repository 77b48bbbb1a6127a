"""Maintenance with real DataNodes: a node put in maintenance (maintenance file, refresh)
is stopped without any re-replication while its maintenance lasts (its replicas still
count); when the maintenance ends with the node still down its blocks are copied."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from xdfs.testing.poll import eventually

from .conftest import Lifecycle


async def test_a_stopped_node_in_maintenance_is_not_replaced_until_the_expiry(
    lifecycle: Lifecycle,
) -> None:
    maintenance = lifecycle.base / "maintenance"
    maintenance.write_text("")
    lifecycle.config = replace(lifecycle.config, namenode=replace(
        lifecycle.config.namenode, hosts_maintenance_file=str(maintenance)))
    await lifecycle.start_namenode()
    for _ in range(3):
        await lifecycle.start_datanode()
    files = await lifecycle.write_files(4, 600 * 1024, replication=2)
    node = lifecycle.datanodes[0]
    address = node.address
    held = [path for path in files if any(address in h for h in await lifecycle.holders(path))]
    assert held
    until = time.time() + 3600
    maintenance.write_text(f"{address} {until}\n")
    answer = await lifecycle.client.refresh_nodes()
    assert answer.maintenance == [address]

    async def in_maintenance() -> bool:
        return (await lifecycle.node_info(address)).admin_state == "in_maintenance"

    await eventually(in_maintenance)
    assert (await lifecycle.node_info(address)).maintenance_expiry_ms == int(until * 1000)
    await lifecycle.minicluster.stop_datanode(node)

    async def dead() -> bool:
        return (await lifecycle.node_info(address)).state == "dead"

    await eventually(dead)
    # ten replication rounds (0.2 s each) pass: nothing under-replicated, nothing copied
    for _ in range(10):
        report = await lifecycle.report()
        assert (report.under_replicated, report.pending_replication) == (0, 0)
        await asyncio.sleep(0.2)
    for path in held:
        assert any(len(h) == 1 for h in await lifecycle.holders(path))
    for path, data in files.items():
        assert await lifecycle.client.read_file(path) == data  # from the other replica
    # the maintenance ends (now) with the node still down: its blocks are copied
    maintenance.write_text("")
    await lifecycle.client.refresh_nodes()

    async def replicated() -> bool:
        blocks = [h for path in files for h in await lifecycle.holders(path)]
        return all(len(holders) == 2 and address not in holders for holders in blocks)

    await eventually(replicated, timeout_s=60)
