"""The retry cache's pure core: entries, outcomes, expiry, bound, keys on ops, rebuild."""

from __future__ import annotations

from xdfs.errors import AlreadyExists, Cancelled, NotActive, SafeModeError
from xdfs.namenode.namespace import ops
from xdfs.namenode.namespace.ops import (
    AddFileOp,
    DeleteOp,
    MkdirOp,
    RenameOp,
    SetPermissionOp,
    decode_op,
    encode_op,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.retry_cache import (
    KEYED_OPS,
    RetryCache,
    State,
    key_of,
    record_applied,
    with_key,
)
from xdfs.protocol.namenode import FileStatus

A = (b"a" * 16, 1)
B = (b"b" * 16, 1)


def test_first_try_runs_and_a_retry_sees_its_answer() -> None:
    cache = RetryCache(10, 600.0)
    assert cache.begin(A, 0.0) is None  # new: the caller runs the call
    running = cache.begin(A, 1.0)
    assert running is not None and running.state is State.RUNNING
    cache.succeed(A, "answer", 42)
    entry = cache.begin(A, 2.0)
    assert entry is not None
    assert (entry.state, entry.value, entry.txid) == (State.SUCCEEDED, "answer", 42)
    assert cache.begin(B, 2.0) is None  # another client's call 1 is another call


def test_waiters_are_told_when_the_first_try_ends() -> None:
    cache = RetryCache(10, 600.0)
    cache.begin(A, 0.0)
    entry = cache.begin(A, 0.0)
    assert entry is not None
    woken: list[str] = []
    entry.wait(lambda: woken.append("x"))
    cache.succeed(A, 1, 1)
    assert woken == ["x"]


def test_a_decided_error_is_kept_one_that_decided_nothing_is_forgotten() -> None:
    cache = RetryCache(10, 600.0)
    cache.begin(A, 0.0)
    error = AlreadyExists("/f already exists")
    cache.fail(A, error)
    entry = cache.begin(A, 1.0)
    assert entry is not None and entry.state is State.FAILED and entry.error is error
    for undecided in (NotActive("standby"), SafeModeError("safe"), Cancelled("gone"),
                      RuntimeError("bug")):
        cache.begin(B, 0.0)
        cache.fail(B, undecided)
        assert cache.begin(B, 0.0) is None, undecided  # forgotten: the retry runs it


def test_entries_expire_after_expiry_s_but_never_while_running() -> None:
    cache = RetryCache(10, 600.0)
    cache.begin(A, 0.0)
    assert cache.begin(A, 700.0) is not None  # still running: kept
    cache.succeed(A, "x", 1)
    assert cache.get(A, 599.0) is not None
    assert cache.get(A, 600.0) is None
    assert len(cache) == 0


def test_the_cache_is_bounded_oldest_finished_first() -> None:
    cache = RetryCache(3, 600.0)
    running = (b"r" * 16, 1)
    cache.begin(running, 0.0)
    for call in range(1, 6):
        key = (b"c" * 16, call)
        cache.begin(key, float(call))
        cache.succeed(key, call, call)
    assert len(cache) == 3
    assert cache.get(running, 10.0) is not None  # a running call is never dropped
    assert cache.get((b"c" * 16, 1), 10.0) is None
    assert cache.get((b"c" * 16, 5), 10.0) is not None


def test_keys_travel_on_the_ops_and_old_records_load_without_one() -> None:
    op = RenameOp("/a", "/b", 5)
    keyed = with_key(op, A)
    assert key_of(op) is None and key_of(keyed) == A
    assert decode_op(RenameOp.OPCODE, encode_op(keyed)) == keyed
    # a record written before keys existed: the op's fields only
    import msgspec

    old = msgspec.msgpack.encode(["/a", "/b", 5])
    assert decode_op(RenameOp.OPCODE, old) == op
    # ops of idempotent calls carry no key
    assert with_key(SetPermissionOp("/a", 0o700), A) == SetPermissionOp("/a", 0o700)


def test_replayed_ops_rebuild_the_first_answers() -> None:
    ns = Namespace("root")
    cache = RetryCache(10, 600.0)
    mkdir = with_key(MkdirOp("/d", ns.allocate_inode_id(), 0o755, "root", "g", 7), A)
    ns.apply(mkdir)
    record_applied(cache, mkdir, ns, 3, 0.0)
    first_status = ns.stat("/d")
    add = with_key(AddFileOp("/d/f", ns.allocate_inode_id(), 0o644, "root", "g", 8, 1,
                             1 << 20, "c1"), B)
    ns.apply(add)
    record_applied(cache, add, ns, 4, 0.0)
    rename = with_key(RenameOp("/d/f", "/d/g", 9), (b"a" * 16, 2))
    ns.apply(rename)
    record_applied(cache, rename, ns, 5, 0.0)
    delete = with_key(DeleteOp("/d/g", 10), (b"a" * 16, 3))
    ns.apply(delete)
    record_applied(cache, delete, ns, 6, 0.0)
    unkeyed = MkdirOp("/e", ns.allocate_inode_id(), 0o755, "root", "g", 7)
    ns.apply(unkeyed)
    record_applied(cache, unkeyed, ns, 7, 0.0)

    made = cache.get(A, 1.0)
    assert made is not None and made.txid == 3
    # the status the first mkdirs answered, not the directory's status now
    assert made.value == first_status != ns.stat("/d")
    created = cache.get(B, 1.0)
    assert created is not None and isinstance(created.value, FileStatus)
    status = created.value
    assert (status.path, status.is_dir, status.replication, status.block_size,
            status.mtime_ms, status.mode, status.owner, status.under_construction) == (
        "/d/f", False, 1, 1 << 20, 8, 0o644, "root", True)
    renamed = cache.get((b"a" * 16, 2), 1.0)
    assert renamed is not None and (renamed.value, renamed.txid) == ("/d/g", 5)
    deleted = cache.get((b"a" * 16, 3), 1.0)
    assert deleted is not None and deleted.value == ""
    assert len(cache) == 4


def test_a_full_cache_of_running_calls_keeps_them_all() -> None:
    cache = RetryCache(2, 600.0)
    keys = [(b"r" * 16, call) for call in range(1, 5)]
    for key in keys:
        assert cache.begin(key, 0.0) is None
    assert len(cache) == 4  # over the bound: none could go
    assert all(cache.get(key, 1.0) is not None for key in keys)
    cache.succeed(keys[0], "done", 1)
    cache.begin((b"n" * 16, 1), 2.0)  # the first finished one makes room
    assert cache.get(keys[0], 3.0) is None
    assert all(cache.get(key, 3.0) is not None for key in keys[1:])


def test_keyed_ops_are_exactly_the_ops_that_carry_a_call_key() -> None:
    """key_of reads the key only from KEYED_OPS: an op class given the fields but not
    listed would lose its key on replay (and a retry would run twice)."""
    carrying = {
        cls for cls in vars(ops).values()
        if isinstance(cls, type) and issubclass(cls, ops.Op)
        and "rpc_client_id" in cls.__struct_fields__
    }
    assert carrying == set(KEYED_OPS)
    assert key_of(SetPermissionOp("/f", 0o600)) is None
