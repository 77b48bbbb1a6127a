"""The controllers' znodes and the blocking ZooKeeper operations on them (kazoo). Run on
one thread per controller, so they never interleave.

Under ``ha.zookeeper_parent``/<nameservice>:

* ``ActiveStandbyElectorLock`` (ephemeral): held by the elected controller, its
  :class:`ControllerIdentity` as JSON. Ephemeral: it goes when that controller's session
  ends (crash, partition longer than the session timeout, stop).
* ``ActiveBreadCrumb`` (persistent): the identity of the last NameNode made active; a
  winner finding another's name here fences that NameNode first. Written only in a
  transaction that checks the lock, on the winner's session: the write succeeds only while
  that session is alive, so while its ephemeral lock exists.
* ``controllers/<id>`` (ephemeral): each running controller's identity, so ``xdfs admin
  -failover`` knows whether the target's controller runs.

Every znode carries the ACL of :mod:`xdfs.common.coordination` (``ha.zookeeper_secret_file``).
An address read from a znode is never dialled as such: :func:`configured_namenode` and
:func:`configured_controller` answer the address ``[ha]`` gives that id, and refuse a znode
naming another one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from xdfs.config import HaConfig
from xdfs.errors import TakeoverRefused, XdfsError
from xdfs.protocol.zkfc import ControllerIdentity

log = logging.getLogger(__name__)

LOCK = "ActiveStandbyElectorLock"
BREADCRUMB = "ActiveBreadCrumb"
CONTROLLERS = "controllers"

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(ControllerIdentity)

Watch = Callable[[WatchedEvent], Any]


@dataclass(frozen=True)
class Paths:
    base: str  # parent/nameservice

    @classmethod
    def of(cls, parent: str, nameservice: str) -> Paths:
        return cls(f"{parent}/{nameservice}")

    @property
    def lock(self) -> str:
        return f"{self.base}/{LOCK}"

    @property
    def breadcrumb(self) -> str:
        return f"{self.base}/{BREADCRUMB}"

    def controller(self, nn_id: str) -> str:
        return f"{self.base}/{CONTROLLERS}/{nn_id}"


def encode(identity: ControllerIdentity) -> bytes:
    return _ENCODER.encode(identity)


def decode(data: bytes | None) -> ControllerIdentity | None:
    """The identity in a znode; None (logged) for data that is not one."""
    try:
        return _DECODER.decode(data or b"")
    except msgspec.DecodeError:
        log.warning("znode data is not a controller identity: %r", (data or b"")[:200])
        return None


def session_id(zk: KazooClient) -> int:
    client_id = zk.client_id
    return int(client_id[0]) if client_id else 0


@dataclass(frozen=True)
class JoinResult:
    won: bool
    other: ControllerIdentity | None  # won: the breadcrumb; lost: the lock holder


def try_acquire(zk: KazooClient, paths: Paths, me: ControllerIdentity,
                watch: Watch) -> JoinResult:
    """Create the lock, or learn who holds it (setting ``watch`` on it). A lock already
    owned by this session (a create retried after a lost connection) counts as won."""
    while True:
        try:
            zk.create(paths.lock, encode(me), ephemeral=True, makepath=True)
            return JoinResult(True, read_breadcrumb(zk, paths))
        except NodeExistsError:
            pass
        try:
            data, stat = zk.get(paths.lock, watch=watch)
        except NoNodeError:
            continue  # released between our create and get: try again
        if stat.ephemeralOwner == session_id(zk):
            return JoinResult(True, read_breadcrumb(zk, paths))
        return JoinResult(False, decode(data))


def release(zk: KazooClient, paths: Paths, me: ControllerIdentity,
            delete_breadcrumb: bool) -> bool:
    """Delete the lock if this session holds it, and the breadcrumb when asked and it names
    us (so the next winner does not fence a NameNode that stepped down). True if the lock
    was ours."""
    stat = _own_lock(zk, paths)
    if stat is None:
        return False
    transaction = zk.transaction()
    if delete_breadcrumb:
        found = _read(zk, paths.breadcrumb)
        if found is not None and decode(found[0]) == me:
            transaction.delete(paths.breadcrumb, version=found[1].version)
    transaction.delete(paths.lock, version=stat.version)
    _commit(transaction, "releasing the lock")
    return True


def read_breadcrumb(zk: KazooClient, paths: Paths) -> ControllerIdentity | None:
    return _identity_at(zk, paths.breadcrumb)


def write_breadcrumb(zk: KazooClient, paths: Paths, me: ControllerIdentity) -> None:
    """Name ``me`` as the last active, only while this session holds the lock.
    LostLock otherwise."""
    lock = _own_lock(zk, paths)
    if lock is None:
        raise LostLock("the lock is gone or belongs to another session")
    transaction = zk.transaction()
    transaction.check(paths.lock, lock.version)
    crumb = _read(zk, paths.breadcrumb)
    if crumb is None:
        transaction.create(paths.breadcrumb, encode(me))
    else:
        transaction.set_data(paths.breadcrumb, encode(me), version=crumb[1].version)
    _commit(transaction, "writing the breadcrumb")


def read_holder(zk: KazooClient, paths: Paths) -> ControllerIdentity | None:
    """Who holds the lock now (None: nobody, or not an identity)."""
    return _identity_at(zk, paths.lock)


def register(zk: KazooClient, paths: Paths, me: ControllerIdentity) -> None:
    """Write our registration, replacing one a dead predecessor's session left."""
    path = paths.controller(me.id)
    for _ in range(3):
        try:
            zk.create(path, encode(me), ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        try:
            _, stat = zk.get(path)
            if stat.ephemeralOwner == session_id(zk):
                zk.set(path, encode(me), version=stat.version)
                return
            zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            continue
    raise LostLock(f"could not register {path}: it keeps changing")


def read_registration(zk: KazooClient, paths: Paths, nn_id: str) -> ControllerIdentity | None:
    return _identity_at(zk, paths.controller(nn_id))


def _read(zk: KazooClient, path: str) -> tuple[bytes, Any] | None:
    """(data, stat) of ``path``; None when it does not exist."""
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return None
    return data, stat


def _identity_at(zk: KazooClient, path: str) -> ControllerIdentity | None:
    found = _read(zk, path)
    return None if found is None else decode(found[0])


def _own_lock(zk: KazooClient, paths: Paths) -> Any:
    """The lock's stat when this session holds it, else None."""
    found = _read(zk, paths.lock)
    if found is None or found[1].ephemeralOwner != session_id(zk):
        return None
    return found[1]


class LostLock(XdfsError):
    """A write meant for the lock holder, by a session that no longer holds it. The
    controller handles it itself (it stops acting as the holder), never sends it over the
    wire: no code of its own."""


def _commit(transaction: Any, what: str) -> None:
    results = transaction.commit()
    failures = [result for result in results if isinstance(result, Exception)]
    if failures:
        raise LostLock(f"{what} failed: {failures[0]!r}")


def configured_namenode(ha: HaConfig, found: ControllerIdentity, znode: str) -> str:
    """The address ``ha.namenodes`` gives ``found``'s NameNode, which must be the one the
    znode names; TakeoverRefused otherwise (nothing is sent to a znode's own address)."""
    return _configured(ha.namenodes, "ha.namenodes", found.id, found.namenode, znode,
                       "NameNode")


def configured_controller(ha: HaConfig, nn_id: str, named: str, znode: str) -> str:
    """The address ``ha.controllers`` gives ``nn_id``'s controller, which must be the one
    (``named``) the znode names; TakeoverRefused otherwise (the controllers' secret is sent
    only there)."""
    return _configured(ha.controllers, "ha.controllers", nn_id, named, znode, "controller")


def _configured(table: dict[str, str], key: str, nn_id: str, named: str, znode: str,
                what: str) -> str:
    configured = table.get(nn_id, "")
    if configured and configured == named:
        return configured
    said = f"{key}[{nn_id}] = {configured}" if configured else f"{nn_id} is not in {key}"
    message = (f"ZooKeeper's {znode} names {what} {nn_id} at {named}, but {said}: refusing "
               "to contact an address only ZooKeeper names")
    raise TakeoverRefused(message)


def find_controller(quorum: str, secret: str, paths: Paths, nn_id: str,
                    timeout_s: float) -> ControllerIdentity:
    """The registration of ``nn_id``'s controller, through a short-lived session (for
    ``xdfs admin``). Unavailable when ZooKeeper or the controller is not there."""
    from xdfs.common.coordination import start_session
    from xdfs.errors import Unavailable

    quiet = logging.getLogger("xdfs.zkfc.lookup")
    quiet.setLevel(logging.CRITICAL)  # a command prints one line, not kazoo's reconnects
    zk = start_session(quorum, secret, timeout_s, quiet)
    try:
        found = read_registration(zk, paths, nn_id)
    finally:
        zk.stop()
        zk.close()
    if found is None:
        raise Unavailable(f"no controller of NameNode {nn_id} is registered in ZooKeeper "
                          f"({paths.controller(nn_id)}): is its xdfs zkfc running?")
    return found
