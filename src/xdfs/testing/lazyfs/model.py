"""The pure core of the power-loss file layer: what a file system holds now (*live*) and what
a power cut at this instant would leave (*durable*), in the strict POSIX model of LazyFS.

No ``os`` and no clock reads: the bytes that are durable live in a :class:`DurableStore`
(host files in the FUSE daemon, memory in the unit tests) and the time comes from an
injected clock. The FUSE driver (``driver.py``) maps system calls onto this class.

The rules (``docs/testing.md`` explains them with examples):

* **File data.** Writes and size changes (write, truncate, extend, ``O_APPEND``) are live
  only. ``fsync``/``fdatasync`` of the file makes its whole content and size durable
  (``fsync`` its mode and owner too). A cut drops every byte not covered by one: the file
  comes back with the content and size of its last sync (empty if never synced).
* **Directory entries.** Create, mkdir, symlink, link, unlink, rmdir and rename change a
  directory's live entries only; ``fsync`` of that directory makes all its entries durable
  at once. Each directory has its own durable entries, so a rename between two directories
  is durable in each of them only once that one is synced: synced only in the destination,
  a file has both names after a cut; only in the source, neither. A name is independent of
  the data: a file fsynced in a directory never synced vanishes at a cut.
* **Directories have one parent.** A directory moved between parents and synced on one side
  only could be durable in two places: it is kept in the one synced last (the rename's
  latest durable side). A directory no durable path reaches is lost with its subtree, as
  are files no durable name reaches.
* **Metadata.** The mode and owner an inode was created with are durable with its first
  durable name; later chmod/chown are durable at an ``fsync`` of it. Times are not
  modelled as durable: after a cut every inode carries the time of the recovery.
"""

from __future__ import annotations

import errno
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import msgspec

ROOT_INO = 1
PAGE_BYTES = 4096
NAME_BYTES_MAX = 255
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def fail(code: int, what: str = "") -> OSError:
    return OSError(code, what or errno.errorcode.get(code, str(code)))


class Kind(Enum):
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"


_FORMAT = {Kind.FILE: stat.S_IFREG, Kind.DIR: stat.S_IFDIR, Kind.SYMLINK: stat.S_IFLNK}


# --- the durable state, as the daemon persists it ----------------------------------------


class InodeRecord(msgspec.Struct, frozen=True):
    kind: str
    mode: int  # permission bits only
    uid: int
    gid: int
    target: str = ""  # a symlink's


class DirRecord(msgspec.Struct, frozen=True):
    entries: dict[str, int]
    seq: int  # when it was last synced (orders the two sides of a directory's rename)


class DurableState(msgspec.Struct):
    """Everything a cut keeps but file bytes (those are in the store, by inode number)."""

    next_ino: int
    seq: int
    inodes: dict[int, InodeRecord]
    dirs: dict[int, DirRecord]


class DurableStore(Protocol):
    """Durable file bytes by inode number, and the durable state (written at each sync
    that changes it). A file never synced has no data here and reads as empty."""

    def read(self, ino: int, offset: int, size: int) -> bytes: ...
    def write(self, ino: int, offset: int, data: bytes) -> None: ...
    def truncate(self, ino: int, size: int) -> None: ...
    def size(self, ino: int) -> int: ...
    def delete(self, ino: int) -> None: ...
    def inos(self) -> list[int]: ...
    def save(self, state: DurableState) -> None: ...


class MemoryStore:
    """A :class:`DurableStore` in memory (the unit tests' disk)."""

    def __init__(self) -> None:
        self.data: dict[int, bytearray] = {}
        self.state: DurableState | None = None
        self.saves = 0

    def read(self, ino: int, offset: int, size: int) -> bytes:
        return bytes(self.data.get(ino, b"")[offset : offset + size])

    def write(self, ino: int, offset: int, data: bytes) -> None:
        buf = self.data.setdefault(ino, bytearray())
        if len(buf) < offset:
            buf.extend(bytes(offset - len(buf)))
        buf[offset : offset + len(data)] = data

    def truncate(self, ino: int, size: int) -> None:
        buf = self.data.setdefault(ino, bytearray())
        if size < len(buf):
            del buf[size:]
        else:
            buf.extend(bytes(size - len(buf)))

    def size(self, ino: int) -> int:
        return len(self.data.get(ino, b""))

    def delete(self, ino: int) -> None:
        self.data.pop(ino, None)

    def inos(self) -> list[int]:
        return list(self.data)

    def save(self, state: DurableState) -> None:
        self.state = msgspec.convert(msgspec.to_builtins(state), DurableState)  # a copy
        self.saves += 1


# --- the live state ----------------------------------------------------------------------


@dataclass
class Attrs:
    mode: int  # permission bits only
    uid: int
    gid: int

    def record(self, kind: Kind, target: str) -> InodeRecord:
        return InodeRecord(kind.value, self.mode, self.uid, self.gid, target)


@dataclass
class Inode:
    ino: int
    kind: Kind
    attrs: Attrs
    durable_attrs: Attrs
    time_ns: tuple[int, int, int]  # atime, mtime, ctime
    links: int = 0  # live names
    opens: int = 0
    parent: int = 0  # a live directory's parent
    target: str = ""
    # files: the live content is the store's first ``base_limit`` bytes (zero beyond),
    # overlaid with the dirty pages, cut at ``size``
    size: int = 0
    base_limit: int = 0
    pages: dict[int, bytearray] = field(default_factory=dict)
    data_dirty: bool = False  # written or resized since the last sync
    # directories
    entries: dict[str, int] = field(default_factory=dict)
    durable_entries: dict[str, int] = field(default_factory=dict)
    synced_seq: int = 0

    @property
    def is_dir(self) -> bool:
        return self.kind is Kind.DIR


@dataclass(frozen=True)
class Stat:
    ino: int
    mode: int  # with the file type bits
    nlink: int
    uid: int
    gid: int
    size: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True)
class Pending:
    """What a cut now would drop."""

    dirty_files: int  # files with data or size not synced
    dirty_bytes: int  # bytes in dirty pages
    dirty_dirs: int  # directories whose entries differ from their durable ones
    names: int  # entries added, removed or changed in those directories

    def __str__(self) -> str:
        return (f"{self.dirty_files} file(s) with {self.dirty_bytes} unsynced byte(s), "
                f"{self.names} directory entry change(s) in {self.dirty_dirs} directory(ies)")


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


class LazyModel:
    """The live tree and its durable shadow. Errors are ``OSError`` with the errno a
    kernel file system gives (the FUSE driver hands them back as is)."""

    def __init__(self, store: DurableStore, clock: Callable[[], int]) -> None:
        self.store = store
        self.clock = clock
        self.inodes: dict[int, Inode] = {}
        self.next_ino = ROOT_INO + 1
        self.seq = 0
        self._durable_refs: Counter[int] = Counter()
        now = clock()
        root = Attrs(0o755, 0, 0)
        self.inodes[ROOT_INO] = Inode(ROOT_INO, Kind.DIR, root, Attrs(0o755, 0, 0),
                                      (now, now, now), links=1, parent=ROOT_INO)

    # -- recovery ---------------------------------------------------------------------

    @classmethod
    def recover(cls, store: DurableStore, state: DurableState | None,
                clock: Callable[[], int]) -> LazyModel:
        """The model after a power cut: exactly the durable state, with whatever no durable
        path reaches dropped (and its bytes deleted from the store)."""
        model = cls(store, clock)
        if state is None:
            for ino in store.inos():
                store.delete(ino)
            return model
        model.next_ino = state.next_ino
        model.seq = state.seq
        parents = _chosen_parents(state)
        now = clock()
        root = state.inodes.get(ROOT_INO)
        if root is not None:
            model.inodes[ROOT_INO].attrs = Attrs(root.mode, root.uid, root.gid)
            model.inodes[ROOT_INO].durable_attrs = Attrs(root.mode, root.uid, root.gid)
        todo = [ROOT_INO]
        while todo:
            dir_ino = todo.pop()
            record = state.dirs.get(dir_ino)
            directory = model.inodes[dir_ino]
            directory.synced_seq = record.seq if record else 0
            for name, ino in sorted((record.entries if record else {}).items()):
                child = state.inodes.get(ino)
                if child is None or ino == ROOT_INO:
                    continue
                if child.kind == Kind.DIR.value and parents.get(ino) != (dir_ino, name):
                    continue  # durable under another parent
                directory.entries[name] = ino
                directory.durable_entries[name] = ino
                model._durable_refs[ino] += 1
                if ino in model.inodes:
                    model.inodes[ino].links += 1  # another hard link
                    continue
                attrs = Attrs(child.mode, child.uid, child.gid)
                node = Inode(ino, Kind(child.kind), attrs, Attrs(child.mode, child.uid,
                             child.gid), (now, now, now), links=1, parent=dir_ino,
                             target=child.target)
                if node.kind is Kind.FILE:
                    node.size = node.base_limit = store.size(ino)
                model.inodes[ino] = node
                if node.is_dir:
                    todo.append(ino)
        stored = store.inos()
        for ino in stored:  # bytes of files no durable name reaches
            if ino not in model.inodes:
                store.delete(ino)
        model.next_ino = max([model.next_ino, *(i + 1 for i in [*state.inodes, *stored])])
        store.save(model.durable_state())
        return model

    # -- lookups ----------------------------------------------------------------------

    def node(self, ino: int) -> Inode:
        try:
            return self.inodes[ino]
        except KeyError:
            raise fail(errno.ENOENT) from None

    def lookup(self, path: str) -> int:
        ino = ROOT_INO
        for name in _split(path):
            directory = self.inodes[ino]
            if not directory.is_dir:
                raise fail(errno.ENOTDIR, path)
            try:
                ino = directory.entries[name]
            except KeyError:
                raise fail(errno.ENOENT, path) from None
        return ino

    def _parent_of(self, path: str) -> tuple[Inode, str]:
        parts = _split(path)
        if not parts:
            raise fail(errno.EBUSY, "/")  # the root has no parent entry
        name = parts[-1]
        if len(name.encode()) > NAME_BYTES_MAX:
            raise fail(errno.ENAMETOOLONG, path)
        parent = self.node(self.lookup("/".join(parts[:-1])))
        if not parent.is_dir:
            raise fail(errno.ENOTDIR, path)
        return parent, name

    def getattr(self, ino: int) -> Stat:
        node = self.node(ino)
        if node.is_dir:
            subdirs = sum(self.inodes[i].is_dir for i in node.entries.values())
            nlink, size = 2 + subdirs, 4096
        else:
            nlink = node.links
            size = node.size if node.kind is Kind.FILE else len(node.target.encode())
        atime, mtime, ctime = node.time_ns
        return Stat(ino, _FORMAT[node.kind] | node.attrs.mode, nlink, node.attrs.uid,
                    node.attrs.gid, size, atime, mtime, ctime)

    def readdir(self, ino: int) -> list[tuple[str, int, int]]:
        """(name, inode, type bits) of every live entry, in name order."""
        node = self.node(ino)
        if not node.is_dir:
            raise fail(errno.ENOTDIR)
        return [(name, child, _FORMAT[self.inodes[child].kind])
                for name, child in sorted(node.entries.items())]

    def readlink(self, ino: int) -> str:
        node = self.node(ino)
        if node.kind is not Kind.SYMLINK:
            raise fail(errno.EINVAL)
        return node.target

    # -- namespace changes (live only) --------------------------------------------------

    def _new(self, kind: Kind, mode: int, uid: int, gid: int, target: str = "") -> Inode:
        now = self.clock()
        attrs = Attrs(mode & 0o7777, uid, gid)
        node = Inode(self.next_ino, kind, attrs, Attrs(attrs.mode, uid, gid),
                     (now, now, now), target=target)
        self.next_ino += 1
        self.inodes[node.ino] = node
        return node

    def _touch(self, node: Inode, *, data: bool = True) -> None:
        now = self.clock()
        node.time_ns = (node.time_ns[0], now if data else node.time_ns[1], now)

    def _add(self, parent: Inode, name: str, node: Inode) -> int:
        if name in parent.entries:
            raise fail(errno.EEXIST, name)
        parent.entries[name] = node.ino
        node.links += 1
        if node.is_dir:
            node.parent = parent.ino
        self._touch(parent)
        return node.ino

    def create(self, path: str, mode: int, uid: int, gid: int) -> int:
        parent, name = self._parent_of(path)
        if name in parent.entries:
            raise fail(errno.EEXIST, path)
        return self._add(parent, name, self._new(Kind.FILE, mode, uid, gid))

    def mkdir(self, path: str, mode: int, uid: int, gid: int) -> int:
        parent, name = self._parent_of(path)
        if name in parent.entries:
            raise fail(errno.EEXIST, path)
        return self._add(parent, name, self._new(Kind.DIR, mode, uid, gid))

    def symlink(self, path: str, target: str, uid: int, gid: int) -> int:
        parent, name = self._parent_of(path)
        if name in parent.entries:
            raise fail(errno.EEXIST, path)
        return self._add(parent, name, self._new(Kind.SYMLINK, 0o777, uid, gid, target))

    def link(self, existing: str, path: str) -> int:
        node = self.node(self.lookup(existing))
        if node.is_dir:
            raise fail(errno.EPERM, existing)
        parent, name = self._parent_of(path)
        self._add(parent, name, node)
        self._touch(node, data=False)
        return node.ino

    def _drop_name(self, parent: Inode, name: str) -> None:
        node = self.inodes[parent.entries.pop(name)]
        node.links -= 1
        self._touch(parent)
        self._touch(node, data=False)
        self._maybe_forget(node)

    def unlink(self, path: str) -> None:
        parent, name = self._parent_of(path)
        node = self.node(self._entry(parent, name, path))
        if node.is_dir:
            raise fail(errno.EISDIR, path)
        self._drop_name(parent, name)

    def rmdir(self, path: str) -> None:
        parent, name = self._parent_of(path)
        node = self.node(self._entry(parent, name, path))
        if not node.is_dir:
            raise fail(errno.ENOTDIR, path)
        if node.entries:
            raise fail(errno.ENOTEMPTY, path)
        self._drop_name(parent, name)

    @staticmethod
    def _entry(parent: Inode, name: str, path: str) -> int:
        try:
            return parent.entries[name]
        except KeyError:
            raise fail(errno.ENOENT, path) from None

    def _is_ancestor(self, ino: int, of: int) -> bool:
        """Is directory ``ino`` ``of`` or above it in the live tree?"""
        while True:
            if of == ino:
                return True
            if of == ROOT_INO:
                return False
            of = self.inodes[of].parent

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        src_parent, src_name = self._parent_of(old)
        dst_parent, dst_name = self._parent_of(new)
        node = self.node(self._entry(src_parent, src_name, old))
        if node.is_dir and self._is_ancestor(node.ino, dst_parent.ino):
            raise fail(errno.EINVAL, f"{old} into itself")
        victim_ino = dst_parent.entries.get(dst_name)
        if flags & RENAME_EXCHANGE:
            self._exchange(src_parent, src_name, dst_parent, dst_name, new)
            return
        if victim_ino == node.ino:
            return  # two names of one file: nothing to do (POSIX)
        if victim_ino is not None:
            if flags & RENAME_NOREPLACE:
                raise fail(errno.EEXIST, new)
            self._check_replaceable(node, self.inodes[victim_ino], new)
            self._drop_name(dst_parent, dst_name)
        del src_parent.entries[src_name]
        dst_parent.entries[dst_name] = node.ino
        if node.is_dir:
            node.parent = dst_parent.ino
        self._touch(src_parent)
        self._touch(dst_parent)
        self._touch(node, data=False)

    @staticmethod
    def _check_replaceable(node: Inode, victim: Inode, new: str) -> None:
        if node.is_dir and not victim.is_dir:
            raise fail(errno.ENOTDIR, new)
        if victim.is_dir and not node.is_dir:
            raise fail(errno.EISDIR, new)
        if victim.is_dir and victim.entries:
            raise fail(errno.ENOTEMPTY, new)

    def _exchange(self, src_parent: Inode, src_name: str, dst_parent: Inode, dst_name: str,
                  new: str) -> None:
        """RENAME_EXCHANGE: the two names swap their inodes."""
        victim = self.node(self._entry(dst_parent, dst_name, new))
        if victim.is_dir and self._is_ancestor(victim.ino, src_parent.ino):
            raise fail(errno.EINVAL, f"{new} into itself")
        node = self.inodes[src_parent.entries[src_name]]
        src_parent.entries[src_name], dst_parent.entries[dst_name] = victim.ino, node.ino
        for moved, parent in ((node, dst_parent), (victim, src_parent)):
            if moved.is_dir:
                moved.parent = parent.ino
        self._touch(src_parent)
        self._touch(dst_parent)

    # -- attributes -------------------------------------------------------------------

    def chmod(self, ino: int, mode: int) -> None:
        node = self.node(ino)
        node.attrs.mode = mode & 0o7777
        self._touch(node, data=False)

    def chown(self, ino: int, uid: int, gid: int) -> None:
        """``-1`` leaves that id as it is (chown(2))."""
        node = self.node(ino)
        if uid >= 0:
            node.attrs.uid = uid
        if gid >= 0:
            node.attrs.gid = gid
        self._touch(node, data=False)

    def utimens(self, ino: int, atime_ns: int, mtime_ns: int) -> None:
        node = self.node(ino)
        node.time_ns = (atime_ns, mtime_ns, self.clock())

    # -- file data (live only) --------------------------------------------------------

    def open(self, ino: int) -> None:
        self.node(ino).opens += 1

    def release(self, ino: int) -> None:
        node = self.node(ino)
        node.opens -= 1
        self._maybe_forget(node)

    def _file(self, ino: int) -> Inode:
        node = self.node(ino)
        if node.kind is not Kind.FILE:
            raise fail(errno.EISDIR if node.is_dir else errno.EINVAL)
        return node

    def _page(self, node: Inode, index: int) -> bytearray:
        """A dirty page, materialized from the visible content the first time."""
        page = node.pages.get(index)
        if page is None:
            start = index * PAGE_BYTES
            base = self.store.read(node.ino, start, min(PAGE_BYTES, node.base_limit - start)) \
                if start < node.base_limit else b""
            page = bytearray(base)
            page.extend(bytes(PAGE_BYTES - len(page)))
            node.pages[index] = page
        return page

    def read(self, ino: int, offset: int, size: int) -> bytes:
        node = self._file(ino)
        end = min(node.size, offset + size)
        if offset >= end:
            return b""
        clean_end = min(end, node.base_limit)
        out = bytearray(self.store.read(ino, offset, clean_end - offset)
                        if offset < clean_end else b"")
        out.extend(bytes(end - offset - len(out)))
        first, last = offset // PAGE_BYTES, (end - 1) // PAGE_BYTES
        indices = (range(first, last + 1) if last - first < len(node.pages)
                   else sorted(i for i in node.pages if first <= i <= last))
        for index in indices:
            page = node.pages.get(index)
            if page is None:
                continue
            lo = max(offset, index * PAGE_BYTES)
            hi = min(end, (index + 1) * PAGE_BYTES)
            out[lo - offset : hi - offset] = page[lo - index * PAGE_BYTES : hi - index * PAGE_BYTES]
        return bytes(out)

    def write(self, ino: int, offset: int, data: bytes, *, append: bool = False) -> int:
        """Write at ``offset`` (at the live end of the file with ``append``: O_APPEND)."""
        node = self._file(ino)
        if append:
            offset = node.size
        pos = 0
        while pos < len(data):
            index, inside = divmod(offset + pos, PAGE_BYTES)
            take = min(PAGE_BYTES - inside, len(data) - pos)
            self._page(node, index)[inside : inside + take] = data[pos : pos + take]
            pos += take
        node.size = max(node.size, offset + len(data))
        node.data_dirty = True
        self._touch(node)
        return len(data)

    def truncate(self, ino: int, size: int) -> None:
        node = self._file(ino)
        if size < node.size:
            for index in [i for i in node.pages if i * PAGE_BYTES >= size]:
                del node.pages[index]
            index, inside = divmod(size, PAGE_BYTES)
            if inside and index in node.pages:  # bytes past the end read as zero later
                node.pages[index][inside:] = bytes(PAGE_BYTES - inside)
            node.base_limit = min(node.base_limit, size)
        node.size = size
        node.data_dirty = True
        self._touch(node)

    # -- durability -------------------------------------------------------------------

    def fsync(self, ino: int, *, datasync: bool = False) -> None:
        """fsync/fdatasync of a file (its data and size; fsync also its mode and owner) or
        of a directory (all its entries, and its own mode and owner)."""
        node = self.node(ino)
        save = False
        if node.is_dir:
            save = self._sync_entries(node)
        elif node.kind is Kind.FILE and node.data_dirty:
            self._sync_data(node)
        if not datasync and node.durable_attrs != node.attrs:
            node.durable_attrs = Attrs(node.attrs.mode, node.attrs.uid, node.attrs.gid)
            save = save or self._durable_refs[ino] > 0 or ino == ROOT_INO
        if save:
            self.store.save(self.durable_state())

    def _sync_data(self, node: Inode) -> None:
        ino = node.ino
        if self.store.size(ino) > node.base_limit:
            self.store.truncate(ino, node.base_limit)  # bytes cut off since the last sync
        for index in sorted(node.pages):
            start = index * PAGE_BYTES
            if start < node.size:
                self.store.write(ino, start, bytes(node.pages[index][: node.size - start]))
        self.store.truncate(ino, node.size)
        node.pages.clear()
        node.base_limit = node.size
        node.data_dirty = False

    def _sync_entries(self, node: Inode) -> bool:
        if node.entries == node.durable_entries and node.synced_seq:
            return False
        self._durable_refs.subtract(node.durable_entries.values())
        self._durable_refs.update(node.entries.values())
        dropped = [self.inodes[i] for i in set(node.durable_entries.values())
                   if self._durable_refs[i] <= 0]
        node.durable_entries = dict(node.entries)
        self.seq += 1
        node.synced_seq = self.seq
        for gone in dropped:
            self._maybe_forget(gone)
        return True

    def _maybe_forget(self, node: Inode) -> None:
        """Drop an inode nothing can reach any more: no live name, no open handle and no
        durable name (a durable one may come back at a cut)."""
        if node.links > 0 or node.opens > 0 or self._durable_refs[node.ino] > 0:
            return
        if node.ino == ROOT_INO:
            return
        del self.inodes[node.ino]
        del self._durable_refs[node.ino]
        self.store.delete(node.ino)
        if node.is_dir:  # its durable entries no longer hold anything
            self._durable_refs.subtract(node.durable_entries.values())
            for child in set(node.durable_entries.values()):
                if child in self.inodes:
                    self._maybe_forget(self.inodes[child])

    def durable_state(self) -> DurableState:
        held = [ino for ino, count in self._durable_refs.items() if count > 0]
        inodes = {}
        for ino in [ROOT_INO, *held]:
            node = self.inodes[ino]
            inodes[ino] = node.durable_attrs.record(node.kind, node.target)
        dirs = {ino: DirRecord(dict(self.inodes[ino].durable_entries),
                               self.inodes[ino].synced_seq)
                for ino in inodes if self.inodes[ino].is_dir}
        return DurableState(self.next_ino, self.seq, inodes, dirs)

    def pending(self) -> Pending:
        files = [n for n in self.inodes.values() if n.kind is Kind.FILE and n.data_dirty]
        dirs = [n for n in self.inodes.values()
                if n.is_dir and n.entries != n.durable_entries]
        names = sum(len(set(d.entries.items()) ^ set(d.durable_entries.items()))
                    for d in dirs)
        return Pending(len(files), sum(len(n.pages) * PAGE_BYTES for n in files),
                       len(dirs), names)


def _chosen_parents(state: DurableState) -> dict[int, tuple[int, str]]:
    """The one durable place of every directory: among the durable entries naming it, the
    one in the directory synced last (ties: the lowest parent inode, then name)."""
    best: dict[int, tuple[int, int, str]] = {}
    for parent, record in state.dirs.items():
        for name, ino in record.entries.items():
            child = state.inodes.get(ino)
            if child is None or child.kind != Kind.DIR.value:
                continue
            key = (record.seq, -parent, name)
            current = best.get(ino)
            if current is None or key > (current[0], -current[1], current[2]):
                best[ino] = (record.seq, parent, name)
    return {ino: (parent, name) for ino, (_seq, parent, name) in best.items()}
