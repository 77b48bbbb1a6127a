"""The pure pieces of fencing and epochs: the DataNode's epoch rule and its file, the
namespace's epoch (op, image), fencing-method parsing and the kill(NAME_DIR) method, and
the NameNode's verdict on a peer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xdfs.common.fencing import (
    FenceFailed,
    FenceMethod,
    Target,
    fence,
    kill_lock_holder,
    parse_methods,
    target_env,
)
from xdfs.common.files import DirLock, LockHolder, parse_lock_holder, probe_lock
from xdfs.datanode.epochs import EpochWatermark, Verdict, load_epoch, store_epoch
from xdfs.errors import ConfigError, InvalidArgument, StorageError, TakeoverRefused
from xdfs.namenode.ha import Position, peer_verdict
from xdfs.namenode.image.recovery import load_namespace, save_checkpoint
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.namenode.namespace.ops import NewEpochOp
from xdfs.namenode.namespace.tree import FIRST_EPOCH, Namespace
from xdfs.protocol.ha import HaStatus

# --- the DataNode's epoch rule ---------------------------------------------------------


def test_epoch_watermark_obeys_the_highest_seen_only() -> None:
    rule = EpochWatermark()
    assert rule.judge(0) is Verdict.OBEY  # a fresh data dir and a NameNode without epochs
    assert rule.judge(1) is Verdict.NEWER
    rule.raise_to(1)
    assert rule.judge(1) is Verdict.OBEY
    assert rule.judge(3) is Verdict.NEWER
    rule.raise_to(3)
    assert [rule.judge(e) for e in (0, 1, 2, 3)] == [Verdict.STALE] * 3 + [Verdict.OBEY]
    rule.raise_to(2)  # never lowered
    assert rule.highest == 3
    message = rule.stale_message("h:1", 2)
    assert "h:1" in message and "epoch 2" in message and "epoch 3" in message


def test_epoch_file_round_trip_and_damage(tmp_path: Path) -> None:
    assert load_epoch(tmp_path) == 0
    store_epoch(tmp_path, 7)
    assert load_epoch(tmp_path) == 7
    (tmp_path / "active_epoch").write_text("seven\n")
    with pytest.raises(StorageError, match="expected an epoch"):
        load_epoch(tmp_path)


# --- the namespace's epoch ---------------------------------------------------------------


def test_new_epoch_op_only_raises_and_survives_an_image(tmp_path: Path) -> None:
    ns = Namespace("root")
    assert ns.epoch == FIRST_EPOCH == 1
    ns.apply(NewEpochOp(2))
    for stale in (2, 1):
        with pytest.raises(InvalidArgument, match="not above"):
            ns.apply(NewEpochOp(stale))
    assert ns.epoch == 2
    with StorageDirectory(tmp_path / "nn") as sd:
        sd.format("CID", 1, 0)
        save_checkpoint([sd], ns, 5)
        loaded, txid = load_namespace([sd], Namespace)
    assert (loaded.epoch, txid) == (2, 5)


# --- fencing methods -----------------------------------------------------------------------


def test_parse_methods() -> None:
    assert parse_methods(["shell(kill -9 $target_pid)", " kill( /data/nn ) "]) == [
        FenceMethod("shell", "kill -9 $target_pid"), FenceMethod("kill", "/data/nn")]
    assert str(FenceMethod("shell", "true")) == "shell(true)"
    assert parse_methods(["shell(echo (nested))"]) == [FenceMethod("shell", "echo (nested)")]
    for bad in ("sshfence", "shell", "shell()", "kill(  )", "reboot(now)", "shell(x) y"):
        with pytest.raises(ConfigError, match="fencing_methods"):
            parse_methods([bad])


def test_target_environment_as_hdfs_names_it() -> None:
    assert target_env(Target("10.0.0.5:8020", 4242)) == {
        "target_address": "10.0.0.5:8020", "target_host": "10.0.0.5", "target_port": "8020",
        "target_pid": "4242"}
    assert "target_pid" not in target_env(Target("h:1"))  # unknown: not set


async def test_fence_tries_methods_in_order_and_refuses_when_none_succeeds(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    methods = parse_methods(["shell(exit 4)", f"shell(echo $target_port > {marker})"])
    used = await fence(methods, Target("127.0.0.1:9999"), 10)
    assert used == f"shell(echo $target_port > {marker})"
    assert marker.read_text() == "9999\n"
    with pytest.raises(TakeoverRefused, match="no fencing method configured"):
        await fence([], Target("h:1"), 10)
    slow = parse_methods(["shell(sleep 30)", "shell(false)"])
    with pytest.raises(TakeoverRefused) as refused:
        await fence(slow, Target("h:1"), 0.5)
    assert "shell(sleep 30): still running after 0.5 s" in refused.value.message
    assert "shell(false): exit status 1" in refused.value.message


def test_lock_file_records_pid_at_host(tmp_path: Path) -> None:
    lock = DirLock(tmp_path)
    lock.lock()
    try:
        assert probe_lock(tmp_path / "in_use.lock") == LockHolder(os.getpid(),
                                                                  socket.gethostname())
    finally:
        lock.unlock()
    assert probe_lock(tmp_path / "in_use.lock") is None  # free, and probing keeps it free
    assert parse_lock_holder("123\n") == LockHolder(123, "")  # older lock files: a bare pid
    assert parse_lock_holder("junk") == LockHolder(None, "")


def _locked_child(root: Path) -> subprocess.Popen[str]:
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from xdfs.common.files import DirLock
        DirLock(__import__("pathlib").Path({str(root)!r})).lock()
        print("locked", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # paused, as in the split-brain setup
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    return child


def test_kill_method_kills_the_paused_lock_holder(tmp_path: Path) -> None:
    child = _locked_child(tmp_path)
    try:
        outcome = kill_lock_holder(tmp_path, 30)
        assert f"killed pid {child.pid}" in outcome
        assert child.wait(30) == -9
        assert "gone" in kill_lock_holder(tmp_path, 30)  # nobody holds it: fenced already
    finally:
        child.kill()
        child.wait()


def test_kill_method_refuses_what_it_cannot_fence(tmp_path: Path) -> None:
    with pytest.raises(FenceFailed, match="does not exist"):
        kill_lock_holder(tmp_path / "typo", 1)
    lock = DirLock(tmp_path)
    lock.lock()  # held by this very process
    try:
        with pytest.raises(FenceFailed, match="not a process this method may kill"):
            kill_lock_holder(tmp_path, 1)
        (tmp_path / "in_use.lock").write_text("1@elsewhere\n")  # as NFS could show it
        with pytest.raises(FenceFailed, match="not on this host"):
            kill_lock_holder(tmp_path, 1)
    finally:
        lock.unlock()


# --- the NameNode's peer check -------------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "refuse"),
    [((1, 10), False), ((1, 11), True), ((2, 3), True), ((0, 99), False)],
)
def test_peer_verdict_compares_epoch_then_txid(peer: tuple[int, int], refuse: bool) -> None:
    status = HaStatus("backup", peer[0], peer[1], "CID", 7, 123)
    verdict, reason = peer_verdict(Position(1, 10), ("CID", 7), "p:1", status)
    assert verdict is refuse
    assert ("is ahead" in reason) is refuse


def test_peer_verdict_on_silent_or_foreign_peers() -> None:
    assert peer_verdict(Position(1, 1), ("CID", 7), "p:1", None) == (
        False, "peer p:1 did not answer")
    foreign = HaStatus("active", 9, 99, "OTHER", 7, 1)
    refuse, reason = peer_verdict(Position(1, 1), ("CID", 7), "p:1", foreign)
    assert not refuse and "not ours" in reason

