"""The controllers' ZooKeeper tree against a local attacker, with real processes: every
znode xdfs makes is closed to anybody without the ZooKeeper secret, a tree an older xdfs
left open is migrated, and an address that only a znode names (a tampered breadcrumb, lock
or registration) is never fenced nor sent the controllers' secret."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

from kazoo.security import OPEN_ACL_UNSAFE

from tests.zkfc.acl import assert_outsiders_locked_out, session, tree
from tests.zkfc.conftest import HaPair
from xdfs.common.coordination import xdfs_acl
from xdfs.common.secrets import new_secret_file, read_secret_file
from xdfs.common.zookeeper import ZooKeeperEnsemble
from xdfs.config import load_config
from xdfs.protocol.zkfc import ControllerIdentity
from xdfs.zkfc import znodes


@contextlib.contextmanager
def listener() -> Iterator[socket.socket]:
    """A port an attacker listens on: the kernel completes a connection to it even though
    nobody accepts, so :func:`connected` tells whether anyone dialled it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def connected(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def address(sock: socket.socket) -> str:
    host, port = sock.getsockname()
    return f"{host}:{port}"


def _secret(pair: HaPair) -> str:
    return read_secret_file(pair.zookeeper_secret_file, "zookeeper secret")


def _paths(pair: HaPair) -> znodes.Paths:
    ha = load_config(pair.conf).ha
    return znodes.Paths.of(ha.zookeeper_parent, ha.nameservice)


def _started(pair_factory, ensemble: ZooKeeperEnsemble) -> tuple[HaPair, str, str]:
    pair: HaPair = pair_factory(ensemble.hosts)
    pair.start_namenodes("nn1", "nn2")
    pair.start_controller("nn1")
    pair.start_controller("nn2")
    active = pair.wait_one_active()
    return pair, active, "nn2" if active == "nn1" else "nn1"


def test_outsiders_can_do_nothing_to_the_controllers_znodes(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair, active, _ = _started(pair_factory, ensemble)
    paths = _paths(pair)
    parent = paths.base.rsplit("/", 1)[0]
    checked = assert_outsiders_locked_out(ensemble.hosts, _secret(pair), parent)
    assert {paths.base, paths.lock, paths.breadcrumb, paths.controller("nn1"),
            paths.controller("nn2")} <= set(checked)
    assert pair.state(active) == "active"


def test_a_breadcrumb_naming_an_unconfigured_address_is_not_fenced(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair: HaPair = pair_factory(ensemble.hosts)
    pair.start_namenodes("nn1", "nn2")
    paths = _paths(pair)
    with listener() as evil:
        # a breadcrumb naming nn1 at the attacker's port, planted in a tree an older xdfs
        # left open: the migration keeps it, the address rule refuses it
        forged = ControllerIdentity(paths.base.rsplit("/", 1)[1], "nn1", address(evil),
                                    pair.controller_addresses["nn1"])
        with session(ensemble.hosts, None) as attacker:
            attacker.create(paths.breadcrumb, znodes.encode(forged), makepath=True)
        controller = pair.start_controller("nn2")
        refusal = "refusing to contact an address only ZooKeeper names"
        dialled: list[bool] = []

        def decided() -> bool:
            if connected(evil):
                dialled.append(True)
            return bool(dialled) or refusal in controller.log_text()

        pair.wait(decided, "the controller refuses (or dials) the breadcrumb's address")
        assert not dialled, "the controller dialled the breadcrumb's address"
        assert f"names NameNode nn1 at {address(evil)}" in controller.log_text()
        assert pair.state("nn2") == "standby", "made active without fencing the last one"


def test_failover_never_calls_a_controller_address_only_zookeeper_names(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair, active, standby = _started(pair_factory, ensemble)
    paths = _paths(pair)
    nameservice = paths.base.rsplit("/", 1)[1]
    with listener() as evil, session(ensemble.hosts, _secret(pair)) as zk:
        # the standby's registration rewritten: xdfs admin must not send the secret there
        real = zk.get(paths.controller(standby))[0]
        zk.set(paths.controller(standby), znodes.encode(ControllerIdentity(
            nameservice, standby, pair.addresses[standby], address(evil))))
        result = pair.admin("-failover", active, standby)
        assert result.returncode == 1, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "TakeoverRefused" in lines[0] and address(evil) in lines[0]
        assert not connected(evil)
        zk.set(paths.controller(standby), real)
        # the lock rewritten to name the active's controller at the attacker's port: the
        # standby's controller must not ask it to cede there
        lock = zk.get(paths.lock)[0]
        holder = znodes.decode(lock)
        assert holder is not None and holder.id == active
        zk.set(paths.lock, znodes.encode(ControllerIdentity(
            nameservice, active, holder.namenode, address(evil))))
        result = pair.admin("-failover", active, standby)
        assert result.returncode == 1 and "TakeoverRefused" in result.stderr, result
        assert not connected(evil)
        assert pair.state(active) == "active" and pair.state(standby) == "standby"
        assert "graceful failover refused" in pair.controllers[standby].log_text()


def test_a_tree_left_open_by_an_older_xdfs_is_migrated_and_a_foreign_one_refused(
    pair_factory, ensemble: ZooKeeperEnsemble
) -> None:
    pair: HaPair = pair_factory(ensemble.hosts)
    pair.start_namenodes("nn1", "nn2")
    paths = _paths(pair)
    parent = paths.base.rsplit("/", 1)[0]
    nameservice = paths.base.rsplit("/", 1)[1]
    identity = ControllerIdentity(nameservice, "nn1", pair.addresses["nn1"],
                                  pair.controller_addresses["nn1"])
    with session(ensemble.hosts, None) as old:  # what an xdfs without ACLs made
        old.create(paths.breadcrumb, znodes.encode(identity), makepath=True)
        old.create(f"{paths.base}/{znodes.CONTROLLERS}", b"")
        assert old.get_acls(parent)[0] == OPEN_ACL_UNSAFE
    controller = pair.start_controller("nn2")
    assert "had no ACL (made by an older xdfs)" in controller.log_text()
    pair.wait(lambda: pair.state("nn2") == "active", "nn2 active on the migrated tree")
    checked = assert_outsiders_locked_out(ensemble.hosts, _secret(pair), parent)
    assert paths.breadcrumb in checked and f"{paths.base}/{znodes.CONTROLLERS}" in checked
    assert pair.transitions("nn1")[0].method == "transition_to_standby"  # it was fenced
    with session(ensemble.hosts, _secret(pair)) as zk:
        assert all(zk.get_acls(path)[0] == xdfs_acl(_secret(pair))
                   for path in tree(zk, parent))
    # a tree under another secret: one line, nothing changed
    foreign = pair.base / "foreign.secret"
    new_secret_file(foreign)
    refused = subprocess.run(
        [sys.executable, "-m", "xdfs", "--conf", str(pair.conf), "-D",
         f"ha.zookeeper_secret_file={foreign}", "zkfc", "--id", "nn1", "--rpc-address",
         "127.0.0.1:0"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1, refused
    last = refused.stderr.strip().splitlines()[-1]  # (after the server's log lines)
    assert last.startswith("zkfc cannot start: ConfigError: ZooKeeper znode ") and (
        "carries an ACL of another secret than ha.zookeeper_secret_file's") in last, last
    assert pair.state("nn2") == "active"
