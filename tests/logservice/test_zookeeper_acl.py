"""The log service's ZooKeeper tree against a local attacker (a real ZooKeeper server):
everything :class:`MetaStore` makes is closed to anybody without
``logservice.zookeeper_secret_file``'s secret, a tree an older xdfs left open is migrated
(its logs kept), and a tree under another secret is refused with one line."""

from __future__ import annotations

import itertools
import logging
import secrets

import msgspec
import pytest
from kazoo.security import OPEN_ACL_UNSAFE

from tests.logservice.conftest import SMALL, ZK_SECRET
from tests.zkfc.acl import assert_outsiders_locked_out, session
from xdfs.common.coordination import xdfs_acl
from xdfs.common.zookeeper import ZooKeeperEnsemble
from xdfs.errors import ConfigError
from xdfs.log import meta as m
from xdfs.log.zkmeta import MetaStore, connect

_roots = itertools.count(1)


def _root() -> str:
    return f"/acl-log-{next(_roots)}"


def test_outsiders_can_do_nothing_to_the_logs_metadata(zookeeper: ZooKeeperEnsemble) -> None:
    root = _root()
    zk = connect(zookeeper.hosts, 10.0, ZK_SECRET)
    try:
        store = MetaStore(zk, root)
        store.create(m.LogMeta("orders", SMALL))
        store.update("orders", lambda meta: msgspec.structs.replace(meta, writer_epoch=1))
        assert store.new_ledger_id() >= 1 and store.tso(10) >= 1
    finally:
        zk.stop()
        zk.close()
    checked = assert_outsiders_locked_out(zookeeper.hosts, ZK_SECRET, root)
    assert {root, f"{root}/logs", f"{root}/logs/orders", f"{root}/tso",
            f"{root}/ledger-ids"} <= set(checked)


def test_an_open_tree_is_migrated_and_a_foreign_one_refused(
    zookeeper: ZooKeeperEnsemble, caplog: pytest.LogCaptureFixture
) -> None:
    root = _root()
    old_meta = msgspec.msgpack.encode(m.LogMeta("old", SMALL))
    with session(zookeeper.hosts, None) as older:  # what an xdfs without ACLs made
        older.create(f"{root}/logs/old", old_meta, makepath=True)
        older.create(f"{root}/tso", b"41")
        assert older.get_acls(root)[0] == OPEN_ACL_UNSAFE
    zk = connect(zookeeper.hosts, 10.0, ZK_SECRET)
    try:
        with caplog.at_level(logging.WARNING, "xdfs.common.coordination"):
            store = MetaStore(zk, root)
        said = [r.getMessage() for r in caplog.records if "had no ACL" in r.getMessage()]
        assert len(said) == 1 and f"4 znode(s) under {root}" in said[0], said
        assert store.names() == ["old"] and store.tso(1) == 41  # nothing lost
        assert all(zk.get_acls(path)[0] == xdfs_acl(ZK_SECRET)
                   for path in (root, f"{root}/logs", f"{root}/logs/old", f"{root}/tso"))
    finally:
        zk.stop()
        zk.close()
    assert_outsiders_locked_out(zookeeper.hosts, ZK_SECRET, root)
    other = connect(zookeeper.hosts, 10.0, secrets.token_hex(32))
    try:
        with pytest.raises(ConfigError, match=(
                f"ZooKeeper znode {root} carries an ACL of another secret than "
                "logservice.zookeeper_secret_file's")):
            MetaStore(other, root)
    finally:
        other.stop()
        other.close()
