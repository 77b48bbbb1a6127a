"""``xdfs dfs -appendToFile``, ``-truncate [-w]`` and ``-concat`` against an in-process
cluster with real DataNodes, run as the shell runs (a child process)."""

from __future__ import annotations

from pathlib import Path

from tests.datapath.conftest import BLOCK_BYTES, Cluster, payload
from tests.integration.test_nn_cli import Shell
from xdfs.testing.poll import eventually


async def test_append_truncate_concat_commands(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client
    sh = await Shell.with_token(cluster.mc.namenodes[0], tmp_path / "root.toml", "root", "rootpw")
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_bytes(b"first\n")
    two.write_bytes(b"second\n")
    await client.mkdirs("/cli")
    await client.write_file("/cli/big", payload(BLOCK_BYTES + 300, seed=1), block_size=BLOCK_BYTES)
    await client.write_file("/cli/s1", b"s1", block_size=BLOCK_BYTES)
    await client.write_file("/cli/s2", b"s2", block_size=BLOCK_BYTES)
    results = await sh.run(
        sh.d("-appendToFile", str(one), str(two), "/cli/log"),  # created
        sh.d("-appendToFile", str(one), "/cli/log"),
        sh.d("-truncate", "-w", str(BLOCK_BYTES + 100), "/cli/big"),
        sh.d("-truncate", "5", "/cli/log"),
        sh.d("-concat", "/cli/big", "/cli/s1", "/cli/s2"),
        sh.d("-concat", "/cli/big", "/cli/missing"),
        sh.d("-truncate", "x", "/cli/big"),
        sh.d("-appendToFile", str(tmp_path / "nope"), "/cli/log"),
    )
    codes = [code for code, _out, _err in results]
    assert codes == [0, 0, 0, 0, 0, 1, 2, 1], results
    assert "Truncated /cli/big to length: " in results[2][1]
    assert "Waiting for /cli/big" in results[2][1]
    assert "Wait for block recovery" in results[3][1]  # inside a block, no -w
    assert results[5][2].count("\n") == 1 and "No such file or directory" in results[5][2]
    assert results[7][2].count("\n") == 1 and "Traceback" not in results[7][2]
    data = await client.read_file("/cli/big")
    assert data == payload(BLOCK_BYTES + 300, seed=1)[: BLOCK_BYTES + 100] + b"s1s2"
    assert not await client.exists("/cli/s1")

    async def log_closed() -> bool:
        return not (await client.stat("/cli/log")).under_construction

    await eventually(log_closed, what="truncate recovery of /cli/log")
    assert await client.read_file("/cli/log") == b"first"  # "first\nsecond\nfirst\n" cut
