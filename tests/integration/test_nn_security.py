"""Users, logins, tokens, POSIX permissions and path validation over RPC (DESIGN.md 6)."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Awaitable, Callable

import msgspec
import pytest

from xdfs.client.client import AsyncClient
from xdfs.common import tokens
from xdfs.errors import (
    AccessDenied,
    AuthenticationFailed,
    InvalidArgument,
    InvalidPath,
    NotAuthenticated,
    NotFound,
    TokenExpired,
)
from xdfs.namenode.namespace.ops import TokenKeyRecord
from xdfs.protocol import namenode as p
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import (
    ROOT,
    ROOT_PW,
    USERS,
    Cluster,
    connect,
    nn_config,
    start_cluster,
    walk,
)


async def _fails_to_connect(
    nn_address: str, user: str, password: str = "", token: str = ""
) -> type[BaseException]:
    async with connect(nn_address, user, password, token=token) as client:
        with pytest.raises(AuthenticationFailed) as info:
            await client.stat("/")
    return info.type


async def _unchanged(cluster: Cluster, action: Callable[[], Awaitable[object]]) -> None:
    """Run ``action``, which must fail; the namespace and the log must be as before."""
    before_tree = await walk(cluster.root)
    before_txid = (await cluster.root.status()).last_txid
    await action()
    assert await walk(cluster.root) == before_tree
    assert (await cluster.root.status()).last_txid == before_txid


# -- users ------------------------------------------------------------------------------


async def test_superuser_adds_users_with_groups(cluster: Cluster) -> None:
    root = cluster.root
    await root.add_user("dave", "dave-pw", ["g1", "g2"])
    await root.mkdirs("/g2only", mode=0o770)
    await root.set_owner("/g2only", group="g2")
    async with connect(cluster.nn, "dave", "dave-pw") as dave:
        f = await dave.touchz("/g2only/f")  # group write through g2
        assert (f.owner, f.group) == ("dave", "g2")
        await dave.set_owner("/g2only/f", group="g1")  # a member may chgrp to his groups
        assert (await dave.stat("/g2only/f")).group == "g1"
        with pytest.raises(AccessDenied):
            await dave.set_owner("/g2only/f", group="g3")
        with pytest.raises(AccessDenied):
            await dave.safe_mode("enter")

    # a member of the supergroup is a superuser
    await root.add_user("ops", "ops-pw", ["supergroup"])
    async with connect(cluster.nn, "ops", "ops-pw") as ops:
        assert (await ops.safe_mode("enter")).on
        assert not (await ops.safe_mode("leave")).on
        await ops.set_owner("/g2only", owner="alice")
    assert (await root.stat("/g2only")).owner == "alice"

    with pytest.raises(InvalidPath):
        await root.add_user("bad/name", "pw", [])
    with pytest.raises(InvalidPath):
        await root.add_user("eve", "pw", ["bad\x00group"])
    with pytest.raises(InvalidArgument):
        await root.add_user("eve", "", [])
    await _fails_to_connect(cluster.nn.address, "eve", "pw")


async def test_non_superuser_is_refused_admin_actions(cluster: Cluster) -> None:
    alice = cluster["alice"]
    await cluster.root.touchz("/tmp/rootfile")
    await alice.touchz("/tmp/alicefile")

    async def refused() -> None:
        for call in (
            lambda: alice.add_user("mallory", "pw", ["supergroup"]),
            lambda: alice.remove_user("bob"),
            lambda: alice.set_password("bob", "stolen"),
            lambda: alice.set_owner("/tmp/alicefile", owner="bob"),
            lambda: alice.set_owner("/tmp/rootfile", group="staff"),  # not her file
            lambda: alice.set_permission("/tmp/rootfile", 0o777),
            lambda: alice.safe_mode("enter"),
            lambda: alice.safe_mode("leave"),
            alice.save_namespace,
            alice.roll_edits,
        ):
            with pytest.raises(AccessDenied):
                await call()

    await _unchanged(cluster, refused)
    await _fails_to_connect(cluster.nn.address, "mallory", "pw")
    # reads of the state are allowed
    assert not (await alice.safe_mode("get")).on
    assert (await alice.status()).cluster_id == "CID-nn"
    # and bob's password still works
    async with connect(cluster.nn, "bob", USERS["bob"][0]) as bob:
        assert (await bob.stat("/")).is_dir


async def test_wrong_password_fails_at_connect_and_changes_nothing(cluster: Cluster) -> None:
    async def attempts() -> None:
        assert issubclass(
            await _fails_to_connect(cluster.nn.address, "alice", "wrong"), AuthenticationFailed
        )
        await _fails_to_connect(cluster.nn.address, "nobody", "whatever")
        await _fails_to_connect(cluster.nn.address, ROOT, "")
        async with connect(cluster.nn, "alice", "wrong") as client:
            with pytest.raises(AuthenticationFailed):
                await client.mkdirs("/tmp/should-not-exist")
        async with connect(cluster.nn) as anonymous:
            with pytest.raises(AuthenticationFailed):
                await anonymous.login("alice", "wrong")
            with pytest.raises(AuthenticationFailed):
                await anonymous.login("nobody", "x")

    await _unchanged(cluster, attempts)
    assert not await cluster.root.exists("/tmp/should-not-exist")


async def test_login_token_works_and_forgeries_fail(cluster: Cluster) -> None:
    address = cluster.nn.address
    async with connect(cluster.nn) as anonymous:
        before_ms = int(time.time() * 1000)
        login = await anonymous.login("alice", USERS["alice"][0])
    assert login.user == "alice" and login.token
    assert login.expires_ms > before_ms
    # the default lifetime is a day; a shorter one may be asked for, a longer one is capped
    assert login.expires_ms <= int(time.time() * 1000) + 86_400_000
    async with connect(cluster.nn) as anonymous:
        short = await anonymous.login("alice", USERS["alice"][0], lifetime_s=30)
        long = await anonymous.login("alice", USERS["alice"][0], lifetime_s=10 * 86400)
        with pytest.raises(InvalidArgument):
            await anonymous.login("alice", USERS["alice"][0], lifetime_s=-1)
    assert short.expires_ms <= int(time.time() * 1000) + 30_000
    assert long.expires_ms <= int(time.time() * 1000) + 86_400_000

    async with connect(address, token=login.token) as by_token:
        made = await by_token.mkdirs("/tmp/by-token")
        assert made.owner == "alice"
    # a user name next to the token does not change who the token says
    async with connect(address, "root", token=login.token) as by_token:
        assert (await by_token.touchz("/tmp/by-token/f")).owner == "alice"

    body_text, signature_text = login.token.split(".")
    middle = len(signature_text) // 2
    flipped = "A" if signature_text[middle] != "A" else "B"
    forged_signature = (
        f"{body_text}.{signature_text[:middle]}{flipped}{signature_text[middle + 1:]}"
    )
    # a token for root signed with a key the NameNode never had
    body = tokens.TokenBody("user", ROOT, 1, 0, int(time.time() * 1000) + 3_600_000)
    random_key = tokens.issue_token(body, TokenKeyRecord(1, os.urandom(32), 2**62))
    # alice's signature on a body that says root
    alice_body = msgspec.msgpack.decode(
        base64.urlsafe_b64decode(body_text + "=" * (-len(body_text) % 4)), type=tokens.TokenBody
    )
    assert alice_body.user == "alice"
    root_body = msgspec.msgpack.encode(msgspec.structs.replace(alice_body, user=ROOT))
    swapped = base64.urlsafe_b64encode(root_body).rstrip(b"=").decode() + "." + signature_text

    async def forgeries() -> None:
        for bad in (
            forged_signature, random_key, swapped, "garbage", "a.b", login.token + "x",
            "x" * 5000,
        ):
            await _fails_to_connect(address, "", token=bad)

    await _unchanged(cluster, forgeries)


async def test_expired_token(minicluster: MiniCluster) -> None:
    c = await start_cluster(minicluster, nn_config(token_lifetime_s=1.0), users=False)
    try:
        issued = time.time()
        login = await c.root.login(ROOT, ROOT_PW)
        assert login.expires_ms <= int(issued * 1000) + 2000
        await asyncio.sleep(max(0.0, login.expires_ms / 1000 - time.time()) + 0.2)
        async with connect(c.nn, token=login.token) as client:
            with pytest.raises(TokenExpired):
                await client.stat("/")
        # a fresh login works again
        fresh = await c.root.login(ROOT, ROOT_PW)
        async with connect(c.nn, token=fresh.token) as client:
            assert (await client.stat("/")).is_dir
    finally:
        await c.close()


async def test_removed_users_token_stops_working(cluster: Cluster) -> None:
    token = (await cluster.root.login("bob", USERS["bob"][0])).token
    async with connect(cluster.nn, token=token) as bob:
        assert (await bob.stat("/")).is_dir
        await cluster["bob"].mkdirs("/tmp/bob-was-here")
        await cluster.root.remove_user("bob")
        # sessions that authenticated before the removal end with it
        for session in (bob, cluster["bob"]):
            with pytest.raises(AuthenticationFailed):
                await session.stat("/")
            with pytest.raises(AuthenticationFailed):
                await session.mkdirs("/tmp/bob-again")
    assert not await cluster.root.exists("/tmp/bob-again")
    await _fails_to_connect(cluster.nn.address, "", token=token)
    await _fails_to_connect(cluster.nn.address, "bob", USERS["bob"][0])
    with pytest.raises(NotFound):
        await cluster.root.remove_user("bob")
    with pytest.raises(InvalidArgument):
        await cluster.root.remove_user(ROOT)
    assert (await cluster.root.stat("/")).is_dir


async def test_set_password_self_and_by_superuser(cluster: Cluster) -> None:
    address = cluster.nn.address
    await cluster["alice"].set_password("alice", "alice-new")
    await _fails_to_connect(address, "alice", USERS["alice"][0])
    async with connect(address, "alice", "alice-new") as alice:
        assert (await alice.touchz("/tmp/a")).owner == "alice"

    await cluster.root.set_password("bob", "bob-new")
    await _fails_to_connect(address, "bob", USERS["bob"][0])
    async with connect(address, "bob", "bob-new") as bob:
        assert (await bob.touchz("/tmp/b")).owner == "bob"

    with pytest.raises(AccessDenied):
        await cluster["carol"].set_password("bob", "carol-was-here")
    with pytest.raises(InvalidArgument):
        await cluster.root.set_password("bob", "")
    with pytest.raises(NotFound):
        await cluster.root.set_password("nobody", "pw")
    async with connect(address, "bob", "bob-new") as bob:
        assert (await bob.stat("/tmp/b")).owner == "bob"


async def test_anonymous_may_only_log_in(cluster: Cluster) -> None:
    async with connect(cluster.nn) as anonymous:
        login = await anonymous.login("carol", USERS["carol"][0])
        assert login.user == "carol"
        for call in (
            lambda: anonymous.mkdirs("/tmp/anon"),
            lambda: anonymous.stat("/"),
            lambda: anonymous.list_dir("/"),
            lambda: anonymous.create("/tmp/anon-file"),
            lambda: anonymous.delete("/tmp", recursive=True),
            anonymous.status,
            lambda: anonymous.safe_mode("get"),
            lambda: anonymous.add_user("x", "y"),
        ):
            with pytest.raises(NotAuthenticated):
                await call()
    assert not await cluster.root.exists("/tmp/anon")


# -- permissions ------------------------------------------------------------------------


async def test_posix_write_permissions(cluster: Cluster) -> None:
    root, alice, bob, carol = cluster.root, cluster["alice"], cluster["bob"], cluster["carol"]
    await root.mkdirs("/rootdir")  # root:supergroup 755
    await root.mkdirs("/open", mode=0o777)

    async def denied_in_rootdir() -> None:
        with pytest.raises(AccessDenied):
            await bob.mkdirs("/rootdir/x")
        with pytest.raises(AccessDenied):
            await bob.create("/rootdir/f")
        with pytest.raises(AccessDenied):
            await bob.rename("/rootdir", "/open/stolen")  # needs w on /
        with pytest.raises(AccessDenied):
            await bob.delete("/rootdir", recursive=True, skip_trash=True)
        with pytest.raises(AccessDenied):
            await bob.set_permission("/rootdir", 0o777)
        with pytest.raises(AccessDenied):
            await bob.set_times("/rootdir", mtime_ms=1)

    await _unchanged(cluster, denied_in_rootdir)
    assert (await bob.stat("/rootdir")).is_dir  # reading the status needs no permission

    # world-writable: anyone can create, the creator owns it
    assert (await bob.mkdirs("/open/bobdir")).owner == "bob"
    assert (await bob.touchz("/open/bobfile")).owner == "bob"
    await alice.touchz("/open/alicefile")
    # not sticky: bob may delete and rename alice's file (w on the parent suffices)
    await bob.rename("/open/alicefile", "/open/renamed-by-bob")
    await bob.delete("/open/renamed-by-bob", skip_trash=True)
    # but not change its mode or replication (owner / w on the file)
    await alice.touchz("/open/alice2")
    with pytest.raises(AccessDenied):
        await bob.set_permission("/open/alice2", 0o666)
    with pytest.raises(AccessDenied):
        await bob.set_replication("/open/alice2", 3)
    await alice.set_replication("/open/alice2", 3)
    await alice.set_permission("/open/alice2", 0o666)
    await bob.set_replication("/open/alice2", 1)  # now world-writable

    # group write: root:staff 775
    await root.mkdirs("/grp", mode=0o775)
    await root.set_owner("/grp", group="staff")
    assert (await alice.touchz("/grp/a")).group == "staff"
    assert (await carol.mkdirs("/grp/c")).owner == "carol"
    with pytest.raises(AccessDenied):
        await bob.touchz("/grp/b")
    # set_times: the owner needs no w bit, others do
    await alice.set_permission("/open/alice2", 0o444)
    await alice.set_times("/open/alice2", mtime_ms=5_000)
    with pytest.raises(AccessDenied):
        await bob.set_times("/open/alice2", mtime_ms=6_000)
    await alice.set_permission("/open/alice2", 0o666)
    await bob.set_times("/open/alice2", mtime_ms=7_000)
    assert (await root.stat("/open/alice2")).mtime_ms == 7_000
    # first matching class decides: the owner class without w denies even if others have it
    await root.mkdirs("/own", mode=0o577)
    await root.set_owner("/own", owner="alice")
    with pytest.raises(AccessDenied):
        await alice.touchz("/own/x")
    await bob.touchz("/own/x")
    # recursive delete needs rwx on every directory of the subtree
    await alice.mkdirs("/open/tree/sub")
    await alice.touchz("/open/tree/sub/f")
    await alice.set_permission("/open/tree/sub", 0o555)
    with pytest.raises(AccessDenied):
        await alice.delete("/open/tree", recursive=True, skip_trash=True)
    assert await root.exists("/open/tree/sub/f")
    await alice.set_permission("/open/tree/sub", 0o755)
    await alice.delete("/open/tree", recursive=True, skip_trash=True)
    assert not await root.exists("/open/tree")


async def test_sticky_tmp(cluster: Cluster) -> None:
    root, alice, bob = cluster.root, cluster["alice"], cluster["bob"]
    tmp = await root.stat("/tmp")
    assert tmp.mode == 0o1777
    await alice.touchz("/tmp/af")
    await alice.mkdirs("/tmp/adir")

    async def bob_tries() -> None:
        for skip_trash in (True, False):
            with pytest.raises(AccessDenied):
                await bob.delete("/tmp/af", skip_trash=skip_trash)
        with pytest.raises(AccessDenied):
            await bob.delete("/tmp/adir", recursive=True, skip_trash=True)
        with pytest.raises(AccessDenied):
            await bob.rename("/tmp/af", "/tmp/bf")
        with pytest.raises(AccessDenied):
            await bob.create("/tmp/af", overwrite=True)

    await _unchanged(cluster, bob_tries)
    # bob's own files in /tmp are his to delete; alice deletes hers; root any
    await bob.touchz("/tmp/bf")
    await bob.rename("/tmp/bf", "/tmp/bf2")
    await bob.delete("/tmp/bf2", skip_trash=True)
    await alice.delete("/tmp/af", skip_trash=True)
    assert not await root.exists("/tmp/af")
    # in a sticky directory of carol's, carol (the directory's owner) may delete bob's file
    carol = cluster["carol"]
    await root.mkdirs("/carols", mode=0o1777)
    await root.set_owner("/carols", owner="carol")
    await bob.touchz("/carols/bobs")
    with pytest.raises(AccessDenied):
        await alice.delete("/carols/bobs", skip_trash=True)
    await carol.delete("/carols/bobs", skip_trash=True)
    assert not await root.exists("/carols/bobs")
    await root.delete("/tmp/adir", recursive=True, skip_trash=True)
    assert not await root.exists("/tmp/adir")


async def test_traverse_and_read_permissions(cluster: Cluster) -> None:
    root, bob = cluster.root, cluster["bob"]
    await root.mkdirs("/locked/inner", mode=0o777)
    await root.set_permission("/locked", 0o700)
    await root.touchz("/locked/inner/f")

    async def no_traverse() -> None:
        for call in (
            lambda: bob.stat("/locked/inner"),
            lambda: bob.stat("/locked/inner/f"),
            lambda: bob.list_dir("/locked/inner"),
            lambda: bob.mkdirs("/locked/inner/x"),
            lambda: bob.create("/locked/inner/g"),
            lambda: bob.delete("/locked/inner/f", skip_trash=True),
            lambda: bob.content_summary("/locked/inner"),
            lambda: bob.list_dir("/locked"),
        ):
            with pytest.raises(AccessDenied):
                await call()

    await _unchanged(cluster, no_traverse)

    # x without r: traverse and create below, but no listing
    await root.set_permission("/locked", 0o711)
    assert (await bob.stat("/locked/inner/f")).owner == ROOT
    await bob.touchz("/locked/inner/bobs")
    with pytest.raises(AccessDenied):
        await bob.list_dir("/locked")
    with pytest.raises(AccessDenied):
        await bob.content_summary("/locked")
    assert [e.path for e in await bob.list_dir("/locked/inner")] == [
        "/locked/inner/bobs", "/locked/inner/f",
    ]
    # r without x: still no listing (a listing needs r and x)
    await root.mkdirs("/rnox", mode=0o744)
    with pytest.raises(AccessDenied):
        await bob.list_dir("/rnox")
    # du/count need r-x on every directory beneath, or they would reveal private dirs
    await root.mkdirs("/pub/private", mode=0o777)
    await root.touchz("/pub/private/secret")
    await root.set_permission("/pub/private", 0o700)
    with pytest.raises(AccessDenied):
        await bob.content_summary("/pub")
    await root.set_permission("/pub/private", 0o755)
    assert (await bob.content_summary("/pub")).file_count == 1
    # a file needs no read bit to be stat'ed, but opening its blocks needs r
    await root.set_permission("/locked/inner/f", 0o600)
    assert (await bob.stat("/locked/inner/f")).mode == 0o600
    with pytest.raises(AccessDenied):
        await bob.block_locations("/locked/inner/f")


async def test_hostile_paths_are_refused(cluster: Cluster) -> None:
    root, alice = cluster.root, cluster["alice"]
    await root.mkdirs("/ok/sub")
    await root.touchz("/ok/f")
    hostile = [
        "/ok/../etc",
        "/ok/..",
        "/ok/./sub",
        "/ok//sub",
        "//ok",
        "/ok/\x00nul",
        "/ok/new\nline",
        "/ok/" + "x" * 300,
        "/" + "/".join(["d"] * 1001),
        "/" + "y" * 9000,
    ]

    calls: list[Callable[[AsyncClient, str], Awaitable[object]]] = [
        lambda c, bad: c.mkdirs(bad),
        lambda c, bad: c.create(bad),
        lambda c, bad: c.stat(bad),
        lambda c, bad: c.list_dir(bad),
        lambda c, bad: c.delete(bad, recursive=True, skip_trash=True),
        lambda c, bad: c.delete(bad, recursive=True),
        lambda c, bad: c.rename("/ok/f", bad),
        lambda c, bad: c.rename(bad, "/ok/moved"),
        lambda c, bad: c.set_permission(bad, 0o777),
        lambda c, bad: c.set_owner(bad, "alice"),
        lambda c, bad: c.set_times(bad, 1, 1),
        lambda c, bad: c.set_replication(bad, 3),
        lambda c, bad: c.content_summary(bad),
        lambda c, bad: c.restore(bad),
    ]

    async def attacks() -> None:
        for client in (root, alice):
            for bad in hostile:
                for call in calls:
                    with pytest.raises(InvalidPath):
                        await call(client, bad)

    await _unchanged(cluster, attacks)
    assert await root.exists("/ok/f")
    assert not await root.exists("/etc")
    # relative paths: the client resolves them against /user/<user> (as HDFS); sent as
    # they are, the NameNode refuses them
    for bad in ("ok/relative", "relative", "", "."):
        with pytest.raises(InvalidPath):
            await root.rpc.call(p.STAT, p.PathRequest(bad))
        with pytest.raises(InvalidPath):
            await root.rpc.call(p.MKDIRS, p.MkdirsRequest(bad, 0o755, True))
    # the limits themselves are fine
    assert (await root.mkdirs("/ok/" + "z" * 255)).is_dir


async def test_read_only_file_is_written_by_its_creator_only(cluster: Cluster) -> None:
    alice, bob = cluster["alice"], cluster["bob"]
    # as POSIX open(O_CREAT, 0444): the creator still writes and closes the file
    created = await alice.create("/tmp/ro", mode=0o444)
    assert created.mode == 0o444 and created.under_construction
    # another user, even one claiming the writer's client name, may not touch it
    impostor = AsyncClient(
        f"xdfs://{cluster.nn.address}", user="bob", password=USERS["bob"][0],
        config=cluster.root.config, client_name=alice.client_name,
    )
    async with impostor:
        with pytest.raises(AccessDenied):
            await impostor.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/tmp/ro", alice.client_name))
        with pytest.raises(AccessDenied):
            await impostor.complete("/tmp/ro", [])
    located = await alice.rpc.call(p.ADD_BLOCK, p.AddBlockRequest("/tmp/ro", alice.client_name))
    done = await alice.complete("/tmp/ro", [await cluster.datanodes.store(located, 10)])
    assert (done.length, done.mode, done.under_construction) == (10, 0o444, False)
    with pytest.raises(AccessDenied):
        await bob.set_replication("/tmp/ro", 1)


async def test_token_keys_rotate_and_persist(minicluster: MiniCluster) -> None:
    config = nn_config(token_lifetime_s=5.0, token_key_rotation_s=1.0)
    c = await start_cluster(minicluster, config, users=False)
    try:
        first = await c.root.login(ROOT, ROOT_PW)
        first_key = _key_id(first.token)
        newer: list[str] = []

        async def rotated() -> bool:
            login = await c.root.login(ROOT, ROOT_PW)
            if _key_id(login.token) > first_key:
                newer.append(login.token)
            return bool(newer)

        await eventually(rotated, interval_s=0.2)  # the NameNode added a key by itself
        for token in (first.token, newer[0]):  # both keys verify
            async with connect(c.nn, token=token) as client:
                assert (await client.stat("/")).is_dir
        await c.close()
        await minicluster.stop_namenode(c.nn)
        # the new key was logged: a restarted NameNode verifies its tokens
        nn = await minicluster.start_namenode(format_dirs=False, config=config)
        async with connect(nn, token=newer[0]) as client:
            assert (await client.stat("/")).is_dir
    finally:
        await c.close()


def _key_id(token: str) -> int:
    body_text = token.split(".", 1)[0]
    raw = base64.urlsafe_b64decode(body_text + "=" * (-len(body_text) % 4))
    return msgspec.msgpack.decode(raw, type=tokens.TokenBody).key_id
