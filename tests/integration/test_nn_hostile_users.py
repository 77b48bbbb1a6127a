"""Issue 17, security items 7, 10 and 11: what an authenticated but hostile user (or a
DataNode's credential) must not be able to do, over real RPC to an in-process NameNode."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from xdfs.common import paths
from xdfs.config import XdfsConfig
from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    AuthenticationFailed,
    InvalidPath,
    LeaseError,
)
from xdfs.namenode.namespace.ops import RenameOp
from xdfs.namenode.security.passwords import DATANODE_SECRET_FILE
from xdfs.protocol import datanode as d
from xdfs.protocol import namenode as p
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello
from xdfs.rpc.service import Method
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import (
    USERS,
    Cluster,
    connect,
    nn_config,
    start_cluster,
    walk,
    write_file,
)


async def _unchanged_by(cluster: Cluster, *refused: object) -> None:
    """Each awaitable in ``refused`` fails with AccessDenied; tree and log stay the same."""
    before_tree = await walk(cluster.root)
    before_txid = (await cluster.root.status()).last_txid
    for call in refused:
        with pytest.raises(AccessDenied):
            await call  # type: ignore[misc]
    assert await walk(cluster.root) == before_tree
    assert (await cluster.root.status()).last_txid == before_txid


# -- item 7: overwriting needs WRITE on the file ------------------------------------------


async def test_overwrite_needs_write_on_the_file_itself(cluster: Cluster) -> None:
    root, alice, carol = cluster.root, cluster["alice"], cluster["carol"]
    await root.mkdirs("/shared", mode=0o775)
    await root.set_owner("/shared", group="staff")  # alice and carol may write the dir
    original = await write_file(alice, "/shared/report", [100, 50])
    await alice.set_permission("/shared/report", 0o444)

    # carol may create in the directory, but alice's read-only file is not hers to replace
    await _unchanged_by(
        cluster,
        carol.create("/shared/report", overwrite=True),
        alice.create("/shared/report", overwrite=True),  # as HDFS: 0444 stops its owner too
    )
    kept = await root.stat("/shared/report")
    assert (kept.inode_id, kept.length, kept.owner) == (original.inode_id, 150, "alice")

    # once the file is writable by her, carol may overwrite it: a new file, hers, and the
    # old content is gone for good (as HDFS and O_TRUNC: no trash copy)
    await alice.set_permission("/shared/report", 0o664)
    replaced = await carol.create("/shared/report", overwrite=True)
    assert replaced.inode_id != original.inode_id and replaced.owner == "carol"
    assert replaced.length == 0
    for user in ("alice", "carol"):
        assert not await root.exists(f"/user/{user}/.Trash")


# -- item 10: existence, lease holders, client names, bad replicas, DataNode identity ------


async def test_existence_in_a_private_directory_does_not_leak(cluster: Cluster) -> None:
    root, bob = cluster.root, cluster["bob"]
    await root.mkdirs("/private/dir")
    await root.touchz("/private/file")
    await root.set_permission("/private", 0o700)
    for path in ("/private/file", "/private/dir", "/private/absent"):
        await _unchanged_by(
            cluster,
            bob.mkdirs(path),
            bob.mkdirs(path, parents=False),
            bob.create(path),
            bob.create(path, overwrite=True),
        )
    # where he may look, an existing name is an existing name
    await bob.mkdirs("/tmp/bobs")
    await bob.touchz("/tmp/bobs/f")
    with pytest.raises(AlreadyExists):
        await bob.mkdirs("/tmp/bobs", parents=False)
    with pytest.raises(AlreadyExists):
        await bob.create("/tmp/bobs/f")


async def test_lease_holders_and_client_names_belong_to_their_user(cluster: Cluster) -> None:
    root, alice, bob = cluster.root, cluster["alice"], cluster["bob"]
    await alice.create("/tmp/open-by-alice", mode=0o666)  # anyone may write the file
    holder = alice.client_name

    # bob sees that someone writes it, not which client (the name is what writes prove)
    with pytest.raises(LeaseError) as seen_by_bob:
        await bob.create("/tmp/open-by-alice")
    assert holder not in seen_by_bob.value.message
    assert "another client" in seen_by_bob.value.message
    with pytest.raises(LeaseError) as seen_by_root:
        await root.create("/tmp/open-by-alice")
    assert holder in seen_by_root.value.message

    # knowing the name is not enough: bob may neither write through it nor keep it alive
    await _unchanged_by(
        cluster,
        bob.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/tmp/open-by-alice", holder)),
        bob.rpc.call(p.COMPLETE, p.CompleteRequest("/tmp/open-by-alice", holder, [])),
        bob.rpc.call(p.RENEW_LEASE, p.RenewLeaseRequest(holder)),
    )
    # alice renews her own; a made-up name holds nothing and is not remembered
    await alice.rpc.call(p.RENEW_LEASE, p.RenewLeaseRequest(holder))
    await bob.rpc.call(p.RENEW_LEASE, p.RenewLeaseRequest("made-up"))
    assert cluster.nn.fs is not None
    assert cluster.nn.fs.leases.user_of("made-up") is None
    assert (await alice.complete("/tmp/open-by-alice", [])).length == 0

    # a client name first used by alice cannot be taken over by bob for a file of his own
    async with connect(cluster.nn, "alice", USERS["alice"][0]) as other:
        await other.create("/tmp/second-by-alice")
        with pytest.raises(AccessDenied):
            await bob.rpc.call(p.CREATE, p.CreateRequest("/tmp/bobs-file", other.client_name))
    assert not await root.exists("/tmp/bobs-file")


async def test_bad_replica_reports_need_a_token_or_a_datanode(cluster: Cluster) -> None:
    root, bob = cluster.root, cluster["bob"]
    await write_file(root, "/tmp/data", [64], replication=2)
    located = (await bob.block_locations("/tmp/data")).blocks[0]
    block_id = located.block.block_id
    first, second = located.locations

    async def reported_bad() -> set[str]:
        fresh = (await root.block_locations("/tmp/data")).blocks[0]
        return {first, second} - set(fresh.locations)

    # no token, or a token for another block: refused, nothing marked
    other = await write_file(root, "/tmp/other", [64], replication=2)
    other_token = (await root.block_locations(other.path)).blocks[0].token
    for token in ("", other_token, "forged.token"):
        request = d.BadReplicasRequest([d.BadReplica(block_id, first, token)])
        with pytest.raises((AccessDenied, AuthenticationFailed)):
            await bob.rpc.call(p.REPORT_BAD_REPLICAS, request)
    assert await reported_bad() == set()

    # with the read token bob got for this block, his report counts
    request = d.BadReplicasRequest([d.BadReplica(block_id, first, located.token)])
    await bob.rpc.call(p.REPORT_BAD_REPLICAS, request)
    assert await reported_bad() == {first}

    # a DataNode (its own credential) reports without a token
    async with _datanode_rpc(cluster) as datanode:
        request = d.BadReplicasRequest([d.BadReplica(block_id, second)])
        await datanode.call(p.REPORT_BAD_REPLICAS, request)
    fresh = (await root.block_locations("/tmp/data")).blocks[0]
    assert set(fresh.locations) <= {first, second}  # only bad ones are left to offer


@contextlib.asynccontextmanager
async def _datanode_rpc(cluster: Cluster, secret: str | None = None) -> AsyncIterator[RpcClient]:
    """An RPC client logged in the way DataNodes do (``dn/<id>`` and the secret file)."""
    secret_file = cluster.nn.dirs[0].root / DATANODE_SECRET_FILE
    password = secret if secret is not None else secret_file.read_text().strip()
    hello = Hello(PROTOCOL_VERSION, client_name="test-dn", user="dn/test", password=password)
    rpc = RpcClient([cluster.nn.address], XdfsConfig().rpc, hello=hello)
    try:
        yield rpc
    finally:
        await rpc.close()


async def test_datanodes_log_in_with_their_own_secret_not_a_superuser(
    minicluster: MiniCluster, cluster: Cluster
) -> None:
    secret_file = cluster.nn.dirs[0].root / DATANODE_SECRET_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    # a real DataNode with nothing but the secret file registers and serves
    node = await minicluster.start_datanode("dn-secret")
    assert node.config.datanode.secret_file == str(secret_file)

    async def registered() -> bool:
        return node.registered

    await eventually(registered)

    async with _datanode_rpc(cluster) as datanode:
        storage = d.StorageReport(10, 0, 10)
        await datanode.call(d.REGISTER_DATANODE, d.RegisterRequest("test", "127.0.0.1:1", storage))
        # ... but its credential does nothing a user (let alone the superuser) does
        calls: list[tuple[Method[Any, Any], msgspec.Struct]] = [
            (p.STAT, p.PathRequest("/")),
            (p.MKDIRS, p.MkdirsRequest("/dn-was-here")),
            (p.ADD_USER, p.UserRequest("mallory", "pw", ["supergroup"])),
            (p.SAFE_MODE, p.SafeModeRequest("enter")),
            (p.STATUS, Empty()),
        ]
        for method, request in calls:
            with pytest.raises(AccessDenied):
                await datanode.call(method, request)
    async with _datanode_rpc(cluster, secret="0" * 64) as impostor:
        with pytest.raises(AuthenticationFailed):
            await impostor.call(d.HEARTBEAT, d.HeartbeatRequest("test", d.StorageReport(1, 0, 1)))
    # and an ordinary user cannot act as a DataNode
    with pytest.raises(AccessDenied):
        await cluster["alice"].rpc.call(
            d.REGISTER_DATANODE, d.RegisterRequest("mine", "x:1", d.StorageReport(1, 0, 1))
        )
    assert not await cluster.root.exists("/dn-was-here")
    assert not (await cluster.root.safe_mode("get")).on


async def test_password_change_and_removal_revoke_tokens_and_sessions(
    minicluster: MiniCluster,
) -> None:
    c = await start_cluster(minicluster)
    try:
        address = c.nn.address
        token = (await c.root.login("alice", USERS["alice"][0])).token
        async with connect(address, token=token) as by_token:
            assert (await by_token.stat("/")).is_dir
            assert (await c["alice"].stat("/")).is_dir  # a password session, connected
            await c.root.set_password("alice", "alice-new")
            for session in (by_token, c["alice"]):  # token and password sessions alike
                with pytest.raises(AuthenticationFailed, match="log in again"):
                    await session.stat("/")
        await _refused_at_connect(address, token=token)
        fresh = (await c.root.login("alice", "alice-new")).token
        async with connect(address, token=fresh) as alice:
            assert (await alice.touchz("/tmp/a")).owner == "alice"

        # removed and added again with the very same password: old tokens stay dead
        await c.root.remove_user("alice")
        await c.root.add_user("alice", "alice-new", ["staff"])
        await _refused_at_connect(address, token=fresh)
        newest = (await c.root.login("alice", "alice-new")).token
        await c.close()

        # the generations are namespace state: a restart (image + edits) agrees
        nn = c.nn
        await minicluster.stop_namenode(nn)
        restarted = await minicluster.start_namenode(format_dirs=False)
        for old in (token, fresh):
            await _refused_at_connect(restarted.address, token=old)
        async with connect(restarted.address, token=newest) as alice:
            assert (await alice.stat("/tmp/a")).owner == "alice"
        await restarted.save_namespace()  # and an image written with them loads them
        assert restarted.fs is not None
        dump = restarted.fs.ns.canonical_dump()
        await minicluster.stop_namenode(restarted)
        again = await minicluster.start_namenode(format_dirs=False)
        assert again.fs is not None and again.fs.ns.canonical_dump() == dump
        await _refused_at_connect(again.address, token=fresh)
    finally:
        await c.close()


async def _refused_at_connect(address: str, *, token: str) -> None:
    async with connect(address, token=token) as client:
        with pytest.raises(AuthenticationFailed):
            await client.stat("/")


# -- item 11: path limits on rename, and a lease monitor that survives a bad file ----------


async def test_rename_and_trash_refuse_results_beyond_the_path_limits(cluster: Cluster) -> None:
    root = cluster.root
    # a subtree 10 levels deep, and a directory 998 levels deep: moving the first under the
    # second would make paths 1009 deep (stat refuses more than DEPTH_MAX = 1000)
    await root.mkdirs("/tree/" + "/".join(["t"] * 9) + "/leaf")
    deep = "/deep/" + "/".join(["d"] * (paths.DEPTH_MAX - 3))
    await root.mkdirs(deep)
    # and names long enough that a move deepens them past PATH_BYTES_MAX
    long_dir = "/long/" + "/".join(["n" * 250] * 30)
    await root.mkdirs(long_dir)
    await root.mkdirs("/wide/" + "w" * 250 + "/" + "v" * 250)

    async def refused() -> None:
        with pytest.raises(InvalidPath, match="deeper than 1000"):
            await root.rename("/tree", deep + "/tree")
        with pytest.raises(InvalidPath, match="deeper than 1000"):
            await root.rename("/tree", deep)  # into the directory: the same
        with pytest.raises(InvalidPath, match="longer than 8000"):
            await root.rename("/wide", long_dir + "/wide")
        with pytest.raises(InvalidPath, match="skip_trash"):
            await root.delete(deep, recursive=True)  # the trash path adds 4 levels

    before = await walk(root, "/tree")
    txid = (await root.status()).last_txid
    await refused()
    assert (await root.status()).last_txid == txid
    assert await walk(root, "/tree") == before
    # moves that make paths shallower or stay within the limits still work
    await root.rename("/tree", "/deep/tree")
    await root.rename("/deep/tree", "/tree2")
    await root.delete(deep, recursive=True, skip_trash=True)


async def test_lease_recovery_goes_on_past_a_file_it_cannot_recover(
    minicluster: MiniCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "xdfs.namenode.server")
    config = nn_config(lease_soft_limit_s=0.2, lease_hard_limit_s=0.5, lease_check_interval_s=0.1)
    c = await start_cluster(minicluster, config, users=False)
    try:
        root = c.root
        depth = paths.DEPTH_MAX - 2
        # "a" sorts first: before this fix its failure stopped the recovery of every file
        await root.mkdirs("/a/" + "/".join(["x"] * (depth - 1)))
        await root.create("/a/" + "/".join(["x"] * (depth - 1)) + "/open")
        await root.create("/z-open")
        await root.mkdirs("/b/c/d")
        assert c.nn.fs is not None
        # a namespace from before rename checked the limits: the open file is now too deep
        c.nn.fs.ns.apply(RenameOp("/a", "/b/c/d/a", 0))
        # nobody renews either lease (create alone starts no renewer): both expire

        async def recovered() -> bool:
            return not (await root.stat("/z-open")).under_construction

        await eventually(recovered, timeout_s=30)
        failures = [r for r in caplog.records if "lease recovery of /b/c/d/a" in r.message]
        assert len(failures) == 1  # logged once, not every round
        await asyncio.sleep(0.5)  # more rounds pass, and no more lines
        assert [r for r in caplog.records if "lease recovery of /b/c/d/a" in r.message] == \
            failures
    finally:
        await c.close()

