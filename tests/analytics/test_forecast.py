"""The capacity model reproduces seed 003's worked example from its own inputs."""

from __future__ import annotations

from xdfs.analytics.forecast import CurrentState, PlanningOptions, forecast, monthly


def test_seed_003_capacity_plan() -> None:
    # 10k files = 1 MB -> 100 B/inode; 50k files/day of 200 KB, 2 replicas, 6 months
    now = CurrentState(
        inodes=0, files=1, bytes=200_000, replicated_bytes=400_000, bytes_per_inode=100.0,
        files_per_day=50_000, inodes_per_day=50_000, bytes_per_day=50_000 * 200_000,
        history_days=30, growth_basis="edits", raw_used_bytes=0, raw_capacity_bytes=0,
        datanodes=0,
    )
    plan = PlanningOptions(horizon_months=6, growth_factor=3.0, namenode_heap_bytes=10**9,
                           datanode_disk_bytes=500 * 10**9)
    result = forecast(now, plan)
    assert result.projected_inodes == 9_000_000  # 900w
    assert result.projected_namenode_memory_bytes == 900 * 10**6  # 900 MB
    assert result.projected_namenode_memory_with_growth_bytes == 2_700 * 10**6  # ~3 GB
    assert result.namenodes_needed == 3
    assert result.projected_raw_bytes == 3_600 * 10**9  # 3600 GB
    assert result.datanodes_needed == 8
    assert result.months_until_full is None  # no capacity known
    assert [m["inodes"] for m in monthly(now, plan)] == [i * 1_500_000 for i in range(7)]


def test_months_until_full() -> None:
    now = CurrentState(
        inodes=10, files=10, bytes=1000, replicated_bytes=3000, bytes_per_inode=300.0,
        files_per_day=0, inodes_per_day=0, bytes_per_day=100, history_days=10,
        growth_basis="edits", raw_used_bytes=3000, raw_capacity_bytes=3000 + 9000 * 30,
        datanodes=3,
    )
    result = forecast(now, PlanningOptions())
    assert result.raw_bytes_per_day == 300
    assert result.months_until_full == 30.0
    assert result.datanode_disk_bytes == (3000 + 9000 * 30) // 3
