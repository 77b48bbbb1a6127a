"""POSIX permission bits and HDFS-style denial messages (pure helpers for the namespace).

An access request is a 3-bit set like one class of a mode: 4 = read, 2 = write,
1 = execute. The class of a mode that applies to a user is chosen as POSIX and HDFS's
FSPermissionChecker do: owner bits if the user owns the inode, else group bits if the
inode's group is one of the user's groups, else the other bits. The first matching class
decides, even when a later class would grant more.
"""

from __future__ import annotations

from xdfs.errors import InvalidArgument

READ = 4
WRITE = 2
EXECUTE = 1
ALL = READ | WRITE | EXECUTE

STICKY = 0o1000
MODE_MASK = 0o7777

# Indexed by the 3-bit access set; the names of HDFS's FsAction, which its messages use.
_ACTION_NAMES = (
    "NONE", "EXECUTE", "WRITE", "WRITE_EXECUTE", "READ", "READ_EXECUTE", "READ_WRITE", "ALL",
)


def action_name(bits: int) -> str:
    assert 0 <= bits <= ALL, bits
    return _ACTION_NAMES[bits]


def check_bits(name: str, bits: int) -> None:
    if not 0 <= bits <= ALL:
        raise InvalidArgument(f"{name} must be a 3-bit access set (0..7), got {bits}")


def mode_class(mode: int, *, is_owner: bool, in_group: bool) -> int:
    """The 3 bits of ``mode`` that apply to a user (first matching class wins)."""
    if is_owner:
        return (mode >> 6) & ALL
    if in_group:
        return (mode >> 3) & ALL
    return mode & ALL


def mode_string(mode: int, *, is_dir: bool) -> str:
    """``drwxr-xr-x``; the sticky bit shows as ``t`` (``T`` without other-execute), as in
    HDFS's FsPermission (setuid/setgid are stored but not shown, HDFS ignores them too)."""
    chars = ["d" if is_dir else "-"]
    for shift in (6, 3, 0):
        bits = (mode >> shift) & ALL
        chars.append("r" if bits & READ else "-")
        chars.append("w" if bits & WRITE else "-")
        chars.append("x" if bits & EXECUTE else "-")
    if mode & STICKY:
        chars[-1] = "t" if mode & EXECUTE else "T"
    return "".join(chars)


def describe_inode(path: str, owner: str, group: str, mode: int, *, is_dir: bool) -> str:
    """``"/a/b":bob:supergroup:drwxr-xr-x`` as HDFS prints an inode in denials."""
    return f'"{path}":{owner}:{group}:{mode_string(mode, is_dir=is_dir)}'


def denied_message(user: str, bits: int, inode: str) -> str:
    return f"Permission denied: user={user}, access={action_name(bits)}, inode={inode}"
