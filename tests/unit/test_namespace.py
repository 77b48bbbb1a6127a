"""Behaviour of the pure namespace: every op, every query, every refusal, permissions,
paging, images. A refused op must raise its typed error and change nothing at all."""

from __future__ import annotations

import pytest

from xdfs.errors import (
    AccessDenied,
    AlreadyExists,
    InvalidArgument,
    InvalidPath,
    IsADirectory,
    LeaseError,
    NotADirectory,
    NotFound,
    StorageError,
    XdfsError,
)
from xdfs.namenode.namespace import tree as namespace
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    AddBlockOp,
    AddFileOp,
    AddTokenKeyOp,
    AddUserOp,
    CloseFileOp,
    DeleteOp,
    ImageHeader,
    InodeRecord,
    MkdirOp,
    Op,
    ReassignLeaseOp,
    RemoveTokenKeyOp,
    RemoveUserOp,
    RenameOp,
    SetOwnerOp,
    SetPasswordOp,
    SetPermissionOp,
    SetReplicationOp,
    SetTimesOp,
    UpdateBlocksOp,
)
from xdfs.namenode.namespace.permissions import mode_string
from xdfs.namenode.namespace.tree import FIRST_BLOCK_ID, FIRST_GENSTAMP, Namespace
from xdfs.namenode.security import passwords
from xdfs.protocol.blocks import BlockRecord
from xdfs.protocol.namenode import ContentSummary

T = 1_700_000_000_000
SUPER = "hdfs"
B1 = BlockRecord(5000, 1001, 100)
B2 = BlockRecord(5001, 1002, 50)
B3 = BlockRecord(5002, 1003, 7)


def mkdir(ns: Namespace, path: str, *, owner: str = "alice", group: str = "users",
          mode: int = 0o755, mtime: int = T) -> None:
    ns.apply(MkdirOp(path, ns.allocate_inode_id(), mode, owner, group, mtime))


def create(ns: Namespace, path: str, *, owner: str = "alice", group: str = "users",
           mode: int = 0o644, mtime: int = T, client: str = "c1", replication: int = 2,
           overwrite: bool = False) -> tuple[int, ...]:
    return ns.apply(AddFileOp(path, ns.allocate_inode_id(), mode, owner, group, mtime,
                              replication, 1 << 20, client, overwrite))


def write_file(ns: Namespace, path: str, blocks: tuple[BlockRecord, ...] = (), **kw: object,
               ) -> None:
    create(ns, path, **kw)  # type: ignore[arg-type]
    ns.apply(CloseFileOp(path, T + 10, T + 11, blocks))


@pytest.fixture
def ns() -> Namespace:
    """/a (alice:users 755) holding f (closed, 2 blocks) and b/ holding g (under
    construction by c1, 1 block); /tmp (hdfs 1777); users alice, bob, carol."""
    ns = Namespace(SUPER, root_mtime_ms=T)
    mkdir(ns, "/a")
    write_file(ns, "/a/f", (B1, B2))
    mkdir(ns, "/a/b")
    create(ns, "/a/b/g")
    ns.apply(AddBlockOp("/a/b/g", B3))
    mkdir(ns, "/tmp", owner=SUPER, group="supergroup", mode=0o1777)
    for name, groups in (("alice", ("users",)), ("bob", ("staff",)), ("carol", ("users",))):
        ns.apply(AddUserOp(name, b"hash", b"salt", groups, T))
    ns.apply(AddTokenKeyOp(7, b"secret", T + 1000))
    return ns


# --- refusals: typed error, nothing changed -------------------------------------------------

REFUSALS: list[tuple[str, Op, type[XdfsError]]] = [
    ("mkdir root", MkdirOp("/", 100, 0o755, "u", "g", T), AlreadyExists),
    ("mkdir existing dir", MkdirOp("/a", 100, 0o755, "u", "g", T), AlreadyExists),
    ("mkdir existing file", MkdirOp("/a/f", 100, 0o755, "u", "g", T), AlreadyExists),
    ("mkdir missing parent", MkdirOp("/x/y", 100, 0o755, "u", "g", T), NotFound),
    ("mkdir under a file", MkdirOp("/a/f/x", 100, 0o755, "u", "g", T), NotADirectory),
    ("mkdir relative", MkdirOp("a/x", 100, 0o755, "u", "g", T), InvalidPath),
    ("mkdir dotdot", MkdirOp("/a/../x", 100, 0o755, "u", "g", T), InvalidPath),
    ("mkdir empty component", MkdirOp("/a//x", 100, 0o755, "u", "g", T), InvalidPath),
    ("mkdir root id", MkdirOp("/x", 1, 0o755, "u", "g", T), InvalidArgument),
    ("mkdir dir id in use", MkdirOp("/x", 2, 0o755, "u", "g", T), InvalidArgument),
    ("mkdir no owner", MkdirOp("/x", 100, 0o755, "", "g", T), InvalidArgument),
    ("mkdir no group", MkdirOp("/x", 100, 0o755, "u", "", T), InvalidArgument),
    ("mkdir negative mode", MkdirOp("/x", 100, -1, "u", "g", T), InvalidArgument),
    ("create root", AddFileOp("/", 100, 0o644, "u", "g", T, 2, 1, "c"), IsADirectory),
    ("create over dir", AddFileOp("/a/b", 100, 0o644, "u", "g", T, 2, 1, "c", True),
     IsADirectory),
    ("create existing", AddFileOp("/a/f", 100, 0o644, "u", "g", T, 2, 1, "c"), AlreadyExists),
    ("create missing parent", AddFileOp("/x/f", 100, 0o644, "u", "g", T, 2, 1, "c"), NotFound),
    ("create under file", AddFileOp("/a/f/x", 100, 0o644, "u", "g", T, 2, 1, "c"),
     NotADirectory),
    ("create replication 0", AddFileOp("/x", 100, 0o644, "u", "g", T, 0, 1, "c"),
     InvalidArgument),
    ("create block size 0", AddFileOp("/x", 100, 0o644, "u", "g", T, 2, 0, "c"),
     InvalidArgument),
    ("create no client", AddFileOp("/x", 100, 0o644, "u", "g", T, 2, 1, ""), InvalidArgument),
    ("create bad path", AddFileOp("/x\n", 100, 0o644, "u", "g", T, 2, 1, "c"), InvalidPath),
    ("add_block closed file", AddBlockOp("/a/f", BlockRecord(9, 9, 0)), LeaseError),
    ("add_block dir", AddBlockOp("/a/b", BlockRecord(9, 9, 0)), IsADirectory),
    ("add_block missing", AddBlockOp("/a/zz", BlockRecord(9, 9, 0)), NotFound),
    ("add_block duplicate id", AddBlockOp("/a/b/g", B3), InvalidArgument),
    ("add_block negative size", AddBlockOp("/a/b/g", BlockRecord(9, 9, -1)), InvalidArgument),
    ("update_blocks closed", UpdateBlocksOp("/a/f", ()), LeaseError),
    ("update_blocks twice same id", UpdateBlocksOp("/a/b/g", (B1, B1)), InvalidArgument),
    ("close closed file", CloseFileOp("/a/f", T, T, ()), LeaseError),
    ("close missing", CloseFileOp("/nope", T, T, ()), NotFound),
    ("close dir", CloseFileOp("/a", T, T, ()), IsADirectory),
    ("delete root", DeleteOp("/", T), InvalidArgument),
    ("delete missing", DeleteOp("/nope", T), NotFound),
    ("delete below file", DeleteOp("/a/f/x", T), NotFound),
    ("rename root", RenameOp("/", "/z", T), InvalidArgument),
    ("rename missing src", RenameOp("/nope", "/z", T), NotFound),
    ("rename onto existing", RenameOp("/a/f", "/tmp", T), AlreadyExists),
    ("rename onto root", RenameOp("/a", "/", T), AlreadyExists),
    ("rename into itself", RenameOp("/a", "/a/b/c", T), InvalidArgument),
    ("rename into own child", RenameOp("/a", "/a/z", T), InvalidArgument),
    ("rename missing dst parent", RenameOp("/a/f", "/x/y", T), NotFound),
    ("rename dst parent is file", RenameOp("/tmp", "/a/f/x", T), NotADirectory),
    ("chmod missing", SetPermissionOp("/nope", 0o700), NotFound),
    ("chmod negative", SetPermissionOp("/a", -5), InvalidArgument),
    ("chown missing", SetOwnerOp("/nope", "x", "y"), NotFound),
    ("setrep dir", SetReplicationOp("/a", 3), IsADirectory),
    ("setrep 0", SetReplicationOp("/a/f", 0), InvalidArgument),
    ("setrep missing", SetReplicationOp("/nope", 3), NotFound),
    ("settimes below -1", SetTimesOp("/a", -2, 5), InvalidArgument),
    ("settimes missing", SetTimesOp("/nope", 5, 5), NotFound),
    ("reassign closed", ReassignLeaseOp("/a/f", "c2"), LeaseError),
    ("reassign to nobody", ReassignLeaseOp("/a/b/g", ""), InvalidArgument),
    ("add user without name", AddUserOp("", b"h", b"s", (), T), InvalidArgument),
    ("add user empty group", AddUserOp("dave", b"h", b"s", ("",), T), InvalidArgument),
    ("remove unknown user", RemoveUserOp("zed"), NotFound),
    ("password unknown user", SetPasswordOp("zed", b"h", b"s"), NotFound),
    ("token key twice", AddTokenKeyOp(7, b"other", T), AlreadyExists),
    ("remove unknown token key", RemoveTokenKeyOp(8), NotFound),
    ("not a namespace op", Op(), InvalidArgument),
]


@pytest.mark.parametrize(("op", "error"), [case[1:] for case in REFUSALS],
                         ids=[case[0] for case in REFUSALS])
def test_refused_op_raises_typed_error_and_changes_nothing(
    ns: Namespace, op: Op, error: type[XdfsError]
) -> None:
    before = ns.canonical_dump()
    with pytest.raises(error):
        ns.apply(op)
    assert ns.canonical_dump() == before


# --- ops -------------------------------------------------------------------------------------


def test_new_namespace_has_root_and_counters() -> None:
    ns = Namespace("root", root_mtime_ms=42)
    status = ns.stat("/")
    assert (status.is_dir, status.owner, status.group, status.mode, status.inode_id) == (
        True, "root", "supergroup", 0o755, 1)
    assert status.mtime_ms == 42
    assert (ns.next_inode_id, ns.next_block_id, ns.next_genstamp) == (
        2, FIRST_BLOCK_ID, FIRST_GENSTAMP)
    assert ns.allocate_inode_id() == 2 and ns.next_inode_id == 3
    assert ns.allocate_block_id() == 1 << 30 and ns.next_block_id == (1 << 30) + 1
    assert ns.allocate_genstamp() == 1000 and ns.next_genstamp == 1001
    assert ns.inode_count() == 1
    with pytest.raises(InvalidArgument):
        Namespace("")


def test_mkdir_sets_attributes_and_parent_mtime(ns: Namespace) -> None:
    assert ns.apply(MkdirOp("/a/new/", 500, 0o40750, "bob", "staff", T + 5)) == ()
    status = ns.stat("/a/new")
    assert status.path == "/a/new"
    assert (status.is_dir, status.mode, status.owner, status.group, status.inode_id) == (
        True, 0o750, "bob", "staff", 500)
    assert (status.mtime_ms, status.atime_ms, status.children) == (T + 5, T + 5, 0)
    assert ns.stat("/a").mtime_ms == T + 5
    assert ns.next_inode_id == 501


def test_add_file_creates_file_under_construction(ns: Namespace) -> None:
    assert ns.apply(AddFileOp("/a/n", 300, 0o644, "bob", "users", T + 3, 3, 4096, "cX")) == ()
    status = ns.stat("/a/n")
    assert not status.is_dir and status.under_construction
    assert (status.length, status.replication, status.block_size) == (0, 3, 4096)
    assert (status.mtime_ms, status.atime_ms) == (T + 3, T + 3)
    assert ns.lease_holder("/a/n") == "cX"
    assert ns.get_blocks("/a/n") == ()
    assert ns.stat("/a").mtime_ms == T + 3
    assert ns.next_inode_id == 301


def test_overwrite_replaces_file_and_returns_its_blocks(ns: Namespace) -> None:
    count = ns.inode_count()
    dropped = create(ns, "/a/f", overwrite=True, client="c9", mtime=T + 7)
    assert dropped == (B1.block_id, B2.block_id)
    assert ns.get_blocks("/a/f") == ()
    assert ns.lease_holder("/a/f") == "c9"
    assert ns.inode_count() == count
    # overwriting a file under construction also drops its lease entry
    assert create(ns, "/a/b/g", overwrite=True, client="c3") == (B3.block_id,)
    assert ("/a/b/g", "c3") in ns.files_under_construction()
    assert len(ns.files_under_construction()) == 2


def test_blocks_lifecycle_and_counters(ns: Namespace) -> None:
    big = BlockRecord(2**31 + 5, 77_777, 10)
    assert ns.apply(AddBlockOp("/a/b/g", big)) == ()
    assert ns.get_blocks("/a/b/g") == (B3, big)
    assert ns.next_block_id == 2**31 + 6 and ns.next_genstamp == 77_778
    longer = BlockRecord(big.block_id, 77_779, 99)
    assert ns.apply(UpdateBlocksOp("/a/b/g", (longer,))) == (B3.block_id,)
    assert ns.next_genstamp == 77_780
    assert ns.stat("/a/b/g").length == 99
    assert ns.apply(CloseFileOp("/a/b/g", T + 20, T + 21, ())) == (big.block_id,)
    status = ns.stat("/a/b/g")
    assert (status.under_construction, status.mtime_ms, status.atime_ms) == (
        False, T + 20, T + 21)
    assert ns.lease_holder("/a/b/g") == ""
    assert ns.files_under_construction() == []


def test_delete_removes_subtree_and_returns_blocks(ns: Namespace) -> None:
    count = ns.inode_count()
    dropped = ns.apply(DeleteOp("/a", T + 9))
    assert sorted(dropped) == sorted((B1.block_id, B2.block_id, B3.block_id))
    assert not ns.exists("/a") and not ns.exists("/a/b/g")
    assert ns.inode_count() == count - 4
    assert ns.files_under_construction() == []
    assert ns.stat("/").mtime_ms == T + 9
    # the freed name is usable again, and a new dir id never collides with the old map
    mkdir(ns, "/a")
    assert ns.list_dir("/a") == ([], 0)


def test_delete_file_updates_parent(ns: Namespace) -> None:
    assert ns.apply(DeleteOp("/a/f", T + 4)) == (B1.block_id, B2.block_id)
    assert ns.stat("/a").mtime_ms == T + 4
    assert ns.stat("/a").children == 1


def test_rename_file_across_dirs(ns: Namespace) -> None:
    inode = ns.stat("/a/f")
    assert ns.apply(RenameOp("/a/f", "/tmp/f2", T + 30)) == ()
    moved = ns.stat("/tmp/f2")
    assert (moved.inode_id, moved.mtime_ms, moved.length) == (
        inode.inode_id, inode.mtime_ms, inode.length)
    assert not ns.exists("/a/f")
    assert ns.stat("/a").mtime_ms == T + 30 and ns.stat("/tmp").mtime_ms == T + 30


def test_rename_dir_keeps_subtree_and_leases(ns: Namespace) -> None:
    before = {p: ns.stat(p).inode_id for p in ns.subtree_paths("/a")}
    ns.apply(RenameOp("/a", "/tmp/moved", T + 31))
    after = {p: ns.stat(p).inode_id for p in ns.subtree_paths("/tmp/moved")}
    assert after == {p.replace("/a", "/tmp/moved", 1): i for p, i in before.items()}
    assert ns.files_under_construction() == [("/tmp/moved/b/g", "c1")]
    assert ns.get_blocks("/tmp/moved/f") == (B1, B2)


def test_rename_within_same_dir_and_onto_itself(ns: Namespace) -> None:
    ns.apply(RenameOp("/a/f", "/a/e", T + 2))
    assert [s.path for s in ns.list_dir("/a")[0]] == ["/a/b", "/a/e"]
    before = ns.canonical_dump()
    assert ns.apply(RenameOp("/a/e", "/a/e/", T + 99)) == ()
    assert ns.canonical_dump() == before


def test_set_permission_owner_replication_times(ns: Namespace) -> None:
    ns.apply(SetPermissionOp("/a", 0o101777))
    assert ns.stat("/a").mode == 0o1777
    ns.apply(SetOwnerOp("/a", "bob", ""))
    assert (ns.stat("/a").owner, ns.stat("/a").group) == ("bob", "users")
    ns.apply(SetOwnerOp("/a", "", "staff"))
    assert (ns.stat("/a").owner, ns.stat("/a").group) == ("bob", "staff")
    ns.apply(SetReplicationOp("/a/f", 5))
    assert ns.stat("/a/f").replication == 5
    ns.apply(SetTimesOp("/a/f", -1, 123))
    assert (ns.stat("/a/f").mtime_ms, ns.stat("/a/f").atime_ms) == (T + 10, 123)
    ns.apply(SetTimesOp("/a", 456, -1))
    assert ns.stat("/a").mtime_ms == 456


def test_reassign_lease(ns: Namespace) -> None:
    ns.apply(ReassignLeaseOp("/a/b/g", "recovery"))
    assert ns.lease_holder("/a/b/g") == "recovery"
    assert ns.files_under_construction() == [("/a/b/g", "recovery")]


def test_users_and_token_keys(ns: Namespace) -> None:
    ns.apply(AddUserOp("alice", b"h2", b"s2", ("users", "admins"), T + 1))  # replace
    assert ns.users["alice"].groups == ("users", "admins")
    assert ns.groups_of("alice") == frozenset({"users", "admins"})
    ns.apply(SetPasswordOp("alice", b"h3", b"s3"))  # an older namespace's scrypt hash:
    record = ns.users["alice"]  # converted to SCRAM credentials of it as it is applied
    assert (record.password_hash, record.salt, record.created_ms) == (b"", b"s3", T + 1)
    made = passwords.credentials_of_hash(b"h3", b"s3")
    assert (record.stored_key, record.server_key, record.iterations) == (
        made.stored_key, made.server_key, made.iterations)
    ns.apply(RemoveUserOp("alice"))
    assert "alice" not in ns.users and ns.groups_of("alice") == frozenset()
    assert [u.name for u in ns.user_records()] == ["bob", "carol"]
    ns.apply(AddTokenKeyOp(3, b"k3", T))
    assert [k.key_id for k in ns.token_key_records()] == [3, 7]
    ns.apply(RemoveTokenKeyOp(7))
    assert list(ns.token_keys) == [3]


def test_superuser_and_supergroup(ns: Namespace) -> None:
    assert ns.is_superuser(SUPER)
    assert ns.groups_of(SUPER) == frozenset({"supergroup"})
    assert not ns.is_superuser("bob")
    ns.apply(AddUserOp("bob", b"h", b"s", ("staff", "supergroup"), T))
    assert ns.is_superuser("bob")
    assert not ns.is_superuser("nobody") and ns.groups_of("nobody") == frozenset()


def test_replayed_ops_bump_counters() -> None:
    ns = Namespace(SUPER)
    ns.apply(MkdirOp("/d", 900, 0o755, "u", "g", T))
    ns.apply(AddFileOp("/d/f", 50, 0o644, "u", "g", T, 1, 1, "c"))  # lower id: no change
    assert ns.next_inode_id == 901
    ns.apply(AddBlockOp("/d/f", BlockRecord(2**40, 5, 0)))
    assert (ns.next_block_id, ns.next_genstamp) == (2**40 + 1, FIRST_GENSTAMP)
    ns.apply(UpdateBlocksOp("/d/f", (BlockRecord(2**40, 3000, 1),)))
    assert ns.next_genstamp == 3001
    ns.apply(CloseFileOp("/d/f", T, T, (BlockRecord(2**41, 3000, 1),)))
    assert ns.next_block_id == 2**41 + 1
    assert ns.allocate_inode_id() == 901


# --- queries ---------------------------------------------------------------------------------


def test_exists_is_dir_stat(ns: Namespace) -> None:
    assert ns.exists("/") and ns.exists("/a/") and ns.exists("/a/b/g")
    assert not ns.exists("/a/f/x") and not ns.exists("/zz")
    assert ns.is_dir("/a") and not ns.is_dir("/a/f")
    with pytest.raises(NotFound):
        ns.is_dir("/zz")
    with pytest.raises(NotFound):
        ns.stat("/a/f/x")
    with pytest.raises(InvalidPath):
        ns.exists("a")
    status = ns.stat("/a/f")
    assert (status.length, status.replication, status.children) == (150, 2, 0)
    assert ns.stat("/a").children == 2
    assert ns.stat("/").path == "/"


def test_list_dir_basics(ns: Namespace) -> None:
    entries, remaining = ns.list_dir("/")
    assert [e.path for e in entries] == ["/a", "/tmp"] and remaining == 0
    entries, remaining = ns.list_dir("/a", limit=1)
    assert [e.path for e in entries] == ["/a/b"] and remaining == 1
    entries, remaining = ns.list_dir("/a", start_after="b")
    assert [e.path for e in entries] == ["/a/f"] and remaining == 0
    assert ns.list_dir("/a", start_after="zzz") == ([], 0)
    # a file lists itself
    entries, remaining = ns.list_dir("/a/f")
    assert [e.path for e in entries] == ["/a/f"] and remaining == 0
    assert ns.list_dir("/a/f", start_after="f") == ([], 0)
    with pytest.raises(InvalidArgument):
        ns.list_dir("/a", limit=0)
    with pytest.raises(NotFound):
        ns.list_dir("/zz")


@pytest.mark.parametrize("patch_max", [namespace.SORTED_PATCH_MAX, 0])
def test_list_dir_paging_10k_entries_while_changing(
    monkeypatch: pytest.MonkeyPatch, patch_max: int
) -> None:
    # patch_max 0: every out-of-order change drops the sorted-name cache instead of patching
    monkeypatch.setattr(namespace, "SORTED_PATCH_MAX", patch_max)
    ns = Namespace(SUPER)
    mkdir(ns, "/big")
    names = [f"f{(i * 7919) % 10_000:05d}" for i in range(10_000)]  # not created in order
    for name in names:
        create(ns, f"/big/{name}")
    seen: list[str] = []
    after = ""
    while True:
        page, remaining = ns.list_dir("/big", after, 333)
        seen += [entry.path.rsplit("/", 1)[1] for entry in page]
        assert remaining == 10_000 - len(seen)
        if not remaining:
            break
        after = seen[-1]
    assert seen == sorted(names) and len(set(seen)) == 10_000
    # changes between pages keep the cached order right (append, middle insert, delete)
    create(ns, "/big/zzz")
    create(ns, "/big/f00000a")
    ns.apply(DeleteOp("/big/f00001", T))
    ns.apply(RenameOp("/big/f00002", "/big/a-first", T))
    page, remaining = ns.list_dir("/big", "", 4)
    assert [e.path for e in page] == ["/big/a-first", "/big/f00000", "/big/f00000a",
                                      "/big/f00003"]
    assert remaining == 10_001 - 4
    assert ns.list_dir("/big", "f09999", 10)[0][0].path == "/big/zzz"


def test_get_blocks(ns: Namespace) -> None:
    assert ns.get_blocks("/a/f") == (B1, B2)
    with pytest.raises(IsADirectory):
        ns.get_blocks("/a")
    with pytest.raises(NotFound):
        ns.get_blocks("/nope")


def test_content_summary(ns: Namespace) -> None:
    ns.apply(SetReplicationOp("/a/b/g", 3))
    assert ns.content_summary("/a") == ContentSummary(157, 2, 2, 150 * 2 + 7 * 3)
    assert ns.content_summary("/a/f") == ContentSummary(150, 1, 0, 300)
    assert ns.content_summary("/tmp") == ContentSummary(0, 0, 1, 0)
    assert ns.content_summary("/").directory_count == 4


def test_lease_holder_and_files_under_construction(ns: Namespace) -> None:
    assert ns.lease_holder("/a/b/g") == "c1"
    assert ns.lease_holder("/a/f") == "" and ns.lease_holder("/a") == ""
    create(ns, "/tmp/x", client="c2")
    assert ns.files_under_construction() == [("/a/b/g", "c1"), ("/tmp/x", "c2")]


def test_missing_ancestors(ns: Namespace) -> None:
    assert ns.missing_ancestors("/a/b") == []
    assert ns.missing_ancestors("/a/b/x/y") == ["/a/b/x", "/a/b/x/y"]
    assert ns.missing_ancestors("/n") == ["/n"]
    assert ns.missing_ancestors("/") == []
    with pytest.raises(NotADirectory):
        ns.missing_ancestors("/a/f/x/y")
    with pytest.raises(AlreadyExists):
        ns.missing_ancestors("/a/f")


def test_rename_target(ns: Namespace) -> None:
    assert ns.rename_target("/a/f", "/tmp").path == "/tmp/f"
    assert ns.rename_target("/a/f", "/tmp/").path == "/tmp/f"
    assert ns.rename_target("/a/f", "/tmp/new").path == "/tmp/new"
    assert ns.rename_target("/a/b", "/a/f").path == "/a/f"  # existing file: onto it
    assert ns.rename_target("/a/f", "/").path == "/f"


def test_inode_count_and_subtree_paths(ns: Namespace) -> None:
    assert ns.inode_count() == 6
    assert list(ns.subtree_paths("/")) == ["/", "/a", "/a/b", "/a/b/g", "/a/f", "/tmp"]
    assert list(ns.subtree_paths("/a/f")) == ["/a/f"]
    with pytest.raises(NotFound):
        ns.subtree_paths("/nope")  # eagerly, not at the first next()


def test_deep_tree_beyond_recursion_limit() -> None:
    ns = Namespace(SUPER)
    path = ""
    for _ in range(1000):
        path += "/d"
        mkdir(ns, path)
    assert len(list(ns.subtree_paths("/"))) == 1001
    assert ns.content_summary("/").directory_count == 1001
    copy = _round_trip(ns)
    assert copy.canonical_dump() == ns.canonical_dump()
    assert len(ns.apply(DeleteOp("/d", T))) == 0
    assert ns.inode_count() == 1


# --- permissions -----------------------------------------------------------------------------


@pytest.fixture
def perms(ns: Namespace) -> Namespace:
    """/p alice:users 750 holding o (alice 640), /tmp/alice-file, /tmp/bob-file."""
    mkdir(ns, "/p", mode=0o750)
    write_file(ns, "/p/o", mode=0o640)
    mkdir(ns, "/p/sub", mode=0o700)
    mkdir(ns, "/p/sub/deep", mode=0o500)
    write_file(ns, "/tmp/alice-file", owner="alice")
    write_file(ns, "/tmp/bob-file", owner="bob", group="staff")
    return ns


@pytest.mark.parametrize(
    ("user", "path", "kwargs", "allowed"),
    [
        # class selection: owner, then group, then other
        ("alice", "/p/o", {"access": 6}, True),
        ("carol", "/p/o", {"access": 4}, True),  # group users: r--
        ("carol", "/p/o", {"access": 2}, False),
        ("bob", "/p/o", {"access": 4}, False),  # other on /p is ---: traverse fails
        ("bob", "/a/f", {"access": 4}, True),  # other r--
        ("bob", "/a/f", {"access": 2}, False),
        # traverse: every existing ancestor directory needs x, also for missing paths
        ("bob", "/p/missing", {}, False),
        ("carol", "/p/sub/deep", {}, False),  # /p/sub is 700 alice
        ("alice", "/p/sub/deep/x", {}, True),
        # parent, ancestor
        ("carol", "/p/new", {"parent_access": 2}, False),
        ("alice", "/p/new", {"parent_access": 3}, True),
        ("alice", "/p/x/y/z", {"ancestor_access": 3}, True),
        ("carol", "/p/x/y/z", {"ancestor_access": 3}, False),
        ("bob", "/tmp/x/y", {"ancestor_access": 3}, True),  # /tmp is 1777
        # subtree: /p/sub/deep is r-x even for its owner
        ("alice", "/p", {"sub_access": 7}, False),
        ("alice", "/p/sub", {"sub_access": 5}, True),
        ("alice", "/p/o", {"sub_access": 7}, True),  # a file has no subtree to check
        # owner
        ("alice", "/p/o", {"owner": True}, True),
        ("carol", "/p/o", {"owner": True}, False),
        # sticky bit on /tmp: owner of the entry or of /tmp only
        ("alice", "/tmp/alice-file", {"parent_owner_sticky": True, "parent_access": 3}, True),
        ("alice", "/tmp/bob-file", {"parent_owner_sticky": True, "parent_access": 3}, False),
        ("bob", "/tmp/bob-file", {"parent_owner_sticky": True}, True),
        ("alice", "/a/b", {"parent_owner_sticky": True}, True),  # /a is not sticky
        ("alice", "/tmp/absent", {"parent_owner_sticky": True}, True),
        # the superuser and supergroup members pass everything
        (SUPER, "/p/sub/deep", {"access": 7, "sub_access": 7, "owner": True}, True),
    ],
)
def test_check_access(perms: Namespace, user: str, path: str, kwargs: dict[str, object],
                      allowed: bool) -> None:
    def check() -> None:
        perms.check_access(user, path, **kwargs)  # type: ignore[arg-type]

    if allowed:
        check()
    else:
        with pytest.raises(AccessDenied):
            check()


def test_supergroup_member_passes(perms: Namespace) -> None:
    with pytest.raises(AccessDenied):
        perms.check_access("bob", "/p/o", access=7)
    perms.apply(AddUserOp("bob", b"h", b"s", ("supergroup",), T))
    perms.check_access("bob", "/p/o", access=7, owner=True)


def test_a_users_new_groups_reach_the_next_check(perms: Namespace) -> None:
    # groups_of keeps each user's set with the record it was made from: every change of
    # the user (a new record) must be seen by the very next check
    perms.apply(AddUserOp("bob", b"h", b"s", ("supergroup",), T))
    perms.check_access("bob", "/p/o", access=7)
    perms.apply(AddUserOp("bob", b"h", b"s", ("staff",), T + 1))  # replaced: no supergroup
    with pytest.raises(AccessDenied):
        perms.check_access("bob", "/p/o", access=7)
    perms.apply(AddUserOp("bob", b"h", b"s", ("supergroup",), T + 2))
    perms.check_access("bob", "/p/o", access=7)
    perms.apply(RemoveUserOp("bob"))
    with pytest.raises(AccessDenied):
        perms.check_access("bob", "/p/o", access=7)
    assert perms.groups_of("bob") == frozenset()


def test_first_matching_class_decides(perms: Namespace) -> None:
    perms.apply(SetPermissionOp("/p/o", 0o047))  # owner ---, group r--, other rwx
    with pytest.raises(AccessDenied):
        perms.check_access("alice", "/p/o", access=4)
    with pytest.raises(AccessDenied):
        perms.check_access("carol", "/p/o", access=2)


@pytest.mark.parametrize(("mode", "searchers"), [
    (0o755, {"alice", "bob", "carol"}),  # every class may search: decided by the mode alone
    (0o011, {"bob", "carol"}),  # the owner's class has no x, though the others do
    (0o101, {"alice", "bob"}),  # the group's member is refused, though others may search
    (0o110, {"alice", "carol"}),
])
def test_traverse_uses_the_first_matching_class(
    perms: Namespace, mode: int, searchers: set[str]
) -> None:
    perms.apply(SetPermissionOp("/p", mode))  # owner alice, carol in its group, bob other
    for user in ("alice", "bob", "carol"):
        if user in searchers:
            perms.check_access(user, "/p/o")
        else:
            with pytest.raises(AccessDenied):
                perms.check_access(user, "/p/o")


def test_denial_messages(perms: Namespace) -> None:
    with pytest.raises(AccessDenied) as info:
        perms.check_access("carol", "/p/new", parent_access=2)
    assert str(info.value) == (
        'Permission denied: user=carol, access=WRITE, inode="/p":alice:users:drwxr-x---')
    with pytest.raises(AccessDenied) as info:
        perms.check_access("bob", "/p/o", access=4)
    assert str(info.value) == (
        'Permission denied: user=bob, access=EXECUTE, inode="/p":alice:users:drwxr-x---')
    with pytest.raises(AccessDenied) as info:
        perms.check_access("alice", "/p", sub_access=7)
    assert 'access=ALL, inode="/p/sub/deep":alice:users:dr-x------' in str(info.value)
    with pytest.raises(AccessDenied) as info:
        perms.check_access("alice", "/tmp/bob-file", parent_owner_sticky=True)
    assert str(info.value) == (
        "Permission denied by sticky bit: user=alice, "
        'path="/tmp/bob-file":bob:staff:-rw-r--r--, parent="/tmp":hdfs:supergroup:drwxrwxrwt')
    with pytest.raises(AccessDenied) as info:
        perms.check_access("carol", "/p/o", owner=True)
    assert "carol is not the owner" in str(info.value)


def test_check_access_missing_inodes_and_bad_arguments(perms: Namespace) -> None:
    with pytest.raises(NotFound):
        perms.check_access("alice", "/p/x/y", parent_access=2)
    with pytest.raises(NotADirectory):
        perms.check_access("alice", "/p/o/y", parent_access=2)
    with pytest.raises(NotFound):
        perms.check_access("alice", "/p/none", owner=True)
    perms.check_access("alice", "/p/none", access=7)  # skipped: the path does not exist
    with pytest.raises(InvalidArgument):
        perms.check_access("alice", "/p", access=8)
    with pytest.raises(InvalidPath):
        perms.check_access(SUPER, "p")


@pytest.mark.parametrize(
    ("mode", "is_dir", "text"),
    [(0o755, True, "drwxr-xr-x"), (0o644, False, "-rw-r--r--"), (0o1777, True, "drwxrwxrwt"),
     (0o1770, True, "drwxrwx--T"), (0o4000, False, "----------")],
)
def test_mode_string(mode: int, is_dir: bool, text: str) -> None:
    assert mode_string(mode, is_dir=is_dir) == text


# --- images and equality ---------------------------------------------------------------------


def _header(ns: Namespace) -> ImageHeader:
    return ImageHeader(
        LAYOUT_VERSION, 1, "cid", 0, ns.next_inode_id, ns.next_block_id, ns.next_genstamp,
        ns.inode_count(), len(ns.users), len(ns.token_keys), ns.superuser, ns.supergroup,
    )


def _round_trip(ns: Namespace) -> Namespace:
    return Namespace.from_image(
        _header(ns), list(ns.iter_inode_records()), ns.user_records(), ns.token_key_records()
    )


def test_image_round_trip(ns: Namespace) -> None:
    ns.apply(SetTimesOp("/a", 5, 6))
    records = list(ns.iter_inode_records())
    assert records[0] == InodeRecord(1, 0, "", True, 0o755, SUPER, "supergroup", T, T)
    assert len(records) == ns.inode_count()
    seen = {records[0].inode_id}
    for record in records[1:]:
        assert record.parent_id in seen  # parents first
        seen.add(record.inode_id)
    copy = _round_trip(ns)
    assert copy.canonical_dump() == ns.canonical_dump()
    assert copy.lease_holder("/a/b/g") == "c1"
    # the copy is fully functional: it keeps working like the original
    for target in (ns, copy):
        target.apply(ReassignLeaseOp("/a/b/g", "c2"))
        target.apply(RenameOp("/a/b", "/tmp/b", T))
        mkdir(target, "/tmp/b/z")
    assert copy.canonical_dump() == ns.canonical_dump()


def test_dump_sees_every_attribute(ns: Namespace) -> None:
    other = _round_trip(ns)
    other.apply(SetTimesOp("/a/f", -1, 1))
    assert other.canonical_dump() != ns.canonical_dump()
    other = _round_trip(ns)
    other.allocate_genstamp()
    assert other.canonical_dump() != ns.canonical_dump()
    other = _round_trip(ns)
    other.apply(ReassignLeaseOp("/a/b/g", "c2"))
    assert other.canonical_dump() != ns.canonical_dump()


def _corrupt_records(ns: Namespace) -> list[tuple[str, ImageHeader, list[InodeRecord]]]:
    good = list(ns.iter_inode_records())
    header = _header(ns)
    orphan = InodeRecord(999, 12345, "x", False, 0o644, "u", "g", 0, 0)
    clash = InodeRecord(998, 1, "a", True, 0o755, "u", "g", 0, 0)
    big_id = InodeRecord(ns.next_inode_id, 1, "new", True, 0o755, "u", "g", 0, 0)
    bad_header = ImageHeader(*[getattr(header, f) for f in header.__struct_fields__])
    bad_header.inode_count += 1
    return [
        ("empty", header, []),
        ("no root first", header, good[1:]),
        ("orphan", header, [*good, orphan]),
        ("duplicate name", header, [*good, clash]),
        ("id beyond counter", header, [*good, big_id]),
        ("count", bad_header, good),
    ]


def test_from_image_refuses_corrupt_records(ns: Namespace) -> None:
    for label, header, records in _corrupt_records(ns):
        with pytest.raises(StorageError, match="corrupt image"):
            Namespace.from_image(header, records, ns.user_records(), ns.token_key_records())
        assert label
