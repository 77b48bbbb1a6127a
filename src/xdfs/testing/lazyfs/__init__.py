"""A power-loss file layer for tests (the idea of LazyFS): a FUSE mount that, at a simulated
power cut, drops every write and directory change not yet made durable by fsync.

    with LazyFS(tmp_path / "backing", tmp_path / "disk") as disk:
        ...  # run servers with their storage under disk.path
        disk.power_cut(*processes)  # the machine loses power; the mount shows what survived
        ...  # restart the servers on disk.path and check what they acknowledged

``model.py`` is the pure bookkeeping of what is durable, ``driver.py`` the FUSE daemon and
``mount.py`` the handle tests use. See docs/testing.md.
"""

from xdfs.testing.lazyfs.model import Pending
from xdfs.testing.lazyfs.mount import CrashSite, LazyFS, fuse_unavailable_reason

__all__ = ["CrashSite", "LazyFS", "Pending", "fuse_unavailable_reason"]
