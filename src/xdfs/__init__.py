"""xdfs: a distributed file system in Python (see docs/architecture.md).

``xdfs.Client`` and ``xdfs.AsyncClient`` are imported on first use, so ``import xdfs`` (and
the CLI) stays light.
"""

from typing import Any

from xdfs.common import native as _native

# Before any namespace module is imported: their compiled build runs only when it is up to
# date with the sources (and XDFS_PURE is not set); see xdfs.common.native.
_native.install_guard()

__version__ = "0.1.0"
__all__ = ["AsyncClient", "Client", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Client", "AsyncClient"):
        from xdfs.client import client

        return getattr(client, name)
    raise AttributeError(f"module 'xdfs' has no attribute {name!r}")
