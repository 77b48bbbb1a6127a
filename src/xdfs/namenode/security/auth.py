"""Users, logins and tokens on the NameNode (the driver around ``security``).

The handshake authenticates every connection: a token, or a user's SCRAM-SHA-256 login
(:mod:`xdfs.rpc.scram`: the password never travels; the client does the scrypt, the server
a few HMACs), or a DataNode (user ``dn/<node id>``) proving the cluster's DataNode secret
the same way, or nobody at all, in which case only ``login``, ``ping`` and ``server_info``
may be called. Users, token keys and the DataNode secret are namespace state, so changes
go through the edits log like any other mutation.

Logins that receive a password in clear (the ``login`` call, HTTP Basic auth and the web
UI) check it against the same credentials (a scrypt and a PBKDF2 each), which is what a
stranger can make the NameNode spend CPU on, so they are bounded: at most
``namenode.password_checks_max`` run at once (a thread pool of that size), a client host
may have at most ``namenode.password_checks_per_peer_max`` running or waiting (more are
refused at once with ``Overloaded``). A right password is remembered for
``namenode.password_cache_s`` (an HMAC under a per-process key, with the user's generation:
:class:`xdfs.http.auth.PasswordCache`), so clients that open connection after connection
pay one check, not one each; wrong ones are always checked. Every password login, SCRAM or
not, counts against the failed-login throttle and lockout per user and host, per host, and
per user (:mod:`xdfs.namenode.security.login_guard`).

Tokens and sessions carry the user's credential generation (``UserRecord.generation``): a
password change gives the user a new one and a removed user has none, so both end every
token and session issued before.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from xdfs.common import tokens
from xdfs.common.paths import check_name
from xdfs.config import NameNodeConfig
from xdfs.errors import (
    AccessDenied,
    AuthenticationFailed,
    InvalidArgument,
    NotFound,
    Overloaded,
)
from xdfs.http.auth import PasswordCache
from xdfs.namenode.namespace.ops import (
    AddTokenKeyOp,
    AddUserOp,
    Op,
    RemoveTokenKeyOp,
    RemoveUserOp,
    SetPasswordOp,
    UserRecord,
)
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.namesystem import Namesystem, Plan
from xdfs.namenode.security import passwords
from xdfs.namenode.security.login_guard import GuardSettings, Key, LoginGuard
from xdfs.protocol.datanode import DATANODE_USER_PREFIX
from xdfs.rpc import scram
from xdfs.rpc.handling import PasswordLogin, Principal
from xdfs.rpc.messages import Hello

log = logging.getLogger(__name__)

ANONYMOUS = ""
PASSWORD_CHARS_MIN = 1


@dataclass(frozen=True)
class UserPrincipal(Principal):
    """A user, by password or token, and the credential generation it authenticated with."""

    generation: int = 0
    #: Proved its password on this connection (SCRAM): the ``login`` call may then issue a
    #: token without one (a token's connection may not: it would renew itself forever).
    by_password: bool = False


@dataclass(frozen=True)
class DataNodePrincipal(Principal):
    """A DataNode (``dn/<node id>``), by the cluster's DataNode secret: it may call the
    DataNode protocol and report bad replicas, nothing a user can."""


def peer_host(peer: str) -> str:
    """``"10.0.0.1:5000"`` -> ``"10.0.0.1"`` (failures and checks are counted per host)."""
    return peer.rsplit(":", 1)[0]


_NO_CREDENTIALS = scram.ScramCredentials(b"", 0, b"", b"")


def _wrong_datanode_secret() -> AuthenticationFailed:
    return AuthenticationFailed(
        "wrong DataNode secret (datanode.secret_file must hold the "
        f"{passwords.DATANODE_SECRET_FILE} of this cluster's name dirs)"
    )


class PasswordChecks:
    """scrypt off the event loop, with a bounded number in flight (see the module doc)."""

    def __init__(self, threads: int, per_host_max: int) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="password-check")
        self._per_host_max = per_host_max
        self._per_host: dict[str, int] = {}

    async def verify(self, host: str, record: UserRecord | None, password: str) -> bool:
        pending = self._per_host.get(host, 0)
        if pending >= self._per_host_max:
            raise Overloaded(
                f"{pending} password checks from {host} are in progress; try again later"
            )
        self._per_host[host] = pending + 1
        try:
            # A caller cancelled while its check waits for a thread cancels the check too;
            # a running one finishes in its thread, which stays taken until then.
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, passwords.verify_password, record, password
            )
        finally:
            left = self._per_host[host] - 1
            if left:
                self._per_host[host] = left
            else:
                del self._per_host[host]

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class NamespaceAuthenticator:
    """The handshake check against a namespace's users, token keys and DataNode secret (a
    NameNode's, or a BackupNode's hot copy, so tokens issued by the NameNode work on its
    backup)."""

    def __init__(self, namespace: Callable[[], Namespace | None],
                 now_ms: Callable[[], int], config: NameNodeConfig | None = None) -> None:
        config = config or NameNodeConfig()
        self._namespace = namespace
        self._now_ms = now_ms
        self._checks = PasswordChecks(
            config.password_checks_max, config.password_checks_per_peer_max
        )
        self.guard = LoginGuard(GuardSettings.from_config(config))
        # Clients open connections all the time (a CLI command, a thread pool, a Spark
        # task): each would cost a scrypt check (tens of ms of CPU) without this.
        self._checked = PasswordCache(
            os.urandom(32), config.password_cache_s, config.password_cache_entries_max
        )
        #: Makes an unknown user's challenge (stable per name within this process).
        self._decoy_key = os.urandom(32)
        #: The DataNode secret and its SCRAM credentials.
        self._datanode: tuple[bytes, scram.ScramCredentials] = (b"", _NO_CREDENTIALS)

    def _ns(self) -> Namespace:
        ns = self._namespace()
        if ns is None:
            raise AuthenticationFailed("this server has not loaded its namespace yet")
        return ns

    async def authenticate(self, hello: Hello, peer: str) -> Principal | PasswordLogin:
        if hello.token:
            return self.token_principal(hello.token)
        if hello.user.startswith(DATANODE_USER_PREFIX):
            return PasswordLogin(hello.user, self._datanode_credentials(),
                                 lambda: DataNodePrincipal(hello.user), _wrong_datanode_secret)
        if hello.user:
            if not hello.scram:
                raise AuthenticationFailed("wrong user name or password")
            return self._user_login(hello.user, peer_host(peer))
        return Principal(ANONYMOUS, anonymous=True)

    def _datanode_credentials(self) -> scram.ScramCredentials:
        secret = self._ns().datanode_secret
        if not secret:  # nothing matches while the namespace has none
            return scram.decoy_credentials(self._decoy_key, DATANODE_USER_PREFIX, "")
        if self._datanode[0] != secret:  # made once per secret: a PBKDF2
            text = passwords.datanode_secret_text(secret)
            self._datanode = (secret, scram.secret_credentials(text))
        return self._datanode[1]

    def _user_login(self, user: str, host: str) -> PasswordLogin:
        """A SCRAM login of ``user`` from ``host``, refused first when the guard says so; an
        unknown user is challenged alike (decoy credentials) and fails at its proof."""
        record = self._ns().users.get(user)
        known = user if record is not None else None
        self.guard.check_login(known, host, self._now_ms() / 1000)
        if record is None or not record.stored_key:
            stored = scram.decoy_credentials(self._decoy_key, user, passwords.PREHASH)
        else:
            stored = passwords.record_credentials(record)

        def succeeded() -> Principal:
            current = self._ns().users.get(user)
            # (a password change while the proof was on its way makes it a failure)
            if record is None or current is None or current.generation != record.generation:
                raise AuthenticationFailed("wrong user name or password")
            self.guard.login_succeeded(user, host, self._now_ms() / 1000)
            return UserPrincipal(user, generation=record.generation, by_password=True)

        return PasswordLogin(user, stored, succeeded, lambda: self._failed(known, host))

    def _failed(self, user: str | None, host: str) -> AuthenticationFailed:
        locked = self.guard.login_failed(user, host, self._now_ms() / 1000)
        self._log_failures(self.guard.login_keys(user, host), locked, host)
        return AuthenticationFailed("wrong user name or password")

    def token_principal(self, token: str) -> UserPrincipal:
        ns = self._ns()
        body = tokens.verify_token(token, ns.token_keys, self._now_ms())
        record = ns.users.get(body.user)
        if body.kind != "user" or record is None:
            raise AuthenticationFailed("invalid token")
        if body.generation != record.generation:
            raise AuthenticationFailed(
                f"the token of {body.user} was revoked (password changed since it was "
                "issued); log in again"
            )
        return UserPrincipal(body.user, generation=record.generation)

    async def check_password(self, user: str, password: str, peer: str) -> UserRecord:
        """The user's record when ``password`` is right; LoginThrottled / LockedOut before
        any check when too many failed, Overloaded when the host has too many in flight."""
        record = self._ns().users.get(user)
        host = peer_host(peer)
        known = user if record is not None else None
        now_s = self._now_ms() / 1000
        self.guard.check_login(known, host, now_s)
        if record is not None and self._checked.generation(
                user, password, now_s) == record.generation:
            self.guard.login_succeeded(user, host, now_s)
            return record
        if await self._checks.verify(host, record, password):
            assert record is not None
            self.guard.login_succeeded(user, host, self._now_ms() / 1000)
            self._checked.checked(user, password, record.generation, self._now_ms() / 1000)
            return record
        raise self._failed(known, host)

    def _log_failures(self, keys: list[Key], locked: list[Key], host: str) -> None:
        if locked:
            log.warning(
                "login: %s locked out for %g s after %d failed logins (the last from %s)",
                " and ".join(key.name for key in locked), self.guard.settings.lockout_s,
                self.guard.settings.lockout_after, host,
            )
            return
        throttled = [key for key in keys if self.guard.throttling_starts(key)]
        if throttled:
            log.warning(
                "login: throttling %s after %d failed logins (the last from %s)",
                " and ".join(key.name for key in throttled),
                self.guard.settings.throttle_after, host,
            )

    def close(self) -> None:
        self._checks.close()


class NameNodeAuth(NamespaceAuthenticator):
    def __init__(self, namesystem: Namesystem) -> None:
        super().__init__(lambda: namesystem.ns, namesystem.now_ms, namesystem.config)
        self.fs = namesystem

    # -- login and tokens ---------------------------------------------------------------

    async def login(
        self, user: str, password: str, lifetime_s: float, peer: str
    ) -> tuple[str, int]:
        if not lifetime_s >= 0:  # also NaN: a token born expired is a client bug
            raise InvalidArgument(f"token lifetime must be >= 0 seconds, got {lifetime_s}")
        record = await self.check_password(user, password, peer)
        return await self.issue_token(record, user, lifetime_s)

    async def login_as(self, principal: Principal, user: str,
                       lifetime_s: float) -> tuple[str, int] | None:
        """A token for ``user`` when ``principal`` proved that user's password on its
        connection (no password needed again); None when it did not."""
        if not (isinstance(principal, UserPrincipal) and principal.by_password
                and principal.user == user):
            return None
        if not lifetime_s >= 0:
            raise InvalidArgument(f"token lifetime must be >= 0 seconds, got {lifetime_s}")
        record = self.fs.ns.users.get(user)
        if record is None or record.generation != principal.generation:
            raise AuthenticationFailed("the password changed since this connection logged in")
        return await self.issue_token(record, user, lifetime_s)

    async def issue_token(
        self, record: UserRecord, user: str, lifetime_s: float
    ) -> tuple[str, int]:
        """A token for ``user`` (already authenticated: its record), valid for
        ``lifetime_s`` (0: the default), never longer than ``namenode.token_lifetime_s``."""
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
        body = tokens.TokenBody(
            "user", user, key.key_id, now, now + lifetime_ms, generation=record.generation
        )
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
        await self.fs.mutate("rotate token keys", lambda: Plan.of(self.key_rotation_ops(), None),
                             allowed_in_safe_mode=True)

    # -- user administration ------------------------------------------------------------

    async def add_user(self, caller: str, name: str, password: str, groups: list[str]) -> None:
        self.require_superuser(caller, "add a user")
        check_name(name)
        for group in groups:
            check_name(group)
        if len(password) < PASSWORD_CHARS_MIN:
            raise InvalidArgument("a password is required")
        salt = os.urandom(passwords.SALT_BYTES)
        made = await asyncio.to_thread(passwords.new_credentials, password, salt)
        op = AddUserOp(name, b"", salt, tuple(groups), self.fs.now_ms(),
                       made.stored_key, made.server_key, made.iterations)
        await self.fs.mutate("add user", lambda: Plan.of([op], None))

    async def remove_user(self, caller: str, name: str) -> None:
        self.require_superuser(caller, "remove a user")
        if name == self.fs.ns.superuser:
            raise InvalidArgument("the superuser cannot be removed")

        def plan() -> Plan[None]:
            if name not in self.fs.ns.users:
                raise NotFound(f"no user {name}")
            return Plan.of([RemoveUserOp(name)], None)

        await self.fs.mutate("remove user", plan)

    async def set_password(self, caller: str, name: str, password: str) -> None:
        if caller != name:
            self.require_superuser(caller, "change another user's password")
        if len(password) < PASSWORD_CHARS_MIN:
            raise InvalidArgument("a password is required")
        salt = os.urandom(passwords.SALT_BYTES)
        made = await asyncio.to_thread(passwords.new_credentials, password, salt)

        def plan() -> Plan[None]:
            if name not in self.fs.ns.users:
                raise NotFound(f"no user {name}")
            return Plan.of([SetPasswordOp(name, b"", salt, made.stored_key, made.server_key,
                                          made.iterations)], None)

        await self.fs.mutate("set password", plan)
        self.guard.forget_user(name)  # a new password lifts the user's lockout

    def require_superuser(self, caller: str, what: str) -> None:
        if not self.fs.ns.is_superuser(caller):
            raise AccessDenied(f"Permission denied: only the superuser may {what} (user={caller})")
