"""Storage directory layout: format, VERSION, seen_txid, in_use.lock, fault hooks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xdfs.common.faults import FAULTS, arm_faults_from_env, fault_point
from xdfs.common.files import atomic_write
from xdfs.common.images import (
    ckpt_name,
    format_md5_file,
    md5_name,
    parse_image_name,
    parse_md5_file,
)
from xdfs.errors import StorageError
from xdfs.namenode.image.storage import StorageDirectory, VersionInfo, format_version, parse_version
from xdfs.namenode.namespace.ops import LAYOUT_VERSION


@pytest.fixture(autouse=True)
def _disarm() -> object:
    yield None
    FAULTS.disarm()


def test_format_creates_layout(tmp_path: Path) -> None:
    with StorageDirectory(tmp_path / "nn") as sd:
        info = sd.format("CID-1", 1234, 1_700_000_000_000)
        assert sorted(p.name for p in (tmp_path / "nn").iterdir()) == ["current", "in_use.lock"]
        assert sorted(p.name for p in sd.current.iterdir()) == ["VERSION", "seen_txid"]
        assert (sd.current / "seen_txid").read_text() == "0\n"
        text = (sd.current / "VERSION").read_text()
        for line in ("namespaceID=1234", "clusterID=CID-1", "cTime=1700000000000",
                     "storageType=NAME_NODE", f"layoutVersion={LAYOUT_VERSION}"):
            assert line in text.splitlines()
        assert sd.read_version() == info == VersionInfo(1234, "CID-1", 1_700_000_000_000)
        assert sd.is_formatted()
        holder = (sd.root / "in_use.lock").read_text().strip()
        assert holder == f"{os.getpid()}@{socket.gethostname()}"  # as HDFS: pid@host


def test_format_refuses_non_empty_without_force(tmp_path: Path) -> None:
    root = tmp_path / "nn"
    root.mkdir()
    (root / "precious").write_text("data")
    with StorageDirectory(root) as sd:
        with pytest.raises(StorageError, match=r"not empty \(precious\).*force"):
            sd.format("CID-1", 1, 1)
        assert (root / "precious").exists() and not sd.is_formatted()
        sd.format("CID-1", 1, 1, force=True)
        assert sd.is_formatted()
        # formatting again needs force too, and force wipes current/
        (sd.current / "edits_0000000000000000001-0000000000000000002").write_bytes(b"x")
        with pytest.raises(StorageError, match="not empty"):
            sd.format("CID-2", 2, 2)
        sd.format("CID-2", 2, 2, force=True)
        assert sorted(p.name for p in sd.current.iterdir()) == ["VERSION", "seen_txid"]
        assert sd.read_version().cluster_id == "CID-2"


def test_unformatted_dir_is_a_clear_error(tmp_path: Path) -> None:
    with StorageDirectory(tmp_path) as sd, pytest.raises(StorageError, match="not formatted"):
        sd.read_version()


def test_version_parse_errors() -> None:
    good = format_version(VersionInfo(5, "CID", 7))
    assert parse_version(good) == VersionInfo(5, "CID", 7)
    assert parse_version(good + "extraKey=1\n") == VersionInfo(5, "CID", 7)  # tolerated
    with pytest.raises(StorageError, match="missing clusterID"):
        parse_version(good.replace("clusterID=CID\n", ""), "X/VERSION")
    with pytest.raises(StorageError, match="bad number"):
        parse_version(good.replace("namespaceID=5", "namespaceID=five"))
    with pytest.raises(StorageError, match="line 2: expected key=value"):
        parse_version("# c\nnonsense\n")
    with pytest.raises(StorageError, match="storageType is DATA_NODE"):
        parse_version(good.replace("NAME_NODE", "DATA_NODE"))


def test_seen_txid_is_atomic_and_never_lowered(tmp_path: Path) -> None:
    with StorageDirectory(tmp_path) as sd:
        sd.format("C", 1, 1)
        sd.write_seen_txid(10)
        assert sd.read_seen_txid() == 10
        sd.write_seen_txid(5)
        assert sd.read_seen_txid() == 10
        # a crash between the temp write and the rename leaves the old value
        with FAULTS.armed("storage.before_rename", RuntimeError("crash")), \
                pytest.raises(RuntimeError):
            sd.write_seen_txid(20)
        assert sd.read_seen_txid() == 10
        assert (sd.current / "seen_txid.tmp").read_text() == "20\n"
        (sd.current / "seen_txid").write_text("garbage")
        with pytest.raises(StorageError, match="seen_txid: expected a txid"):
            sd.read_seen_txid()


def test_atomic_write_replaces(tmp_path: Path) -> None:
    path = tmp_path / "f"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert not (tmp_path / "f.tmp").exists()


def test_lock_held_against_second_opener_in_process(tmp_path: Path) -> None:
    first = StorageDirectory(tmp_path / "nn")
    first.lock()
    second = StorageDirectory(tmp_path / "nn")
    with pytest.raises(StorageError, match=rf"is locked by pid {os.getpid()}"):
        second.lock()
    with pytest.raises(StorageError, match="locked by pid"):
        second.format("C", 1, 1)
    first.unlock()
    second.lock()  # free again
    assert second.locked
    second.unlock()


def test_lock_held_against_another_process(tmp_path: Path) -> None:
    root = tmp_path / "nn"
    script = textwrap.dedent(f"""
        import sys, time
        from xdfs.namenode.image.storage import StorageDirectory
        sd = StorageDirectory({str(root)!r})
        sd.lock()
        print("locked", flush=True)
        sys.stdin.readline()
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "locked"
        sd = StorageDirectory(root)
        with pytest.raises(StorageError, match=rf"is locked by pid {child.pid}\b"):
            sd.lock()
        # and the child sees us the same way once it is gone and we hold it
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == 0
        sd.lock()
        other = subprocess.run(
            [sys.executable, "-c",
             f"from xdfs.namenode.image.storage import StorageDirectory\n"
             f"StorageDirectory({str(root)!r}).lock()"],
            capture_output=True, text=True, timeout=60,
        )
        assert other.returncode != 0
        assert f"is locked by pid {os.getpid()}" in other.stderr
        sd.unlock()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_image_names_and_md5_format() -> None:
    assert parse_image_name("fsimage_0000000000000000042") == ("image", 42)
    assert parse_image_name("fsimage.ckpt_0000000000000000042") == ("ckpt", 42)
    assert parse_image_name("fsimage_0000000000000000042.md5") == ("md5", 42)
    assert parse_image_name("fsimage_42") is None
    assert parse_image_name("edits_0000000000000000001-0000000000000000002") is None
    text = format_md5_file("ab" * 16, "fsimage_0000000000000000042")
    assert text == "abababababababababababababababab  fsimage_0000000000000000042\n"
    assert parse_md5_file(text, "x") == ("ab" * 16, "fsimage_0000000000000000042")
    assert parse_md5_file("AB" * 16 + " *f\n", "x") == ("ab" * 16, "f")  # md5sum -b
    with pytest.raises(StorageError, match="not an md5 file"):
        parse_md5_file("zz  f\n", "x")


def test_images_lists_complete_ones_newest_first(tmp_path: Path) -> None:
    with StorageDirectory(tmp_path) as sd:
        sd.format("C", 1, 1)
        for txid in (3, 9, 5):
            sd.image_path(txid).write_bytes(b"")
            (sd.current / md5_name(txid)).write_text("")
        sd.image_path(11).write_bytes(b"")  # no md5: incomplete
        (sd.current / ckpt_name(12)).write_bytes(b"")
        assert sd.images() == [9, 5, 3]


def test_fault_registry_actions() -> None:
    calls: list[str] = []
    fault_point("editlog.before_fsync")  # disarmed: nothing
    FAULTS.arm("editlog.before_fsync", calls.append)
    fault_point("editlog.before_fsync")
    fault_point("editlog.after_fsync")
    assert calls == ["editlog.before_fsync"]
    FAULTS.arm("editlog.before_fsync", OSError(5, "EIO"), skip=2, times=1)
    fault_point("editlog.before_fsync")
    fault_point("editlog.before_fsync")
    with pytest.raises(OSError, match="EIO"):
        fault_point("editlog.before_fsync")
    fault_point("editlog.before_fsync")  # fired its one time: disarmed
    with pytest.raises(KeyError, match="unknown fault point"):
        FAULTS.arm("no.such.point", calls.append)
    FAULTS.register("server.before_reply", "the reply is about to be sent")
    FAULTS.arm("server.before_reply", calls.append)
    fault_point("server.before_reply")
    assert calls[-1] == "server.before_reply"
    FAULTS.disarm()
    assert not FAULTS


def test_faults_from_env_exit_a_real_process(tmp_path: Path) -> None:
    assert arm_faults_from_env({}) == []
    with pytest.raises(ValueError, match="exit, kill or stop"):
        arm_faults_from_env({"XDFS_FAULTS": "editlog.before_fsync=explode"})
    script = textwrap.dedent("""
        from xdfs.common.faults import arm_faults_from_env, fault_point
        arm_faults_from_env()
        fault_point("editlog.before_fsync")
        print("passed once", flush=True)
        fault_point("editlog.before_fsync")
        print("not reached", flush=True)
    """)
    env = {**os.environ, "XDFS_FAULTS": "editlog.before_fsync=exit@1"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 86
    assert result.stdout == "passed once\n"
    env["XDFS_FAULTS"] = "editlog.before_fsync=kill"
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == -9
