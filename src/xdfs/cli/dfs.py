"""``xdfs dfs``: the file system shell, following ``hdfs dfs``.

``xdfs dfs [-fs URI] -COMMAND [flags] ARGS``; exit status 0 on success, 1 when an
operation failed (the message says which path and why), 2 on a usage error. The metadata
commands are in :mod:`.dfs_commands`, the data commands in :mod:`.dfs_data`, the commands
changing a file in place (append, truncate, concat) in :mod:`.dfs_append`.
"""

from __future__ import annotations

from xdfs.cli import (  # noqa: F401  (they fill COMMANDS)
    dfs_append,
    dfs_commands,
    dfs_data,
    dfs_files,
    dfs_more,
)
from xdfs.cli.dfs_base import COMMANDS
from xdfs.cli.shell import HdfsShell

dfs = HdfsShell(
    "dfs",
    summary="File system shell: xdfs dfs -ls /, -mkdir -p, -rm -r, -mv, -stat, -du, -count ...",
    commands=COMMANDS,
)
