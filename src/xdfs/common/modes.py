"""Permission bits as text (``drwxr-xr-t``), shared by the shell and the offline viewers."""

from __future__ import annotations

import stat


def permission_string(is_dir: bool, mode: int) -> str:
    """``ls -l`` style; the sticky bit shows as ``t``/``T`` in the other-execute place."""
    return stat.filemode((stat.S_IFDIR if is_dir else stat.S_IFREG) | (mode & 0o7777))
