"""The pure core of the power-loss layer: what a cut keeps and drops (xdfs.testing.lazyfs).

Every test runs system-call-like operations on a model over a MemoryStore, then "cuts the
power": a new model is recovered from what the store holds (the durable bytes and the last
durable state saved), exactly as the FUSE daemon restarts on its backing dir, but from a
copy of the store, so the test can go on with the model and cut again later.
"""

from __future__ import annotations

import errno
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdfs.testing.lazyfs.model import (
    PAGE_BYTES,
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    ROOT_INO,
    LazyModel,
    MemoryStore,
)


def new_model() -> LazyModel:
    ticks = itertools.count(1)
    return LazyModel(MemoryStore(), lambda: next(ticks))


def cut(model: LazyModel) -> LazyModel:
    """What a power cut now would leave (on a copy of the disk: ``model`` stays usable)."""
    store = model.store
    assert isinstance(store, MemoryStore)
    disk = MemoryStore()
    disk.data = {ino: bytearray(data) for ino, data in store.data.items()}
    disk.state = store.state
    return LazyModel.recover(disk, disk.state, model.clock)


def write_file(m: LazyModel, path: str, data: bytes, *, sync: bool = False) -> int:
    try:
        ino = m.lookup(path)
    except OSError:
        ino = m.create(path, 0o644, 0, 0)
    m.truncate(ino, 0)
    m.write(ino, 0, data)
    if sync:
        m.fsync(ino)
    return ino


def sync_dir(m: LazyModel, path: str = "/") -> None:
    m.fsync(m.lookup(path))


def content(m: LazyModel, path: str) -> bytes:
    ino = m.lookup(path)
    return m.read(ino, 0, m.getattr(ino).size)


def tree(m: LazyModel, path: str = "/") -> dict[str, bytes | None]:
    """path -> content (None for a directory), the whole live tree under ``path``."""
    out: dict[str, bytes | None] = {}
    for name, _ino, _kind in m.readdir(m.lookup(path)):
        child = f"{path.rstrip('/')}/{name}"
        if m.node(m.lookup(child)).is_dir:
            out[child] = None
            out.update(tree(m, child))
        else:
            out[child] = content(m, child)
    return out


# --- file data ----------------------------------------------------------------------------


def test_unsynced_data_is_lost_and_synced_data_kept() -> None:
    m = new_model()
    a = write_file(m, "/a", b"synced")
    m.fsync(a)
    m.write(a, 6, b" and more")
    write_file(m, "/b", b"never synced")
    sync_dir(m)
    assert m.pending().dirty_files == 2
    after = cut(m)
    assert content(after, "/a") == b"synced"
    assert content(after, "/b") == b""  # its name was durable, its data never


def test_fdatasync_covers_data_and_size_but_not_the_mode() -> None:
    m = new_model()
    a = write_file(m, "/a", b"x" * 10)
    sync_dir(m)
    m.chmod(a, 0o600)
    m.fsync(a, datasync=True)
    after = cut(m)
    assert content(after, "/a") == b"x" * 10
    assert after.getattr(after.lookup("/a")).mode & 0o7777 == 0o644
    m = after
    m.chmod(m.lookup("/a"), 0o600)
    m.fsync(m.lookup("/a"))
    assert cut(m).getattr(m.lookup("/a")).mode & 0o7777 == 0o600


def test_truncate_and_extend_are_undone_unless_synced() -> None:
    m = new_model()
    a = write_file(m, "/a", bytes(range(256)) * 40, sync=True)
    sync_dir(m)
    m.truncate(a, 100)
    assert cut(m).getattr(m.lookup("/a")).size == 10240
    m.truncate(a, 50000)
    assert cut(m).getattr(m.lookup("/a")).size == 10240
    # shrink then grow: the bytes in between read as zero, and stay so once synced
    m.truncate(a, 100)
    m.truncate(a, 3 * PAGE_BYTES)
    assert content(m, "/a") == (bytes(range(256)) * 40)[:100] + bytes(3 * PAGE_BYTES - 100)
    m.fsync(a)
    after = cut(m)
    assert content(after, "/a") == content(m, "/a")


def test_shrinking_sync_shrinks_the_durable_file() -> None:
    m = new_model()
    a = write_file(m, "/a", b"y" * 9000, sync=True)
    sync_dir(m)
    m.truncate(a, 10)
    m.fsync(a)
    assert content(cut(m), "/a") == b"y" * 10


def test_writes_across_pages_holes_and_reads() -> None:
    m = new_model()
    a = write_file(m, "/a", b"")
    m.write(a, PAGE_BYTES - 3, b"abcdef")
    m.write(a, 5 * PAGE_BYTES, b"z")
    assert m.getattr(a).size == 5 * PAGE_BYTES + 1
    assert m.read(a, PAGE_BYTES - 3, 6) == b"abcdef"
    assert m.read(a, 2 * PAGE_BYTES, 10) == bytes(10)
    m.fsync(a)
    sync_dir(m)
    after = cut(m)
    assert content(after, "/a") == content(m, "/a")
    assert after.read(after.lookup("/a"), 5 * PAGE_BYTES, 100) == b"z"


def test_o_append_writes_at_the_live_end() -> None:
    m = new_model()
    a = write_file(m, "/log", b"one\n", sync=True)
    sync_dir(m)
    m.write(a, 0, b"two\n", append=True)  # the offset is ignored
    assert content(m, "/log") == b"one\ntwo\n"
    assert content(cut(m), "/log") == b"one\n"
    m.write(a, 0, b"three\n", append=True)
    m.fsync(a)
    assert content(cut(m), "/log") == b"one\ntwo\nthree\n"


# --- names --------------------------------------------------------------------------------


def test_a_file_fsynced_in_a_directory_never_fsynced_vanishes() -> None:
    m = new_model()
    m.mkdir("/d", 0o755, 0, 0)
    sync_dir(m)
    write_file(m, "/d/f", b"data", sync=True)
    assert "/d/f" not in tree(cut(m))
    sync_dir(m, "/d")
    assert content(cut(m), "/d/f") == b"data"


def test_a_new_directory_needs_its_parent_synced() -> None:
    m = new_model()
    m.mkdir("/a", 0o755, 0, 0)
    m.mkdir("/a/b", 0o755, 0, 0)
    write_file(m, "/a/b/f", b"f", sync=True)
    sync_dir(m, "/a/b")
    sync_dir(m, "/a")
    assert tree(cut(m)) == {}  # / was never synced: nothing under it
    sync_dir(m)
    assert tree(cut(m)) == {"/a": None, "/a/b": None, "/a/b/f": b"f"}


def test_unlink_and_rmdir_are_undone_unless_the_directory_is_synced() -> None:
    m = new_model()
    m.mkdir("/d", 0o755, 0, 0)
    write_file(m, "/d/f", b"keep", sync=True)
    sync_dir(m, "/d")
    sync_dir(m)
    m.unlink("/d/f")
    m.rmdir("/d")
    assert tree(m) == {}
    assert tree(cut(m)) == {"/d": None, "/d/f": b"keep"}
    sync_dir(m)
    after = cut(m)
    assert tree(after) == {}
    assert isinstance(after.store, MemoryStore) and not after.store.inos()  # bytes freed


def test_rename_over_an_existing_file() -> None:
    m = new_model()
    write_file(m, "/f", b"old", sync=True)
    sync_dir(m)
    write_file(m, "/f.tmp", b"new")
    m.rename("/f.tmp", "/f")
    assert tree(m) == {"/f": b"new"}
    assert tree(cut(m)) == {"/f": b"old"}  # directory not synced: the old file is back
    sync_dir(m)
    # the rename is durable but the new file's data never was: the classic lost update
    assert tree(cut(m)) == {"/f": b""}
    m.fsync(m.lookup("/f"))
    assert tree(cut(m)) == {"/f": b"new"}


def test_atomic_replace_done_right() -> None:
    m = new_model()
    write_file(m, "/f", b"old", sync=True)
    sync_dir(m)
    write_file(m, "/f.tmp", b"new", sync=True)
    assert tree(cut(m)) == {"/f": b"old"}
    m.rename("/f.tmp", "/f")
    sync_dir(m)
    assert tree(cut(m)) == {"/f": b"new"}


def test_rename_between_directories_is_durable_per_side() -> None:
    m = new_model()
    for d in ("/src", "/dst"):
        m.mkdir(d, 0o755, 0, 0)
    sync_dir(m)
    write_file(m, "/src/f", b"x", sync=True)
    sync_dir(m, "/src")
    m.rename("/src/f", "/dst/f")
    sync_dir(m, "/dst")
    after = cut(m)  # only the destination synced: both names (one inode, two links)
    assert tree(after) == {"/src": None, "/dst": None, "/src/f": b"x", "/dst/f": b"x"}
    assert after.getattr(after.lookup("/dst/f")).nlink == 2
    assert after.lookup("/src/f") == after.lookup("/dst/f")
    m.rename("/dst/f", "/src/f")  # back, then out again, syncing only the source
    sync_dir(m, "/dst")
    m.rename("/src/f", "/dst/f")
    sync_dir(m, "/src")
    assert tree(cut(m)) == {"/src": None, "/dst": None}  # no name at all
    sync_dir(m, "/dst")
    assert tree(cut(m)) == {"/src": None, "/dst": None, "/dst/f": b"x"}


def test_a_directory_renamed_between_parents_has_one_place_after_a_cut() -> None:
    m = new_model()
    for d in ("/a", "/b", "/a/d"):
        m.mkdir(d, 0o755, 0, 0)
    write_file(m, "/a/d/f", b"f", sync=True)
    for d in ("/a/d", "/a", "/b", "/"):
        sync_dir(m, d)
    m.rename("/a/d", "/b/d")
    assert tree(cut(m))["/a/d/f"] == b"f"
    sync_dir(m, "/b")  # synced after /a: the rename's durable side wins
    after = cut(m)
    assert "/b/d/f" in tree(after) and "/a/d" not in tree(after)
    sync_dir(m, "/a")
    assert tree(cut(m)) == {"/a": None, "/b": None, "/b/d": None, "/b/d/f": b"f"}


def test_directories_whose_durable_entries_form_a_cycle_are_lost() -> None:
    m = new_model()
    m.mkdir("/a", 0o755, 0, 0)
    m.mkdir("/b", 0o755, 0, 0)
    sync_dir(m)
    m.rename("/b", "/a/b")
    sync_dir(m, "/a")  # durably: b in a (and in /, synced earlier)
    m.rename("/a/b", "/b")
    m.rename("/a", "/b/a")
    sync_dir(m, "/b")  # durably: a in b, synced last; b's last sync put it in a
    after = cut(m)
    assert tree(after) == {}  # a cycle no path from / reaches (strict POSIX allows it)
    assert isinstance(after.store, MemoryStore) and not after.store.inos()


def test_hard_links_and_open_unlinked_files() -> None:
    m = new_model()
    a = write_file(m, "/a", b"shared", sync=True)
    m.link("/a", "/b")
    sync_dir(m)
    assert m.getattr(a).nlink == 2
    m.open(a)
    m.unlink("/a")
    m.unlink("/b")
    m.write(a, 0, b"SHARED")  # through the still-open handle
    m.fsync(a)
    assert a in m.inodes  # still open, and still durably named
    after = cut(m)  # the unlinks were never durable: both names, the synced data
    assert tree(after) == {"/a": b"SHARED", "/b": b"SHARED"}
    m.release(a)
    sync_dir(m)
    assert a not in m.inodes and tree(cut(m)) == {}


def test_handles_open_at_the_cut_are_gone_after_it() -> None:
    m = new_model()
    a = write_file(m, "/a", b"x", sync=True)
    sync_dir(m)
    m.open(a)
    after = cut(m)
    assert after.node(after.lookup("/a")).opens == 0


def test_symlinks_are_durable_with_their_name() -> None:
    m = new_model()
    m.symlink("/l", "target", 0, 0)
    assert "/l" not in tree(cut(m))
    sync_dir(m)
    after = cut(m)
    assert after.readlink(after.lookup("/l")) == "target"


def test_recovery_frees_the_bytes_of_files_no_durable_name_reaches() -> None:
    m = new_model()
    write_file(m, "/orphan", b"synced data, name never durable", sync=True)
    assert isinstance(m.store, MemoryStore) and m.store.inos()
    after = cut(m)
    assert isinstance(after.store, MemoryStore)
    assert tree(after) == {} and not after.store.inos()
    assert after.create("/new", 0o644, 0, 0) > ROOT_INO


def test_pending_counts_what_a_cut_drops() -> None:
    m = new_model()
    assert m.pending().dirty_files == m.pending().names == 0
    write_file(m, "/a", b"x" * (PAGE_BYTES + 1))
    m.mkdir("/d", 0o755, 0, 0)
    pending = m.pending()
    assert (pending.dirty_files, pending.dirty_bytes) == (1, 2 * PAGE_BYTES)
    assert (pending.dirty_dirs, pending.names) == (1, 2)
    m.fsync(m.lookup("/a"))
    sync_dir(m)
    assert m.pending().dirty_files == m.pending().names == 0


# --- errors as a kernel file system gives them ---------------------------------------------


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda m: m.rmdir("/d"), errno.ENOTEMPTY),
        (lambda m: m.unlink("/d"), errno.EISDIR),
        (lambda m: m.rmdir("/d/f"), errno.ENOTDIR),
        (lambda m: m.rename("/d", "/d/sub"), errno.EINVAL),
        (lambda m: m.rename("/d/f", "/e"), errno.EISDIR),
        (lambda m: m.rename("/e", "/d/f"), errno.ENOTDIR),
        (lambda m: m.rename("/e", "/d"), errno.ENOTEMPTY),
        (lambda m: m.rename("/d/f", "/d/g", RENAME_NOREPLACE), errno.EEXIST),
        (lambda m: m.create("/d/f", 0o644, 0, 0), errno.EEXIST),
        (lambda m: m.mkdir("/d/f/x", 0o755, 0, 0), errno.ENOTDIR),
        (lambda m: m.lookup("/nope"), errno.ENOENT),
        (lambda m: m.link("/d", "/d2"), errno.EPERM),
        (lambda m: m.create("/" + "n" * 256, 0o644, 0, 0), errno.ENAMETOOLONG),
    ],
)
def test_errors(call, code) -> None:
    m = new_model()
    m.mkdir("/d", 0o755, 0, 0)
    m.mkdir("/e", 0o755, 0, 0)
    write_file(m, "/d/f", b"f")
    write_file(m, "/d/g", b"g")
    before = tree(m)
    with pytest.raises(OSError) as raised:
        call(m)
    assert raised.value.errno == code
    assert tree(m) == before


def test_rename_exchange_swaps_two_names() -> None:
    m = new_model()
    write_file(m, "/a", b"a")
    m.mkdir("/b", 0o755, 0, 0)
    m.rename("/a", "/b", RENAME_EXCHANGE)
    assert m.node(m.lookup("/a")).is_dir and content(m, "/b") == b"a"


# --- properties ---------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c"])
PATHS = st.lists(NAMES, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), PATHS, st.binary(max_size=9000)),
        st.tuples(st.just("mkdir"), PATHS),
        st.tuples(st.just("unlink"), PATHS),
        st.tuples(st.just("rmdir"), PATHS),
        st.tuples(st.just("rename"), PATHS, PATHS),
        st.tuples(st.just("truncate"), PATHS, st.integers(0, 9000)),
    ),
    max_size=25,
)


def apply(m: LazyModel, op: tuple[object, ...]) -> None:
    kind, path, *rest = op
    assert isinstance(path, str)
    try:
        if kind == "write":
            data = rest[0]
            assert isinstance(data, bytes)
            write_file(m, path, data)
        elif kind == "mkdir":
            m.mkdir(path, 0o755, 0, 0)
        elif kind == "unlink":
            m.unlink(path)
        elif kind == "rmdir":
            m.rmdir(path)
        elif kind == "rename":
            m.rename(path, str(rest[0]))
        elif kind == "truncate":
            m.truncate(m.lookup(path), int(str(rest[0])))
    except OSError:
        pass  # refused as a kernel would: nothing changed


def sync_everything(m: LazyModel) -> None:
    for ino in list(m.inodes):
        m.fsync(ino)


@settings(max_examples=150, deadline=None)
@given(OPS, OPS)
def test_a_cut_after_syncing_everything_keeps_everything(first, second) -> None:
    m = new_model()
    for op in first:
        apply(m, op)
    sync_everything(m)
    synced = tree(m)
    assert tree(cut(m)) == synced
    for op in second:  # and whatever comes after the last sync is dropped as a whole
        apply(m, op)
    assert tree(cut(m)) == synced
