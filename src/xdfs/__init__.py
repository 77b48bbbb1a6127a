"""xdfs: a distributed file system in Python (see docs/architecture.md).

``xdfs.Client`` and ``xdfs.AsyncClient`` are imported on first use, so ``import xdfs`` (and
the CLI) stays light.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["AsyncClient", "Client", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Client", "AsyncClient"):
        from xdfs.client import client

        return getattr(client, name)
    raise AttributeError(f"module 'xdfs' has no attribute {name!r}")
