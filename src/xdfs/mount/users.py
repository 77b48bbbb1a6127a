"""Owners between xdfs users and local uids, by name (pure apart from pwd/grp lookups).

The mount's own xdfs user is the uid (and primary gid) of the process that mounted; any
other xdfs user or group is the local account or group of the same name, and one with no
local namesake shows as ``unknown_uid``/``unknown_gid`` (nobody/nogroup by default). For
chown a local uid goes back to its name; a uid without a name cannot be given (EINVAL).
"""

from __future__ import annotations

import functools
import grp
import pwd


class UserMap:
    def __init__(self, mount_user: str, uid: int, gid: int, unknown_uid: int = 65534,
                 unknown_gid: int = 65534) -> None:
        self.mount_user = mount_user
        self.uid = uid
        self.gid = gid
        self.unknown_uid = unknown_uid
        self.unknown_gid = unknown_gid

    def uid_of(self, user: str) -> int:
        if user == self.mount_user:
            return self.uid
        found = _uid_by_name(user)
        return self.unknown_uid if found is None else found

    def gid_of(self, group: str) -> int:
        found = _gid_by_name(group)
        return self.unknown_gid if found is None else found

    def user_of(self, uid: int) -> str | None:
        if uid == self.uid:
            return self.mount_user
        return _name_by_uid(uid)

    def group_of(self, gid: int) -> str | None:
        return _name_by_gid(gid)


@functools.lru_cache(maxsize=4096)
def _uid_by_name(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


@functools.lru_cache(maxsize=4096)
def _gid_by_name(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


@functools.lru_cache(maxsize=4096)
def _name_by_uid(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


@functools.lru_cache(maxsize=4096)
def _name_by_gid(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None
