"""The routing core shared by shards and clients (pure), and the handler guard."""

from __future__ import annotations

import asyncio

import pytest

from xdfs.errors import CrossShardRename, NoSlotMap, TopLayerChange, WrongShard
from xdfs.namenode.sharded import guarded
from xdfs.protocol import namenode as p
from xdfs.rpc.handling import CallContext, Deferred, Principal, deferring, routes_of
from xdfs.rpc.service import Method, Service
from xdfs.sharding.routing import (
    Routing,
    check_trash,
    request_paths,
    require_map,
    routing_path,
)
from xdfs.sharding.slotmap import initial_map
from xdfs.sharding.slots import DEFAULT, TEMPORARY_SUFFIX, Partitioning

ROUTING = Routing(DEFAULT, initial_map(["0", "1"]))


def on(shard: str) -> str:
    """A partition root (under /tmp) that shard ``shard`` owns."""
    return next(f"/tmp/p{i}" for i in range(1000) if ROUTING.owner_of(f"/tmp/p{i}") == shard)


def test_requests_name_their_paths_routing_one_first() -> None:
    assert routing_path(p.RenameRequest("/a/b", "/c/d")) == "/a/b"
    assert list(request_paths(p.RenameRequest("/a/b", "/c/d"))) == ["/a/b", "/c/d"]
    assert list(request_paths(p.ConcatRequest("/t/x", ["/t/y", "/t/z"]))) == [
        "/t/x", "/t/y", "/t/z"]
    assert routing_path(p.RestoreRequest("/user/a/.Trash/x")) == "/user/a/.Trash/x"
    assert routing_path(p.RenewLeaseRequest("client")) is None


def test_the_owner_serves_and_another_shard_answers_wrong_shard() -> None:
    path = on("1") + "/deep/file"
    ROUTING.check("1", "create", p.PathRequest(path))
    with pytest.raises(WrongShard) as refused:
        ROUTING.check("0", "create", p.PathRequest(path))
    slot = DEFAULT.slot_of(path)
    assert (refused.value.slot, refused.value.owner, refused.value.epoch) == (slot, "1", 1)


def test_top_layer_reads_anywhere_changes_nowhere() -> None:
    for shard in ("0", "1"):
        ROUTING.check(shard, "stat", p.PathRequest("/user"))
        ROUTING.check(shard, "list", p.ListRequest("/"))
        with pytest.raises(TopLayerChange):
            ROUTING.check(shard, "mkdirs", p.MkdirsRequest("/data", 0o755, True))
        with pytest.raises(TopLayerChange):
            ROUTING.check(shard, "set_permission", p.SetPermissionRequest("/user", 0o700))


def test_renames_within_a_shard_only() -> None:
    a, b = on("0"), on("1")
    other_on_0 = next(f"/user/q{i}" for i in range(1000) if ROUTING.owner_of(f"/user/q{i}") == "0")
    ROUTING.check("0", "rename", p.RenameRequest(f"{a}/x", f"{a}/y"))
    ROUTING.check("0", "rename", p.RenameRequest(a, other_on_0))  # two partitions, one shard
    with pytest.raises(CrossShardRename):
        ROUTING.check("0", "rename", p.RenameRequest(a, f"{b}/y"))
    with pytest.raises(TopLayerChange):
        ROUTING.check("0", "rename", p.RenameRequest(a, "/moved"))


def test_an_upload_temporary_lives_with_its_destination() -> None:
    for i in range(50):
        dst = f"/tmp/file{i}.csv"
        assert DEFAULT.slot_of(dst + TEMPORARY_SUFFIX) == DEFAULT.slot_of(dst)
    assert Partitioning(1).slot_of("/x" + TEMPORARY_SUFFIX) == Partitioning(1).slot_of("/x")


def test_a_delete_to_another_shards_trash_is_refused() -> None:
    user = next(f"u{i}" for i in range(1000) if ROUTING.owner_of(f"/user/u{i}") == "1")
    trash = f"/user/{user}/.Trash"
    check_trash(ROUTING, "1", on("1"), trash)  # the trash on this shard: fine
    with pytest.raises(CrossShardRename):
        check_trash(ROUTING, "0", on("0"), trash)
    check_trash(ROUTING, "1", f"{trash}/Current/x", trash)  # (a delete in the trash itself)


def test_no_map_yet_is_retriable() -> None:
    with pytest.raises(NoSlotMap) as refused:
        require_map(None)
    assert refused.value.retriable


def test_copying_suffix_is_the_uploads() -> None:
    from xdfs.client.transfer import COPYING_SUFFIX

    assert COPYING_SUFFIX == TEMPORARY_SUFFIX


class Handlers:
    """Stand-ins of each kind of handler the NameNode has."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def stat(self, ctx: CallContext, req: p.PathRequest) -> str:
        self.ran.append("stat")
        return "stat"

    @deferring
    def mkdirs(self, ctx: CallContext, req: p.MkdirsRequest) -> Deferred:
        self.ran.append("mkdirs")
        return Deferred()

    async def set_permission(self, ctx: CallContext, req: p.SetPermissionRequest) -> str:
        self.ran.append("set_permission")
        return "chmod"


SERVICE = Service("t", (
    Method("stat", p.PathRequest, p.FileStatus, idempotent=True),
    Method("mkdirs", p.MkdirsRequest, p.FileStatus, idempotent=False),
    Method("set_permission", p.SetPermissionRequest, p.FileStatus, idempotent=True),
))


def test_the_guard_keeps_each_handlers_kind_and_refuses_before_it_runs() -> None:
    impl = Handlers()
    wrapped = guarded(impl, SERVICE, lambda method, ctx, req: ROUTING.check("0", method, req))
    original = dict(routes_of(SERVICE, impl))
    for name, route in routes_of(SERVICE, wrapped):
        before = original[name]
        assert (route.is_async, route.inline, route.deferring, route.eager) == (
            before.is_async, before.inline, before.deferring, before.eager)
    ctx = CallContext(Principal("alice"), "peer", None)  # type: ignore[arg-type]
    theirs = on("1")
    with pytest.raises(WrongShard):
        wrapped.stat(ctx, p.PathRequest(theirs))  # type: ignore[attr-defined]
    with pytest.raises(WrongShard):
        wrapped.mkdirs(ctx, p.MkdirsRequest(theirs, 0o755, True))  # type: ignore[attr-defined]
    with pytest.raises(WrongShard):
        asyncio.run(wrapped.set_permission(  # type: ignore[attr-defined]
            ctx, p.SetPermissionRequest(theirs, 0o700)))
    assert impl.ran == []  # nothing ran
    assert wrapped.stat(ctx, p.PathRequest(on("0"))) == "stat"  # type: ignore[attr-defined]
    assert asyncio.run(wrapped.set_permission(  # type: ignore[attr-defined]
        ctx, p.SetPermissionRequest(on("0"), 0o700))) == "chmod"
    assert impl.ran == ["stat", "set_permission"]


def test_admin_shards_table() -> None:
    from xdfs.cli.admin_shards import shard_rows
    from xdfs.protocol.sharding import ShardInfo, SlotMapResponse

    assert shard_rows([SlotMapResponse("", 0, [], [], inodes=7)]) == [
        "not sharded: one NameNode holds the whole namespace (7 inodes)"]
    ranges = [(r.first, r.last, r.shard) for r in initial_map(["0", "1"]).ranges]
    infos = [ShardInfo("0", "h:1", True, 8192), ShardInfo("1", "h:2", False, 8192)]
    rows = shard_rows([SlotMapResponse("0", 1, ranges, infos, inodes=5),
                       SlotMapResponse("1", 1, ranges, infos, inodes=9)])
    assert rows[0].startswith("slot map epoch 1: 16384 slots over 2 shards")
    assert rows[2].split() == ["0", "h:1", "up", "8192", "5", "0-8191"]
    assert rows[3].split() == ["1", "h:2", "down", "8192", "9", "8192-16383"]
