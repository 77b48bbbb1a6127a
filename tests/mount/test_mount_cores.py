"""The pure cores of ``xdfs mount``: options, the inode table, the write rule, owners and
errno values."""

from __future__ import annotations

import errno
import os
import pwd

import pytest

from xdfs import errors
from xdfs.mount.errnos import errno_of
from xdfs.mount.handles import Handles, OpenFile
from xdfs.mount.inodes import ROOT_INODE, InodeTable, is_temp_name, temp_name
from xdfs.mount.options import MountOptions, parse_options
from xdfs.mount.users import UserMap


def test_options_parse_and_refuse() -> None:
    options = parse_options(("ro,attr_timeout=5", "allow_other", "readdir_page=10"))
    assert options == MountOptions(ro=True, allow_other=True, attr_timeout=5.0,
                                   readdir_page=10)
    assert {"ro", "allow_other", "fsname=xdfs"} <= options.fuse_options()
    assert "default_permissions" not in options.fuse_options()  # the NameNode checks
    for bad, why in [("nope", "unknown mount option"), ("ro=1", "takes no value"),
                     ("attr_timeout", "needs a value"), ("attr_timeout=x", "not a number"),
                     ("entry_timeout=-1", "must not be negative"),
                     ("call_timeout=0", "must be positive")]:
        with pytest.raises(errors.InvalidArgument, match=why):
            parse_options((bad,))


def test_inode_table_paths_renames_and_forgets() -> None:
    table = InodeTable("/", root_id=16385)
    assert table.inode_of(16385) == ROOT_INODE and table.path(ROOT_INODE) == "/"
    d = table.remember(ROOT_INODE, "d", 20)
    f = table.remember(d, "f", 21)
    assert table.path(f) == "/d/f"
    table.moved(ROOT_INODE, "d", ROOT_INODE, "e")
    assert table.path(f) == "/e/f"  # a directory rename moves everything under it
    table.remember(d, "f", 21)
    table.forget(f, 1)
    assert table.path(f) == "/e/f"  # still one reference
    table.forget(f, 1)
    with pytest.raises(KeyError):
        table.path(f)
    assert table.remember(ROOT_INODE, "g", 22) == 22
    assert table.remember(d, "g2", 22) == 22 and table.path(22) == "/e/g2"  # moved elsewhere


def test_temp_names_hide_files_being_written() -> None:
    table = InodeTable("/", root_id=1)
    temp = temp_name("report.csv")
    assert temp.startswith(".report.csv.xdfs-part-") and is_temp_name(temp)
    assert not is_temp_name(".report.csv") and not is_temp_name("report.csv")
    assert len(temp_name("x" * 255).encode()) <= 255
    ino = table.remember(ROOT_INODE, "report.csv", 30, temp)
    assert table.pending(ROOT_INODE, "report.csv") == ino
    assert table.path(ino) == f"/{temp}"
    table.committed(ino)
    assert table.path(ino) == "/report.csv" and table.pending(ROOT_INODE, "report.csv") is None


def test_writes_only_at_the_end() -> None:
    handle = OpenFile(5, "/f", True, end=100)
    assert handle.write_allowed(100) and not handle.write_allowed(0)
    assert not handle.write_allowed(150)  # a hole: zeros xdfs would have to write
    handle.wrote(10)
    assert handle.write_allowed(110)
    handles: Handles[OpenFile] = Handles()
    fh = handles.add(handle)
    assert handles.get(fh) is handle and handles.pop(fh) is handle and handles.pop(fh) is None


def test_owners_map_by_name() -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    users = UserMap("alice-xdfs", uid=1234, gid=1234, unknown_uid=65534)
    assert users.uid_of("alice-xdfs") == 1234  # the mount's own user is the mounting uid
    assert users.uid_of("root") == 0 and users.gid_of("root") == 0
    assert users.uid_of("no-such-user-here") == 65534
    assert users.gid_of("no-such-group-here") == 65534
    assert users.user_of(1234) == "alice-xdfs" and users.user_of(0) == "root"
    assert users.user_of(987654) is None and users.group_of(987654) is None
    assert me


def test_errnos() -> None:
    assert errno_of(errors.NotFound("x")) == errno.ENOENT
    assert errno_of(errors.DirectoryNotEmpty("x")) == errno.ENOTEMPTY
    assert errno_of(errors.AccessDenied("x")) == errno.EACCES
    assert errno_of(errors.DSQuotaExceeded("x")) == errno.EDQUOT
    assert errno_of(errors.Unavailable("x")) == errno.EIO
