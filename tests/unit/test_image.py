"""fsimage save/load/stream, md5 verification, and ``oiv`` (dump_image).

``FakeNamespace`` (a dict of InodeRecords) stands in for the real namespace here and in
test_recovery / test_editlog_* so the durability engine is tested on its own.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import cast

import pytest

from xdfs.common.images import md5_name
from xdfs.common.modes import permission_string
from xdfs.errors import AlreadyExists, InvalidArgument, NotFound, StorageError
from xdfs.namenode.image import fsimage as image_mod
from xdfs.namenode.image.fsimage import (
    IMAGE_MAGIC,
    ImageReader,
    iter_image,
    load_image,
    read_image_header,
    save_image,
    write_image_files,
)
from xdfs.namenode.image.recovery import save_checkpoint
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    AddFileOp,
    AddTokenKeyOp,
    AddUserOp,
    DeleteOp,
    ImageHeader,
    InodeRecord,
    MkdirOp,
    Op,
    TokenKeyRecord,
    UserRecord,
)
from xdfs.namenode.tools import dump_image, image_summary, iter_inode_paths
from xdfs.protocol.blocks import BlockRecord


class FakeNamespace:
    """A dict-based namespace: mkdir, add_file, delete (leaf), users, token keys."""

    def __init__(self, superuser: str = "hdfs", supergroup: str = "supergroup") -> None:
        self.superuser = superuser
        self.supergroup = supergroup
        self.next_inode_id = 2
        self.next_block_id = 1 << 30
        self.next_genstamp = 1000
        self.epoch = 1
        self.next_generation = 1
        self.datanode_secret = b""
        self.inodes: dict[int, InodeRecord] = {1: InodeRecord(1, 0, "", True, 0o755, "hdfs",
                                                              "supergroup", 0, 0)}
        self.paths: dict[str, int] = {"/": 1}
        self.users: dict[str, UserRecord] = {}
        self.keys: dict[int, TokenKeyRecord] = {}
        self.applied = 0

    def _parent(self, path: str) -> tuple[int, str]:
        head, _, name = path.rpartition("/")
        parent = self.paths.get(head or "/")
        if parent is None or not self.inodes[parent].is_dir:
            raise NotFound(f"parent of {path}")
        if path in self.paths:
            raise AlreadyExists(path)
        return parent, name

    def apply(self, op: Op) -> tuple[int, ...]:
        self.applied += 1
        if isinstance(op, MkdirOp | AddFileOp):
            parent, name = self._parent(op.path)
            if isinstance(op, MkdirOp):
                rec = InodeRecord(op.inode_id, parent, name, True, op.mode, op.owner, op.group,
                                  op.mtime_ms, op.mtime_ms)
            else:
                rec = InodeRecord(op.inode_id, parent, name, False, op.mode, op.owner,
                                  op.group, op.mtime_ms, op.mtime_ms, op.replication,
                                  op.block_size, (), op.client)
            self.inodes[op.inode_id] = rec
            self.paths[op.path] = op.inode_id
            self.next_inode_id = max(self.next_inode_id, op.inode_id + 1)
        elif isinstance(op, DeleteOp):
            inode_id = self.paths.pop(op.path, None)
            if inode_id is None:
                raise NotFound(op.path)
            del self.inodes[inode_id]
        elif isinstance(op, AddUserOp):
            self.users[op.name] = UserRecord(op.name, op.password_hash, op.salt, op.groups,
                                             op.created_ms)
        elif isinstance(op, AddTokenKeyOp):
            self.keys[op.key_id] = TokenKeyRecord(op.key_id, op.secret, op.expires_ms)
        else:
            raise InvalidArgument(f"fake namespace cannot apply {op.NAME}")
        return ()

    def inode_count(self) -> int:
        return len(self.inodes)

    def iter_inode_records(self) -> Iterator[InodeRecord]:
        return (self.inodes[i] for i in sorted(self.inodes))  # ids grow: parents first

    def user_records(self) -> list[UserRecord]:
        return [self.users[n] for n in sorted(self.users)]

    def token_key_records(self) -> list[TokenKeyRecord]:
        return [self.keys[k] for k in sorted(self.keys)]

    @classmethod
    def from_image(
        cls,
        header: ImageHeader,
        inodes: Iterable[InodeRecord],
        users: Iterable[UserRecord],
        token_keys: Iterable[TokenKeyRecord],
    ) -> FakeNamespace:
        ns = cls(header.superuser, header.supergroup)
        ns.inodes = {}
        ns.paths = {}
        for rec in inodes:
            ns.inodes[rec.inode_id] = rec
            if rec.parent_id == 0:
                ns.paths["/"] = rec.inode_id
        # rebuild paths
        by_id = {v: k for k, v in ns.paths.items()}
        for rec in sorted(ns.inodes.values(), key=lambda r: r.inode_id):
            if rec.parent_id:
                parent = by_id[rec.parent_id]
                path = (parent if parent != "/" else "") + "/" + rec.name
                ns.paths[path] = rec.inode_id
                by_id[rec.inode_id] = path
        if len(ns.inodes) != header.inode_count:
            raise StorageError("inode count differs")
        ns.users = {u.name: u for u in users}
        ns.keys = {k.key_id: k for k in token_keys}
        ns.next_inode_id = header.next_inode_id
        ns.next_block_id = header.next_block_id
        ns.next_genstamp = header.next_genstamp
        return ns

    def canonical_dump(self) -> list[object]:
        return [self.next_inode_id, self.next_block_id, self.next_genstamp,
                sorted(self.paths.items()), [self.inodes[i] for i in sorted(self.inodes)],
                self.user_records(), self.token_key_records()]

    # helpers for tests
    def mkdir_op(self, path: str) -> MkdirOp:
        op = MkdirOp(path, self.next_inode_id, 0o755, "alice", "staff", 1_000)
        return op

    def file_op(self, path: str) -> AddFileOp:
        return AddFileOp(path, self.next_inode_id, 0o644, "alice", "staff", 2_000, 3,
                         1 << 20, "client-1")


def populated(dirs: int = 10, files_per_dir: int = 50, users: int = 3) -> FakeNamespace:
    ns = FakeNamespace()
    for d in range(dirs):
        ns.apply(ns.mkdir_op(f"/d{d}"))
        for f in range(files_per_dir):
            ns.apply(ns.file_op(f"/d{d}/f{f}"))
    sub = ns.mkdir_op("/d0/sub")
    ns.apply(sub)
    ns.apply(ns.file_op("/d0/sub/deep"))
    # give one file blocks, done directly on the record
    inode_id = ns.paths["/d0/sub/deep"]
    old = ns.inodes[inode_id]
    ns.inodes[inode_id] = InodeRecord(
        old.inode_id, old.parent_id, old.name, False, old.mode, old.owner, old.group,
        old.mtime_ms, old.atime_ms, 3, 1 << 20,
        (BlockRecord(1 << 30, 1000, 1 << 20), BlockRecord((1 << 30) + 1, 1001, 5)), "",
    )
    for u in range(users):
        ns.apply(AddUserOp(f"user{u}", b"hash%d" % u, b"salt", ("staff",), 5))
    ns.apply(AddTokenKeyOp(7, b"secret", 99))
    return ns


def make_header(ns: FakeNamespace, txid: int = 0) -> ImageHeader:
    return ImageHeader(LAYOUT_VERSION, 42, "CID-test", txid, ns.next_inode_id,
                       ns.next_block_id, ns.next_genstamp, ns.inode_count(),
                       len(ns.users), len(ns.keys), ns.superuser, ns.supergroup)


@pytest.fixture
def sd(tmp_path: Path) -> Iterator[StorageDirectory]:
    d = StorageDirectory(tmp_path / "name")
    d.format("CID-test", 42, 1)
    yield d
    d.unlock()


def test_round_trip_many_frames(sd: StorageDirectory) -> None:
    ns = populated(dirs=20, files_per_dir=500)  # > 4096 inodes: several frames
    assert ns.inode_count() > 2 * image_mod.INODES_PER_FRAME
    paths = save_checkpoint([sd], ns, 17)
    assert paths == [sd.current / "fsimage_0000000000000000017"]
    assert not list(sd.current.glob("fsimage.ckpt_*"))
    header, loaded = load_image(paths[0], FakeNamespace.from_image)
    assert header.txid == 17 and header.namespace_id == 42 and header.cluster_id == "CID-test"
    assert loaded.canonical_dump() == ns.canonical_dump()
    assert sd.read_seen_txid() == 17


def test_md5_file_is_hdfs_format(sd: StorageDirectory) -> None:
    ns = populated(dirs=2, files_per_dir=3)
    [path] = save_checkpoint([sd], ns, 5)
    text = (sd.current / md5_name(5)).read_text()
    digest = hashlib.md5(path.read_bytes()).hexdigest()
    assert text == f"{digest}  fsimage_0000000000000000005\n"
    assert path.read_bytes().startswith(IMAGE_MAGIC)


def test_iter_image_streams_header_then_records(sd: StorageDirectory) -> None:
    ns = populated(dirs=3, files_per_dir=4, users=2)
    [path] = save_checkpoint([sd], ns, 9)
    items = list(iter_image(path))
    assert isinstance(items[0], ImageHeader) and items[0].inode_count == ns.inode_count()
    inodes = [i for i in items if isinstance(i, InodeRecord)]
    assert inodes == list(ns.iter_inode_records())
    assert [i for i in items if isinstance(i, UserRecord)] == ns.user_records()
    assert [i for i in items if isinstance(i, TokenKeyRecord)] == ns.token_key_records()
    assert read_image_header(path) == items[0]


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("verify", ["streaming", "before"])
def test_bad_md5_is_refused(sd: StorageDirectory, verify: image_mod.Verify) -> None:
    ns = populated(dirs=3, files_per_dir=40)
    [path] = save_checkpoint([sd], ns, 3)
    # flip a byte inside a string so the file still decodes: only the md5 can tell
    data = path.read_bytes()
    offset = data.index(b"alice", 200) + 1
    _flip(path, offset)
    with pytest.raises(StorageError, match="md5"):
        load_image(path, FakeNamespace.from_image, verify=verify)
    with pytest.raises(StorageError, match="md5"):
        list(iter_image(path, verify=verify))
    # without verification it loads (and the difference is visible)
    _, loaded = load_image(path, FakeNamespace.from_image, verify="none")
    assert loaded.canonical_dump() != ns.canonical_dump()


def test_missing_md5_file_is_refused(sd: StorageDirectory) -> None:
    [path] = save_checkpoint([sd], populated(2, 2), 3)
    (sd.current / md5_name(3)).unlink()
    with pytest.raises(StorageError, match=r"\.md5 is missing"):
        load_image(path, FakeNamespace.from_image)
    assert sd.images() == []  # an image without md5 is not a candidate


def test_truncated_image_names_file_and_offset(sd: StorageDirectory) -> None:
    [path] = save_checkpoint([sd], populated(3, 30), 3)
    size = path.stat().st_size
    os.truncate(path, size - 10)
    with pytest.raises(StorageError, match=r"fsimage_0+3 at byte offset \d+") as info:
        load_image(path, FakeNamespace.from_image, verify="none")
    assert "corrupt image" in str(info.value)


def test_trailing_garbage_is_refused(sd: StorageDirectory) -> None:
    [path] = save_checkpoint([sd], populated(2, 2), 3)
    with open(path, "ab") as f:
        f.write(b"\0\0\0\0")
    with pytest.raises(StorageError, match=r"unexpected bytes|impossible|frame"):
        load_image(path, FakeNamespace.from_image, verify="none")


def test_build_that_stops_early_still_verifies_everything(sd: StorageDirectory) -> None:
    [path] = save_checkpoint([sd], populated(5, 100), 3)

    def first_only(header: ImageHeader, inodes: Iterator[InodeRecord], users: object,
                   keys: object) -> InodeRecord:
        return next(inodes)

    _, first = load_image(path, first_only)
    assert first.inode_id == 1
    data = path.read_bytes()
    _flip(path, data.index(b"f99", 100) + 1)
    with pytest.raises(StorageError, match="md5"):
        load_image(path, first_only)


def test_save_to_several_dirs_and_skip_existing(tmp_path: Path) -> None:
    dirs = [StorageDirectory(tmp_path / f"n{i}") for i in range(2)]
    for d in dirs:
        d.format("CID-test", 42, 1)
    ns = populated(2, 5)
    paths = save_checkpoint(dirs, ns, 8)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert all(d.images() == [8] for d in dirs)
    mtime = paths[0].stat().st_mtime_ns
    time.sleep(0.01)
    save_checkpoint(dirs, ns, 8)  # already there: left alone
    assert paths[0].stat().st_mtime_ns == mtime
    for d in dirs:
        d.unlock()


def test_count_mismatch_aborts_and_removes_ckpt(sd: StorageDirectory) -> None:
    ns = populated(2, 5)
    header = make_header(ns, 4)
    bad = ImageHeader(*[getattr(header, f) for f in header.__struct_fields__])
    bad.inode_count += 1
    with pytest.raises(StorageError, match="changed while it was being saved"):
        save_image([sd], bad, ns)
    assert not list(sd.current.glob("fsimage*"))


def test_write_image_files_small_frames(tmp_path: Path) -> None:
    ns = populated(2, 10)
    path = tmp_path / "img"
    digest = write_image_files([path], make_header(ns), ns.iter_inode_records(),
                               ns.user_records(), ns.token_key_records(), inodes_per_frame=3)
    (tmp_path / "img.md5").write_text(f"{digest}  img\n")
    with ImageReader(path) as reader:
        header = reader.read_header()
        batches = list(reader.read_batches(image_mod._INODES_DECODER, header.inode_count,
                                           "inodes"))
        assert max(len(b) for b in batches) == 3
    _, loaded = load_image(path, FakeNamespace.from_image)
    assert loaded.canonical_dump() == ns.canonical_dump()


def test_dump_image_paths_and_columns(sd: StorageDirectory) -> None:
    ns = populated(2, 2)
    [path] = save_checkpoint([sd], ns, 3)
    rows = list(dump_image(path, blocks=True))
    by_path = {r["path"]: r for r in rows}
    assert len(rows) == ns.inode_count()
    assert set(by_path) == set(ns.paths)
    assert by_path["/"]["type"] == "dir" and by_path["/"]["permission"] == "drwxr-xr-x"
    deep = by_path["/d0/sub/deep"]
    assert deep["type"] == "file" and deep["blocks_count"] == 2
    assert deep["file_size"] == (1 << 20) + 5 and deep["permission"] == "-rw-r--r--"
    assert deep["blocks"] == [{"block_id": 1 << 30, "genstamp": 1000, "bytes": 1 << 20},
                              {"block_id": (1 << 30) + 1, "genstamp": 1001, "bytes": 5}]
    assert by_path["/d1/f1"]["under_construction"] == "client-1"
    summary = image_summary(path)
    assert summary["txid"] == 3 and summary["dirs"] == 4 and summary["files"] == 5
    assert summary["bytes"] == (1 << 20) + 5


def test_dump_image_keeps_only_directories_in_memory(sd: StorageDirectory) -> None:
    """Paths are computed streaming: the map holds directories, never files."""
    ns = populated(3, 200)
    [path] = save_checkpoint([sd], ns, 3)
    seen_maps: list[int] = []
    gen = cast(Generator[tuple[str, str, object], None, None], iter_inode_paths(path))
    for full, _parent, _record in gen:
        seen_maps.append(len(inspect.getgeneratorlocals(gen)["dir_paths"]))
        assert isinstance(full, str)
    assert max(seen_maps) == 5  # root, d0..d2, d0/sub
    assert len(list(dump_image(path))) == ns.inode_count()  # dump_image streams through it


def test_permission_string_sticky() -> None:
    assert permission_string(True, 0o1777) == "drwxrwxrwt"
    assert permission_string(False, 0o640) == "-rw-r-----"
