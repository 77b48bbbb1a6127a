"""Users, logins and tokens on the NameNode (the driver around ``security``).

The handshake authenticates every connection: a token, or a user name and password
(scrypt, checked off the event loop), or nobody at all, in which case only ``login``,
``ping`` and ``server_info`` may be called. Users and token keys are namespace state, so
changes go through the edits log like any other mutation.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from xdfs.common import tokens
from xdfs.errors import AccessDenied, AuthenticationFailed, InvalidArgument, NotFound
from xdfs.namenode import security
from xdfs.namenode.namespace import Namespace
from xdfs.namenode.namesystem import Namesystem
from xdfs.namenode.ops import (
    AddTokenKeyOp,
    AddUserOp,
    Op,
    RemoveTokenKeyOp,
    RemoveUserOp,
    SetPasswordOp,
)
from xdfs.namenode.paths import check_name
from xdfs.rpc.messages import Hello
from xdfs.rpc.server import Principal

ANONYMOUS = ""
PASSWORD_CHARS_MIN = 1


class NamespaceAuthenticator:
    """The handshake check against a namespace's users and token keys (a NameNode's, or a
    BackupNode's hot copy, so tokens issued by the NameNode work on its backup)."""

    def __init__(self, namespace: Callable[[], Namespace | None],
                 now_ms: Callable[[], int]) -> None:
        self._namespace = namespace
        self._now_ms = now_ms

    def _ns(self) -> Namespace:
        ns = self._namespace()
        if ns is None:
            raise AuthenticationFailed("this server has not loaded its namespace yet")
        return ns

    async def authenticate(self, hello: Hello, peer: str) -> Principal:
        if hello.token:
            ns = self._ns()
            body = tokens.verify_token(hello.token, ns.token_keys, self._now_ms())
            if body.kind != "user" or body.user not in ns.users:
                raise AuthenticationFailed("invalid token")
            return Principal(body.user)
        if hello.user:
            await self.check_password(hello.user, hello.password)
            return Principal(hello.user)
        return Principal(ANONYMOUS)

    async def check_password(self, user: str, password: str) -> None:
        record = self._ns().users.get(user)
        ok = await asyncio.to_thread(security.verify_password, record, password)
        if not ok:
            raise AuthenticationFailed("wrong user name or password")


class NameNodeAuth(NamespaceAuthenticator):
    def __init__(self, namesystem: Namesystem) -> None:
        super().__init__(lambda: namesystem.ns, namesystem.now_ms)
        self.fs = namesystem

    # -- login and tokens ---------------------------------------------------------------

    async def login(self, user: str, password: str, lifetime_s: float) -> tuple[str, int]:
        if not lifetime_s >= 0:  # also NaN: a token born expired is a client bug
            raise InvalidArgument(f"token lifetime must be >= 0 seconds, got {lifetime_s}")
        await self.check_password(user, password)
        now = self.fs.now_ms()
        lifetime_ms = int(
            1000
            * min(lifetime_s or self.fs.config.token_lifetime_s, self.fs.config.token_lifetime_s)
        )
        key = tokens.newest_key(self.fs.ns.token_keys, now + lifetime_ms)
        if key is None:
            await self.rotate_keys()
            key = tokens.newest_key(self.fs.ns.token_keys, now + lifetime_ms)
            assert key is not None, "rotation must leave a key valid for a full token lifetime"
        body = tokens.TokenBody("user", user, key.key_id, now, now + lifetime_ms)
        return tokens.issue_token(body, key), body.expires_ms

    def key_rotation_ops(self) -> list[Op]:
        """Add a key when none outlives a fresh token; drop keys that have expired."""
        now = self.fs.now_ms()
        config = self.fs.config
        keys = self.fs.ns.token_keys
        ops: list[Op] = [RemoveTokenKeyOp(k.key_id) for k in keys.values() if k.expires_ms <= now]
        lifetime_ms = int(config.token_lifetime_s * 1000)
        if tokens.newest_key(keys, now + lifetime_ms) is None:
            key_id = max(keys, default=0) + 1
            expires = now + int((config.token_key_rotation_s + config.token_lifetime_s) * 1000)
            ops.append(AddTokenKeyOp(key_id, os.urandom(32), expires))
        return ops

    async def rotate_keys(self) -> None:
        # Allowed in safe mode: logins (and `admin -safemode leave`) need a valid key while
        # the NameNode waits for block reports.
        await self.fs.mutate(
            "rotate token keys", self.key_rotation_ops, lambda: None, allowed_in_safe_mode=True
        )

    # -- user administration ------------------------------------------------------------

    async def add_user(self, caller: str, name: str, password: str, groups: list[str]) -> None:
        self.require_superuser(caller, "add a user")
        check_name(name)
        for group in groups:
            check_name(group)
        if len(password) < PASSWORD_CHARS_MIN:
            raise InvalidArgument("a password is required")
        salt = os.urandom(security.SALT_BYTES)
        digest = await asyncio.to_thread(security.hash_password, password, salt)
        op = AddUserOp(name, digest, salt, tuple(groups), self.fs.now_ms())
        await self.fs.mutate("add user", lambda: [op], lambda: None)

    async def remove_user(self, caller: str, name: str) -> None:
        self.require_superuser(caller, "remove a user")
        if name == self.fs.ns.superuser:
            raise InvalidArgument("the superuser cannot be removed")

        def plan() -> list[Op]:
            if name not in self.fs.ns.users:
                raise NotFound(f"no user {name}")
            return [RemoveUserOp(name)]

        await self.fs.mutate("remove user", plan, lambda: None)

    async def set_password(self, caller: str, name: str, password: str) -> None:
        if caller != name:
            self.require_superuser(caller, "change another user's password")
        if len(password) < PASSWORD_CHARS_MIN:
            raise InvalidArgument("a password is required")
        salt = os.urandom(security.SALT_BYTES)
        digest = await asyncio.to_thread(security.hash_password, password, salt)

        def plan() -> list[Op]:
            if name not in self.fs.ns.users:
                raise NotFound(f"no user {name}")
            return [SetPasswordOp(name, digest, salt)]

        await self.fs.mutate("set password", plan, lambda: None)

    def require_superuser(self, caller: str, what: str) -> None:
        if not self.fs.ns.is_superuser(caller):
            raise AccessDenied(f"Permission denied: only the superuser may {what} (user={caller})")
