"""The one place an xdfs ZooKeeper session starts (kazoo): the failover controllers,
``xdfs admin -failover`` and the log service all come through :func:`new_client`.

Every session logs in with ZooKeeper's ``digest`` scheme as :data:`ZK_USER`, the password
being the cluster's ZooKeeper secret (``ha.zookeeper_secret_file``,
``logservice.zookeeper_secret_file``), and creates every znode (``makepath`` parents and
``ensure_path`` included: kazoo applies ``default_acl`` to them) with one ACL: all rights
to that digest identity, none to anybody else. ZooKeeper keeps only the SHA-1 digest of
``user:secret`` in the ACL; the secret itself goes to the ZooKeeper servers in the
session's auth packet.

A tree made before xdfs set ACLs (world-writable) is migrated by :func:`secure_tree`, one
log line, children before their parent so an interrupted migration is finished by the
next start; a tree carrying any other ACL is refused with one line (:class:`ConfigError`).
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_digest_acl

from xdfs.errors import ConfigError, InternalError, Unavailable

log = logging.getLogger(__name__)

#: The digest identity every xdfs session authenticates as (the secret tells clusters apart).
ZK_USER = "xdfs"


def xdfs_acl(secret: str) -> list[ACL]:
    """All rights to the holders of ``secret``, none to anybody else."""
    return [make_digest_acl(ZK_USER, secret, all=True)]


def new_client(hosts: str, secret: str, timeout_s: float, *,
               logger: logging.Logger | None = None,
               connection_retry: KazooRetry | None = None) -> KazooClient:
    """A kazoo client (not started) that authenticates with ``secret`` and creates every
    znode with :func:`xdfs_acl`. kazoo sends the auth again on every reconnect."""
    options: dict[str, Any] = {"logger": logger} if logger is not None else {}
    if connection_retry is not None:
        options["connection_retry"] = connection_retry
    return KazooClient(hosts=hosts, timeout=timeout_s,
                       auth_data=[("digest", f"{ZK_USER}:{secret}")],
                       default_acl=xdfs_acl(secret), **options)


def start_session(hosts: str, secret: str, timeout_s: float,
                  logger: logging.Logger) -> KazooClient:
    """A started session (blocking); Unavailable when none within ``timeout_s``."""
    zk = new_client(hosts, secret, timeout_s, logger=logger)
    try:
        zk.start(timeout_s)
    except Exception as exc:  # kazoo's timeout (or a failed auth) has no xdfs meaning
        zk.close()
        raise Unavailable(f"no ZooKeeper session with {hosts} within {timeout_s} s "
                          f"({type(exc).__name__})") from None
    return zk


def secure_tree(zk: KazooClient, root: str, key: str) -> int:
    """Make sure ``root`` exists and it and everything under it carry the ACL of ``zk``
    (a client of :func:`new_client`, whose ``default_acl`` is :func:`xdfs_acl`);
    how many znodes were migrated from the open ACL of an older xdfs. ``root`` carrying
    xdfs's ACL stands for the whole tree (nobody else can create under it, and a migration
    sets the root last). ConfigError (``key`` names the secret's setting) for a znode with
    another ACL, or one this session may not read."""
    ours = list(zk.default_acl or ())
    if not ours:
        raise InternalError("secure_tree needs a session of coordination.new_client")
    try:
        zk.ensure_path(root)
    except NoAuthError:  # a parent on the way is someone else's
        raise _refused(root, key) from None
    if _acl_of(zk, root, key) == ours:
        return 0
    migrated = _migrate(zk, root, ours, key)
    log.warning("ZooKeeper: %d znode(s) under %s had no ACL (made by an older xdfs): set "
                "the digest ACL of %s on them", migrated, root, key)
    return migrated


def _migrate(zk: KazooClient, path: str, ours: list[ACL], key: str) -> int:
    """Children first, then ``path``; the count of znodes whose ACL was set."""
    acl = _acl_of(zk, path, key)
    if acl is None:
        return 0  # gone meanwhile (an ephemeral znode, a ledger id)
    if acl != ours and acl != OPEN_ACL_UNSAFE:
        raise _refused(path, key)
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return 0
    count = sum(_migrate(zk, f"{path.rstrip('/')}/{child}", ours, key) for child in children)
    if acl == ours:
        return count
    try:
        zk.set_acls(path, ours)
    except NoNodeError:
        return count
    except NoAuthError:
        raise _refused(path, key) from None
    return count + 1


def _acl_of(zk: KazooClient, path: str, key: str) -> list[ACL] | None:
    try:
        acl, _ = zk.get_acls(path)
    except NoNodeError:
        return None
    except NoAuthError:
        raise _refused(path, key) from None
    return list(acl)


def _refused(path: str, key: str) -> ConfigError:
    return ConfigError(
        f"ZooKeeper znode {path} carries an ACL of another secret than {key}'s: give every "
        f"process of this cluster the same {key}, or delete the tree (zkCli.sh, "
        "authenticated as its owner) to start afresh")
