"""xdfs errors -> errno values of the FUSE replies (pure)."""

from __future__ import annotations

import errno

from xdfs import errors as e

#: Most specific first: the first class an error is an instance of decides.
_TABLE: tuple[tuple[type[BaseException], int], ...] = (
    (e.NotFound, errno.ENOENT),
    (e.AlreadyExists, errno.EEXIST),
    (e.NotADirectory, errno.ENOTDIR),
    (e.IsADirectory, errno.EISDIR),
    (e.DirectoryNotEmpty, errno.ENOTEMPTY),
    (e.InvalidPath, errno.EINVAL),
    (e.InvalidArgument, errno.EINVAL),
    (e.AccessDenied, errno.EACCES),
    (e.SecurityError, errno.EACCES),
    (e.QuotaExceeded, errno.EDQUOT),
    (e.SafeModeError, errno.EROFS),
    (e.LeaseError, errno.EBUSY),
    (e.Unsupported, errno.EOPNOTSUPP),
    (e.NotEnoughReplicas, errno.ENOSPC),
)


def errno_of(exc: BaseException) -> int:
    """The errno a failed call reports; EIO for everything without a closer meaning
    (the cluster unreachable, a timeout, a data error)."""
    for kind, number in _TABLE:
        if isinstance(exc, kind):
            return number
    return errno.EIO
