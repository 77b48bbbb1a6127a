"""Random op sequences against a deliberately simple model of the namespace.

The model is a dict ``path -> Entry``; it predicts for every op either the typed error or
the new state. After every step the namespace's observable state (exists, stat, list_dir,
leases) must equal the model's, a refused op must have changed nothing, replaying the
accepted ops into a fresh namespace must give an equal canonical dump, and so must an image
round trip.
"""

from __future__ import annotations

import dataclasses
import itertools

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from xdfs.errors import (
    AlreadyExists,
    InvalidArgument,
    IsADirectory,
    LeaseError,
    NotADirectory,
    NotFound,
    XdfsError,
)
from xdfs.namenode.namespace.ops import (
    LAYOUT_VERSION,
    AddBlockOp,
    AddFileOp,
    CloseFileOp,
    DeleteOp,
    ImageHeader,
    MkdirOp,
    Op,
    RenameOp,
    SetPermissionOp,
    SetTimesOp,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.protocol.blocks import BlockRecord

T = 1_700_000_000_000
ROOT_MODE = 0o755
PATHS = ["/" + "/".join(parts) for depth in (1, 2, 3)
         for parts in itertools.product("abc", repeat=depth)]
DEPTH_MAX = 4  # keeps trees small enough to compare in full after every step
modes = st.sampled_from([0o755, 0o700, 0o1777, 0o644, 0o000])


@dataclasses.dataclass
class Entry:
    is_dir: bool
    inode_id: int
    mode: int
    mtime: int
    atime: int
    blocks: tuple[BlockRecord, ...] = ()
    client: str = ""


def parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def below(path: str, ancestor: str) -> bool:
    return path.startswith(ancestor + "/") or (ancestor == "/" and path != "/")


class NamespaceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ns = Namespace("hdfs", root_mtime_ms=T)
        self.model: dict[str, Entry] = {"/": Entry(True, 1, ROOT_MODE, T, T)}
        self.log: list[Op] = []
        self.clock = T
        # ids come from the test, not from ns.allocate_*: a refused op must not move the
        # counters, so replaying only the accepted ops reproduces them exactly.
        self.next_id = 2
        self.next_block = 1 << 30

    # --- model helpers ---------------------------------------------------------------------

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def parent_error(self, path: str) -> type[XdfsError] | None:
        """What walking to ``path``'s parent raises: first missing -> NotFound, first file
        -> NotADirectory (checked top-down, as the namespace does)."""
        parts = path.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            entry = self.model.get("/" + "/".join(parts[:depth]))
            if entry is None:
                return NotFound
            if not entry.is_dir:
                return NotADirectory
        return None

    def expect(self, op: Op, error: type[XdfsError] | None) -> tuple[int, ...]:
        """Apply ``op``; it must fail with exactly ``error`` (changing nothing) or succeed."""
        if error is not None:
            before = self.ns.canonical_dump()
            try:
                self.ns.apply(op)
            except XdfsError as exc:
                assert type(exc) is error, (op, exc, error)
            else:
                raise AssertionError(f"{op} should have raised {error.__name__}")
            assert self.ns.canonical_dump() == before
            return ()
        result = self.ns.apply(op)
        self.log.append(op)
        return result

    def subtree(self, path: str) -> list[str]:
        return [p for p in self.model if p == path or below(p, path)]

    # --- path choice: mostly paths that make the op succeed, sometimes anything -------------

    def pick(self, data: st.DataObject, *pools: list[str]) -> str:
        """A path from one of ``pools`` (state-dependent lists) or from the fixed universe
        (which includes "/" and paths below files and missing dirs)."""
        candidates = [path for pool in pools for path in pool]
        if candidates and data.draw(st.integers(0, 4)) < 4:  # 1 in 5: anything at all
            return data.draw(st.sampled_from(candidates))
        return data.draw(st.sampled_from(["/", *PATHS]))

    def existing(self) -> list[str]:
        return sorted(p for p in self.model if p != "/")  # "/" comes from the universe

    def new_children(self) -> list[str]:
        return sorted(
            f"{'' if p == '/' else p}/{name}"
            for p, e in self.model.items() if e.is_dir and p.count("/") < DEPTH_MAX
            for name in "abcd" if f"{'' if p == '/' else p}/{name}" not in self.model
        )

    def open_files(self) -> list[str]:
        return sorted(p for p, e in self.model.items() if e.client)

    def uc_file_error(self, path: str) -> type[XdfsError] | None:
        entry = self.model.get(path)
        if entry is None:
            return NotFound
        if entry.is_dir:
            return IsADirectory
        return None if entry.client else LeaseError

    # --- rules -------------------------------------------------------------------------

    @initialize()
    def seed_tree(self) -> None:
        """A small tree to start from, made through the same checked ops as the rules, so
        that most random ops hit something (an empty tree refuses nearly everything)."""
        for path in ("/a", "/a/b", "/c"):
            self.model_mkdir(path, 0o755)
        for path in ("/a/f", "/a/b/g", "/c/h"):
            self.model_add_file(path, overwrite=False)
        self.model_add_block("/a/f", 10)
        self.model_close("/a/f", keep=1)


    @rule(data=st.data(), mode=modes)
    def mkdir(self, data: st.DataObject, mode: int) -> None:
        self.model_mkdir(self.pick(data, self.new_children()), mode)

    def model_mkdir(self, path: str, mode: int) -> None:
        now, inode_id = self.tick(), self.new_id()
        error = self.parent_error(path) or (AlreadyExists if path in self.model else None)
        self.expect(MkdirOp(path, inode_id, mode, "alice", "users", now), error)
        if error is None:
            self.model[path] = Entry(True, inode_id, mode, now, now)
            self.model[parent(path)].mtime = now

    @rule(data=st.data(), overwrite=st.booleans())
    def add_file(self, data: st.DataObject, overwrite: bool) -> None:
        self.model_add_file(self.pick(data, self.new_children(), self.existing()), overwrite)

    def model_add_file(self, path: str, overwrite: bool) -> None:
        now, inode_id = self.tick(), self.new_id()
        old = self.model.get(path)
        error = self.parent_error(path)
        if error is None and old is not None:
            error = IsADirectory if old.is_dir else None if overwrite else AlreadyExists
        op = AddFileOp(path, inode_id, 0o644, "bob", "staff", now, 2, 1 << 20, f"c{now}",
                       overwrite)
        dropped = self.expect(op, error)
        if error is None:
            assert dropped == (tuple(b.block_id for b in old.blocks) if old else ())
            self.model[path] = Entry(False, inode_id, 0o644, now, now, (), f"c{now}")
            self.model[parent(path)].mtime = now

    @rule(data=st.data(), num_bytes=st.integers(0, 1000))
    def add_block(self, data: st.DataObject, num_bytes: int) -> None:
        self.model_add_block(self.pick(data, self.open_files()), num_bytes)

    def model_add_block(self, path: str, num_bytes: int) -> None:
        self.next_block += 1
        block = BlockRecord(self.next_block, 5000 + self.next_block % 7, num_bytes)
        error = self.uc_file_error(path)
        self.expect(AddBlockOp(path, block), error)
        if error is None:
            self.model[path].blocks += (block,)

    @rule(data=st.data(), keep=st.integers(0, 3))
    def close(self, data: st.DataObject, keep: int) -> None:
        self.model_close(self.pick(data, self.open_files()), keep)

    def model_close(self, path: str, keep: int) -> None:
        now = self.tick()
        error = self.uc_file_error(path)
        entry = self.model.get(path)
        blocks = entry.blocks[:keep] if entry else ()
        dropped = self.expect(CloseFileOp(path, now, now + 1, blocks), error)
        if error is None:
            assert entry is not None
            assert dropped == tuple(b.block_id for b in entry.blocks[keep:])
            entry.blocks, entry.client, entry.mtime, entry.atime = blocks, "", now, now + 1

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        path = self.pick(data, self.existing())
        now = self.tick()
        error = (InvalidArgument if path == "/" else None if path in self.model else NotFound)
        dropped = self.expect(DeleteOp(path, now), error)
        if error is None:
            doomed = self.subtree(path)
            expected = sorted(b.block_id for p in doomed for b in self.model[p].blocks)
            assert sorted(dropped) == expected
            for p in doomed:
                del self.model[p]
            self.model[parent(path)].mtime = now

    def rename_error(self, src: str, dst: str) -> type[XdfsError] | None:
        if src == "/":
            return InvalidArgument
        if src not in self.model:
            return NotFound
        if src == dst:
            return None
        if below(dst, src):
            return InvalidArgument
        if dst == "/":
            return AlreadyExists
        return self.parent_error(dst) or (AlreadyExists if dst in self.model else None)

    @rule(data=st.data())
    def rename(self, data: st.DataObject) -> None:
        src = self.pick(data, self.existing())
        targets = [p for p in self.new_children() if not below(p, src)]
        dst = self.pick(data, targets, self.existing())
        now = self.tick()
        error = self.rename_error(src, dst)
        self.expect(RenameOp(src, dst, now), error)
        if error is None and src != dst:
            for p in sorted(self.subtree(src)):
                self.model[dst + p[len(src):]] = self.model.pop(p)
            self.model[parent(src)].mtime = now
            self.model[parent(dst)].mtime = now

    @rule(data=st.data(), mode=modes)
    def set_permission(self, data: st.DataObject, mode: int) -> None:
        path = self.pick(data, self.existing())
        error = None if path in self.model else NotFound
        self.expect(SetPermissionOp(path, mode | 0o100000), error)  # high bits are dropped
        if error is None:
            self.model[path].mode = mode

    @rule(data=st.data(), mtime=st.sampled_from([-1, 5, 6]),
          atime=st.sampled_from([-1, 5, 7]))
    def set_times(self, data: st.DataObject, mtime: int, atime: int) -> None:
        path = self.pick(data, self.existing())
        error = None if path in self.model else NotFound
        self.expect(SetTimesOp(path, mtime, atime), error)
        if error is None:
            entry = self.model[path]
            entry.mtime = entry.mtime if mtime == -1 else mtime
            entry.atime = entry.atime if atime == -1 else atime

    # --- invariants --------------------------------------------------------------------

    @invariant()
    def observable_state_matches_model(self) -> None:
        for path in sorted({"/", *PATHS, *self.model}):
            entry = self.model.get(path)
            assert self.ns.exists(path) == (entry is not None), path
            if entry is None:
                continue
            status = self.ns.stat(path)
            assert (status.is_dir, status.inode_id, status.mode, status.mtime_ms,
                    status.atime_ms) == (entry.is_dir, entry.inode_id, entry.mode,
                                         entry.mtime, entry.atime), path
            assert status.length == sum(b.num_bytes for b in entry.blocks)
            assert status.under_construction == bool(entry.client)
            assert self.ns.lease_holder(path) == entry.client
            if entry.is_dir:
                children = sorted(p for p in self.model if p != path and parent(p) == path)
                listed, remaining = self.ns.list_dir(path, limit=2)
                more, _ = self.ns.list_dir(path, listed[-1].path.rsplit("/", 1)[1]
                                           if listed else "", 1000)
                assert [s.path for s in listed + more] == children
                assert remaining == len(children) - len(listed)
                assert status.children == len(children)
            else:
                assert self.ns.get_blocks(path) == entry.blocks
        assert self.ns.inode_count() == len(self.model)
        # the counters stay ahead of every id and genstamp the accepted ops carried
        blocks = [b for e in self.model.values() for b in e.blocks]
        assert self.ns.next_inode_id > max(e.inode_id for e in self.model.values())
        assert self.ns.next_block_id > max((b.block_id for b in blocks), default=0)
        assert self.ns.next_genstamp > max((b.genstamp for b in blocks), default=0)
        assert self.ns.files_under_construction() == sorted(
            (p, e.client) for p, e in self.model.items() if e.client)

    @invariant()
    def replay_gives_equal_dump(self) -> None:
        fresh = Namespace("hdfs", root_mtime_ms=T)
        for op in self.log:
            fresh.apply(op)
        assert fresh.canonical_dump() == self.ns.canonical_dump()

    @invariant()
    def image_round_trip_gives_equal_dump(self) -> None:
        ns = self.ns
        header = ImageHeader(
            LAYOUT_VERSION, 1, "cid", len(self.log), ns.next_inode_id, ns.next_block_id,
            ns.next_genstamp, ns.inode_count(), len(ns.users), len(ns.token_keys),
            ns.superuser, ns.supergroup,
        )
        copy = Namespace.from_image(header, ns.iter_inode_records(), ns.user_records(),
                                    ns.token_key_records())
        assert copy.canonical_dump() == ns.canonical_dump()


NamespaceMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=30, deadline=None
)
TestNamespaceMachine = NamespaceMachine.TestCase
