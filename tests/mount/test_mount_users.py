"""Owners through ``xdfs mount``: xdfs users and local uids map by name, an unknown xdfs
user shows as nobody, and with ``-o allow_other`` the NameNode still decides access (as
the mount's xdfs user: local root gets no more than that user)."""

from __future__ import annotations

import errno
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.datapath.conftest import LiveCluster
from tests.mount.conftest import Mount
from xdfs.client.client import Client

NOBODY = pwd.getpwnam("nobody")


def test_owners_map_by_name(client: Client, mount: Mount, base: str) -> None:
    client.write_file(f"{base}/f", b"x")
    client.set_owner(f"{base}/f", "daemon", "daemon")
    client.write_file(f"{base}/g", b"x")
    client.set_owner(f"{base}/g", "ghost-user", "ghost-group")
    root = mount.path / base.lstrip("/")
    f, g = os.stat(root / "f"), os.stat(root / "g")
    assert (f.st_uid, f.st_gid) == (pwd.getpwnam("daemon").pw_uid, pwd.getpwnam("daemon").pw_gid)
    assert (g.st_uid, g.st_gid) == (65534, 65534)  # no such local account: nobody/nogroup
    os.chown(root / "g", NOBODY.pw_uid, -1)  # a local uid goes back by its name
    assert client.stat(f"{base}/g").owner == "nobody"


def test_allow_other_keeps_checks_on_the_namenode(client: Client, live_cluster: LiveCluster,
                                                  base: str, tmp_path: Path) -> None:
    with_password = "alice-pw-1"
    client.add_user("alice", with_password)
    try:
        client.write_file(f"{base}/secret", b"root only")
        client.set_permission(f"{base}/secret", 0o600)
        client.set_permission(base, 0o777)
        mount = Mount(live_cluster, tmp_path / "mnt", tmp_path / "mount.log", "allow_other")
        mount.env.update(XDFS_USER="alice", XDFS_PASSWORD=with_password)
        mount.process.env.update(mount.env)
        mount.start()
        try:
            root = mount.path / base.lstrip("/")
            with pytest.raises(PermissionError) as raised:  # local root, xdfs alice
                (root / "secret").read_bytes()
            assert raised.value.errno == errno.EACCES
            (root / "mine").write_bytes(b"alice's")
            assert client.stat(f"{base}/mine").owner == "alice"
            assert os.stat(root / "mine").st_uid == os.getuid()  # the mount's own user
            seen = subprocess.run(  # another local user, let in by allow_other
                ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                 "--clear-groups", "cat", "mine"],
                cwd=root, capture_output=True, text=True, timeout=60)  # (tmp dirs are 0700)
            assert seen.returncode == 0 and seen.stdout == "alice's", seen.stderr
        finally:
            mount.stop()
    finally:
        client.remove_user("alice")
