"""A namespace written before SCRAM logins (its users' passwords as scrypt hashes) keeps
logging its users in: the hashes convert to SCRAM credentials as the image is loaded, and
the next image holds none (issue 37 item 2)."""

from __future__ import annotations

import os
from typing import Any

import msgspec
import pytest

from xdfs.config import NameNodeConfig
from xdfs.namenode.image import format as image_format
from xdfs.namenode.namespace.ops import UserRecord
from xdfs.namenode.namespace.tree import Namespace
from xdfs.namenode.security import passwords
from xdfs.testing.minicluster import MiniCluster

from .conftest import ROOT, ROOT_PW, connect

LEGACY_USERS = {ROOT: ROOT_PW, "ann": "ann-pw"}


def legacy_record(name: str, password: str, generation: int) -> UserRecord:
    """A user as older NameNodes stored it: the scrypt hash and its salt, nothing else."""
    salt = os.urandom(passwords.SALT_BYTES)
    return UserRecord(name, passwords.hash_password(password, salt), salt, (), 0, generation)


def test_an_older_images_user_array_decodes_and_converts() -> None:
    salt = b"s" * 16
    digest = passwords.hash_password("ann-pw", salt)
    older = msgspec.msgpack.encode(["ann", digest, salt, ["staff"], 5, 3])  # 6 fields
    record = passwords.converted_record(msgspec.msgpack.decode(older, type=UserRecord))
    assert record.password_hash == b"" and record.generation == 3
    assert passwords.verify_password(record, "ann-pw")
    assert not passwords.verify_password(record, "ann-pw2")


@pytest.fixture
def legacy_format(monkeypatch: pytest.MonkeyPatch) -> None:
    """format_namenode writes an image whose users hold scrypt hashes (the older form)."""
    made = image_format.initial_namespace

    def legacy(config: NameNodeConfig, superuser: str, password: str, now_ms: int,
               **kwargs: Any) -> Namespace:
        ns = made(config, superuser, password, now_ms, **kwargs)
        for index, (name, secret) in enumerate(LEGACY_USERS.items()):
            record = legacy_record(name, secret, ns.next_generation + index)
            ns.users[name] = msgspec.structs.replace(
                record, groups=(config.supergroup,) if name == superuser else ())
        ns.next_generation += len(LEGACY_USERS)
        return ns

    monkeypatch.setattr(image_format, "initial_namespace", legacy)


async def test_users_of_an_older_image_log_in_by_scram(
    minicluster: MiniCluster, legacy_format: None
) -> None:
    nn = await minicluster.start_namenode(superuser=ROOT, password=ROOT_PW)
    for name, secret in LEGACY_USERS.items():
        assert nn.fs is not None
        record = nn.fs.ns.users[name]
        assert record.password_hash == b"" and record.stored_key  # converted on load
        async with connect(nn, name, secret) as client:
            await client.stat("/")
            assert client.rpc.authenticated_user == name
        async with connect(nn, name, secret + "x") as client:
            with pytest.raises(Exception, match="wrong user name or password"):
                await client.stat("/")
    async with connect(nn, ROOT, ROOT_PW) as root:
        await root.save_namespace()
        assert (await root.login("ann", "ann-pw")).token  # a password received in clear
    await minicluster.stop_namenode(nn)
    again = await minicluster.start_namenode(superuser=ROOT, format_dirs=False)
    async with connect(again, "ann", "ann-pw") as client:
        await client.stat("/")
