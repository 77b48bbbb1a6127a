"""The pure parts of the WebHDFS gateway: request credentials, parameters, error bodies
and HDFS's file checksum fed in arbitrary pieces."""

from __future__ import annotations

import base64
import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.webhdfs.test_rest import hdfs_checksum
from xdfs import errors as e
from xdfs.config import AUTH_CREDENTIALS, AUTH_SIMPLE, XdfsConfig, build_config
from xdfs.http import webhdfs as w
from xdfs.http.auth import Credentials, PasswordCache, request_credentials


def basic(text: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(text.encode()).decode()}


def test_credentials_in_order_of_precedence() -> None:
    both = {"delegation": "T1", "user.name": "bob"}
    assert request_credentials(both, basic("a:b"), AUTH_SIMPLE) == Credentials(token="T1")
    assert request_credentials({}, {"Authorization": "Bearer T2"}, AUTH_CREDENTIALS) == (
        Credentials(token="T2"))
    assert request_credentials({"user.name": "bob"}, basic("alice:pw:with:colons"),
                               AUTH_SIMPLE) == Credentials(user="alice",
                                                           password="pw:with:colons")
    assert request_credentials({"user.name": "bob"}, {}, AUTH_SIMPLE) == Credentials(
        user="bob", simple=True)


@pytest.mark.parametrize("query,headers,error", [
    ({}, {}, e.NotAuthenticated),
    ({"user.name": "bob"}, {}, e.NotAuthenticated),  # not trusted by default
    ({}, {"Authorization": "Basic %%%"}, e.AuthenticationFailed),
    ({}, basic("no-colon"), e.AuthenticationFailed),
    ({}, basic(":pw"), e.AuthenticationFailed),
    ({}, {"Authorization": "Bearer"}, e.AuthenticationFailed),
    ({}, {"Authorization": "Negotiate xyz"}, e.AuthenticationFailed),
    ({}, {"Authorization": "Basic " + base64.b64encode(b"\xff:x").decode()},
     e.AuthenticationFailed),
])
def test_bad_or_missing_credentials(query: dict[str, str], headers: dict[str, str],
                                    error: type[Exception]) -> None:
    with pytest.raises(error):
        request_credentials(query, headers, AUTH_CREDENTIALS)


def test_auth_mode_is_validated() -> None:
    assert build_config([{"http": {"auth": "simple"}}]).http.auth == "simple"
    with pytest.raises(e.ConfigError):
        build_config([{"http": {"auth": "kerberos"}}])
    assert XdfsConfig().http.auth == AUTH_CREDENTIALS  # simple is opt-in only


def test_parameters() -> None:
    assert w.bool_param({"x": "TRUE"}, "x", False) is True
    assert w.bool_param({}, "x", True) is True
    assert w.int_param({"n": "12"}, "n", 0) == 12
    assert w.permission_param({"permission": "1777"}, 0) == 0o1777
    with pytest.raises(e.InvalidArgument):
        w.bool_param({"x": "yes"}, "x", False)
    for value in ["-1", "1.5", "0x10", "1e3"]:
        with pytest.raises(e.InvalidArgument):
            w.int_param({"n": value}, "n", 0)
    for value in ["8", "2000", "-7", "rwx"]:
        with pytest.raises(e.InvalidArgument):
            w.permission_param({"permission": value}, 0)


@pytest.mark.parametrize("error,status,exception", [
    (e.NotFound("x"), 404, "FileNotFoundException"),
    (e.AccessDenied("x"), 403, "AccessControlException"),
    (e.TokenExpired("x"), 401, "SecurityException"),
    (e.DirectoryNotEmpty("x"), 403, "PathIsNotEmptyDirectoryException"),
    (e.InvalidPath("x"), 400, "IllegalArgumentException"),
    (e.Unsupported("x"), 400, "UnsupportedOperationException"),
    (e.NotEnoughReplicas("x"), 403, "IOException"),
    (KeyError("bug"), 500, "RuntimeException"),
])
def test_remote_exceptions(error: Exception, status: int, exception: str) -> None:
    response = w.remote_exception(error)
    assert response.status == status
    assert response.text is not None
    body = json.loads(response.text)["RemoteException"]
    assert body["exception"] == exception
    assert body["javaClassName"].endswith("." + exception)
    if status == 500:
        assert "bug" not in body["message"]  # internals stay in the log


@given(sizes=st.lists(st.integers(0, 3000), min_size=0, max_size=6),
       pieces=st.lists(st.integers(1, 2000), min_size=1, max_size=8))
def test_file_checksum_is_independent_of_how_bytes_arrive(sizes: list[int],
                                                          pieces: list[int]) -> None:
    block_size = 1024
    data = random.Random(len(sizes)).randbytes(sum(sizes))
    lengths = [block_size] * (len(data) // block_size) + (
        [len(data) % block_size] if len(data) % block_size else [])
    checksum = w.FileChecksum(lengths, block_size)
    at, index = 0, 0
    while at < len(data):
        step = pieces[index % len(pieces)]
        checksum.update(data[at:at + step])
        at, index = at + step, index + 1
    algorithm, hexdigest = hdfs_checksum(data, block_size)
    assert checksum.result()["FileChecksum"] == {
        "algorithm": algorithm, "bytes": hexdigest, "length": 28}


def test_file_checksum_refuses_bytes_that_do_not_fit_the_blocks() -> None:
    checksum = w.FileChecksum([10], 1024)
    with pytest.raises(e.InvalidArgument):
        checksum.update(b"x" * 11)
    short = w.FileChecksum([10], 1024)
    short.update(b"x" * 9)
    with pytest.raises(e.InvalidArgument):
        short.result()


def test_password_cache_remembers_only_what_was_checked() -> None:
    cache = PasswordCache(b"k" * 32, ttl_s=10.0, entries_max=2)
    assert cache.generation("alice", "pw", 0.0) is None
    cache.checked("alice", "pw", 3, 0.0)
    assert cache.generation("alice", "pw", 5.0) == 3
    assert cache.generation("alice", "wrong", 5.0) is None
    assert cache.generation("bob", "pw", 5.0) is None
    assert cache.generation("alice", "pw", 10.0) is None  # expired, and forgotten
    assert cache.generation("alice", "pw", 0.0) is None
    for user in ("a", "b", "c"):  # the oldest goes first
        cache.checked(user, "pw", 1, 20.0)
    assert [cache.generation(u, "pw", 21.0) for u in ("a", "b", "c")] == [None, 1, 1]
    off = PasswordCache(b"k" * 32, ttl_s=0.0, entries_max=10)
    off.checked("alice", "pw", 1, 0.0)
    assert off.generation("alice", "pw", 0.0) is None
