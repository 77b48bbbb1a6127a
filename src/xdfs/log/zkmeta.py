"""The logs' metadata in ZooKeeper (kazoo, blocking: callers run it in a thread).

Znodes under ``logservice.zookeeper_root``::

    logs/<name>        msgpack LogMeta; every change a CAS on the znode version
    ledger-ids/id-N    sequential znodes, created and deleted at once: the sequence hands
                       out ledger ids, increasing over every log (so LSNs increase)
    tso                the timestamp oracle's next value (CAS)

:meth:`MetaStore.update` is the read-modify-CAS loop: the change function is a pure rule of
:mod:`xdfs.log.meta` and is applied again on a fresh read when the version moved, so a
rule that checks the writer epoch sees a newer writer and raises LogFenced.

The session and every znode's ACL come from :mod:`xdfs.common.coordination`
(``logservice.zookeeper_secret_file``); :class:`MetaStore` secures the root (an older
world-writable tree is migrated) before it uses it.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from typing import TypeVar

import msgspec
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from xdfs.common.coordination import secure_tree, start_session
from xdfs.errors import InvalidArgument, LogExists, LogNotFound, Unavailable
from xdfs.log.meta import LogMeta

T = TypeVar("T")

SECRET_KEY = "logservice.zookeeper_secret_file"

LOG_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(LogMeta).decode


def guarded(call: Callable[[], T]) -> T:
    """``call()`` with kazoo's failures (connection loss, an expired session) turned into
    Unavailable: retriable, and nothing of ours changed unless ZooKeeper says so."""
    try:
        return call()
    except KazooException as exc:
        raise Unavailable(f"ZooKeeper: {type(exc).__name__} {exc}".strip()) from None


def check_log_name(name: str) -> str:
    if not LOG_NAME_RE.match(name):
        raise InvalidArgument(f"bad log name {name!r}: 1-128 letters, digits, '_', '.', '-' "
                              "(not starting with '.' or '-')")
    return name


def connect(quorum: str, timeout_s: float, secret: str) -> KazooClient:
    """A session authenticated with the ZooKeeper ``secret``, its znodes ACL'd to it."""
    if not quorum:
        raise InvalidArgument("no ZooKeeper quorum: set logservice.zookeeper_quorum")
    return start_session(quorum, secret, timeout_s, logging.getLogger("xdfs.log.zookeeper"))


class MetaStore:
    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root.rstrip("/") or "/xdfs-log"
        secure_tree(zk, self.root, SECRET_KEY)
        for path in ("logs", "ledger-ids"):
            zk.ensure_path(f"{self.root}/{path}")

    def _path(self, name: str) -> str:
        return f"{self.root}/logs/{check_log_name(name)}"

    def create(self, meta: LogMeta) -> None:
        try:
            self.zk.create(self._path(meta.name), _encode(meta))
        except NodeExistsError:
            raise LogExists(f"log {meta.name!r} exists already") from None

    def get(self, name: str) -> tuple[LogMeta, int]:
        try:
            data, stat = self.zk.get(self._path(name))
        except NoNodeError:
            raise LogNotFound(f"no log {name!r}") from None
        return _decode(data), stat.version

    def update(self, name: str, change: Callable[[LogMeta], LogMeta]) -> LogMeta:
        """Apply ``change`` and CAS the result; again on a fresh read when it raced."""
        while True:
            meta, version = self.get(name)
            fresh = change(meta)
            if fresh == meta:
                return meta
            try:
                self.zk.set(self._path(name), _encode(fresh), version=version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise LogNotFound(f"log {name!r} was deleted") from None
            return fresh

    def names(self) -> list[str]:
        return sorted(self.zk.get_children(f"{self.root}/logs"))

    def delete(self, name: str) -> None:
        try:
            self.zk.delete(self._path(name))
        except NoNodeError:
            raise LogNotFound(f"no log {name!r}") from None

    def new_ledger_id(self) -> int:
        path = self.zk.create(f"{self.root}/ledger-ids/id-", b"", sequence=True)
        self.zk.delete(path)
        return int(path.rsplit("-", 1)[1]) + 1  # ledger ids start at 1

    def tso(self, count: int) -> int:
        """Reserve ``count`` timestamps; the first (each range above every earlier one)."""
        if not 1 <= count <= 1_000_000:
            raise InvalidArgument(f"tso count {count}: 1..1000000")
        path = f"{self.root}/tso"
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(path, b"1")
                continue
            first = int(data or b"1")
            try:
                self.zk.set(path, str(first + count).encode(), version=stat.version)
            except BadVersionError:
                continue
            return first
