"""What an outsider can do to the znodes xdfs made: nothing (each check on a real server)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NotEmptyError

from xdfs.common.coordination import start_session


@contextlib.contextmanager
def session(hosts: str, secret: str | None) -> Iterator[KazooClient]:
    """An xdfs session with ``secret``; None: a plain unauthenticated kazoo client."""
    if secret is None:
        zk = KazooClient(hosts, timeout=10.0)
        zk.start(30)
    else:
        zk = start_session(hosts, secret, 10.0, logging.getLogger("tests.zookeeper"))
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def tree(zk: KazooClient, root: str) -> list[str]:
    """Every znode under ``root``, ``root`` first."""
    found = [root]
    for child in zk.get_children(root):
        found += tree(zk, f"{root}/{child}")
    return found


def assert_outsiders_locked_out(hosts: str, secret: str, root: str) -> list[str]:
    """An unauthenticated client and one with a wrong digest can neither read, write,
    create under nor delete any znode under ``root``; the znodes checked."""
    with session(hosts, secret) as owner:
        paths = tree(owner, root)
    for outsider_secret in (None, "0" * 64):
        with session(hosts, outsider_secret) as outsider:
            for path in paths:
                with pytest.raises(NoAuthError):
                    outsider.get(path)
                with pytest.raises(NoAuthError):
                    outsider.get_children(path)
                with pytest.raises(NoAuthError):
                    outsider.set(path, b"tampered")
                with pytest.raises(NoAuthError):
                    outsider.create(f"{path}/planted", b"x")
                # deleting needs the right on the parent; the root's parent is not xdfs's,
                # but a root with children cannot be deleted at all
                with pytest.raises(NoAuthError if path != root else (NoAuthError,
                                                                     NotEmptyError)):
                    outsider.delete(path)
    return paths
