"""Users, token keys, the DataNode secret and the active epoch in the namespace: their
ops (deterministic on replay: a user's generation comes from a counter) and queries."""

from __future__ import annotations

import sys

from xdfs.errors import AlreadyExists, InvalidArgument, NotFound
from xdfs.namenode.namespace.ops import (
    AddTokenKeyOp,
    AddUserOp,
    NewEpochOp,
    RemoveTokenKeyOp,
    RemoveUserOp,
    SetDataNodeSecretOp,
    SetPasswordOp,
    TokenKeyRecord,
    UserRecord,
)
from xdfs.namenode.namespace.tree_base import At, handles
from xdfs.namenode.namespace.tree_files import FileOps
from xdfs.namenode.security.passwords import converted


class UserOps(FileOps):
    """The ops and queries of users, token keys, the DataNode secret and the epoch. (One
    line of bases, not mixins side by side: mypyc compiles single inheritance only.)"""

    @handles(AddUserOp)
    def _add_user(self, op: AddUserOp, at: At) -> tuple[int, ...]:
        if not op.name:
            raise InvalidArgument("a user needs a name")
        if any(not group for group in op.groups):
            raise InvalidArgument("empty group name")
        groups = tuple(sys.intern(group) for group in op.groups)
        stored, server, iterations = converted(
            op.password_hash, op.salt, op.stored_key, op.server_key, op.iterations)
        self.users[op.name] = UserRecord(
            op.name, b"", op.salt, groups, op.created_ms, self._new_generation(),
            stored, server, iterations,
        )
        return ()

    @handles(RemoveUserOp)
    def _remove_user(self, op: RemoveUserOp, at: At) -> tuple[int, ...]:
        if op.name not in self.users:
            raise NotFound(f"no such user: {op.name}")
        del self.users[op.name]
        self.groups_made.pop(op.name, None)
        return ()

    @handles(SetPasswordOp)
    def _set_password(self, op: SetPasswordOp, at: At) -> tuple[int, ...]:
        old = self.users.get(op.name)
        if old is None:
            raise NotFound(f"no such user: {op.name}")
        stored, server, iterations = converted(
            op.password_hash, op.salt, op.stored_key, op.server_key, op.iterations)
        self.users[op.name] = UserRecord(
            old.name, b"", op.salt, old.groups, old.created_ms, self._new_generation(),
            stored, server, iterations,
        )
        return ()

    def _new_generation(self) -> int:
        # Replay gives every user the same generation again: deterministic, like ids.
        value = self.next_generation
        self.next_generation += 1
        return value

    @handles(SetDataNodeSecretOp)
    def _set_datanode_secret(self, op: SetDataNodeSecretOp, at: At) -> tuple[int, ...]:
        if len(op.secret) < 16:
            raise InvalidArgument("the DataNode secret must be at least 16 bytes")
        self.datanode_secret = op.secret
        return ()

    @handles(AddTokenKeyOp)
    def _add_token_key(self, op: AddTokenKeyOp, at: At) -> tuple[int, ...]:
        # Refused rather than replaced: two secrets under one id would make tokens signed
        # with the first fail verification after a restart.
        if op.key_id in self.token_keys:
            raise AlreadyExists(f"token key {op.key_id} already exists")
        self.token_keys[op.key_id] = TokenKeyRecord(op.key_id, op.secret, op.expires_ms)
        return ()

    @handles(RemoveTokenKeyOp)
    def _remove_token_key(self, op: RemoveTokenKeyOp, at: At) -> tuple[int, ...]:
        if op.key_id not in self.token_keys:
            raise NotFound(f"no token key {op.key_id}")
        del self.token_keys[op.key_id]
        return ()

    @handles(NewEpochOp)
    def _new_epoch(self, op: NewEpochOp, at: At) -> tuple[int, ...]:
        if op.epoch <= self.epoch:
            raise InvalidArgument(f"epoch {op.epoch} is not above the current {self.epoch}")
        self.epoch = op.epoch
        return ()

    # --- queries -----------------------------------------------------------------------

    def groups_of(self, user: str) -> frozenset[str]:
        record = self.users.get(user)
        if record is None:
            return frozenset((self.supergroup,)) if user == self.superuser else frozenset()
        made = self.groups_made.get(user)
        if made is not None and made[0] is record:
            return made[1]  # every permission check asks: no new set each time
        groups = frozenset(record.groups)
        if user == self.superuser:
            groups |= {self.supergroup}
        self.groups_made[user] = (record, groups)
        return groups

    def is_superuser(self, user: str) -> bool:
        return user == self.superuser or self.supergroup in self.groups_of(user)

    def user_records(self) -> list[UserRecord]:
        return [self.users[name] for name in sorted(self.users)]

    def token_key_records(self) -> list[TokenKeyRecord]:
        return [self.token_keys[key_id] for key_id in sorted(self.token_keys)]
