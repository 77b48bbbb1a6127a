"""The URL a WebHDFS OPEN redirect (and the web UI's Download link) sends to a DataNode
reads that one file and does nothing else: not another file, not a write, not a login on
the NameNode's REST gateway or RPC port, not after it expired. A CREATE (or APPEND)
redirect's URL makes that one write and nothing else either."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests

from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import ALICE, ALICE_PW, WebCluster, start_web_cluster
from tests.webhdfs.test_rest import remote
from xdfs.client.client import AsyncClient
from xdfs.errors import AccessDenied, AuthenticationFailed, NotAuthenticated
from xdfs.protocol.namenode import WEBHDFS_WRITE_LOGIN, WebHdfsWriteRequest

SECRET = b"alice's secret " * 1000
OTHER = b"alice's other file " * 1000


def _put(web: WebCluster, path: str, data: bytes) -> None:
    made = web.call("PUT", path, "CREATE", auth=(ALICE, ALICE_PW), data=data)
    assert made.status_code == 201, made.text


@pytest.fixture
def files(web: WebCluster, web_dir: str) -> tuple[str, str]:
    """Two files of alice, readable by her only."""
    secret, other = f"{web_dir}/secret", f"{web_dir}/other"
    _put(web, secret, SECRET)
    _put(web, other, OTHER)
    for path in (secret, other):
        web.call("PUT", path, "SETPERMISSION", auth=(ALICE, ALICE_PW),
                 permission="600").raise_for_status()
    return secret, other


def _open_url(web: WebCluster, path: str) -> str:
    answer = web.call("GET", path, "OPEN", auth=(ALICE, ALICE_PW), allow_redirects=False)
    assert answer.status_code == 307, answer.text
    return str(answer.headers["Location"])


def _write_url(web: WebCluster, path: str, op: str = "CREATE", **params: str) -> str:
    method = "PUT" if op == "CREATE" else "POST"
    answer = web.call(method, path, op, auth=(ALICE, ALICE_PW), allow_redirects=False,
                      **params)
    assert answer.status_code == 307, answer.text
    return str(answer.headers["Location"])


def _token(url: str) -> str:
    query = parse_qs(urlsplit(url).query)
    assert "delegation" not in query, "a read URL carries no token of the user"
    return query["ticket"][0]


def _with(url: str, path: str | None = None, **params: str) -> str:
    """``url`` on another path and/or with some parameters changed."""
    parts = urlsplit(url)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    query.update(params)
    return urlunsplit(parts._replace(path=f"/webhdfs/v1{path}" if path else parts.path,
                                     query=urlencode(query)))


def test_an_open_redirect_reads_that_file_and_nothing_else(
        web: WebCluster, files: tuple[str, str]) -> None:
    secret, other = files
    url = _open_url(web, secret)
    token = _token(url)
    assert requests.get(url, timeout=60).content == SECRET  # no other credential
    ranged = requests.get(_with(url, offset="15", length="7"), timeout=60)
    assert ranged.content == SECRET[15:22]
    # another file, on the DataNode
    status, exception, message = remote(requests.get(_with(url, other), timeout=60))
    assert (status, exception) == (403, "AccessControlException"), message
    # a write or another op on the DataNode
    for method, op, path in [("PUT", "CREATE", f"{secret}-new"), ("POST", "APPEND", secret),
                             ("PUT", "CREATE", secret)]:
        answer = requests.request(method, _with(url, path, op=op, overwrite="true"),
                                  data=b"x", timeout=60)
        assert remote(answer)[0] in (401, 403), (op, answer.text)
    assert web.call("GET", f"{secret}-new", "GETFILESTATUS").status_code == 404
    assert web.call("GET", secret, "OPEN", auth=(ALICE, ALICE_PW)).content == SECRET
    # the NameNode's REST gateway takes it for no operation, as a delegation or a Bearer
    for method, path, op in [("GET", secret, "OPEN"), ("GET", secret, "GETFILESTATUS"),
                             ("GET", other, "OPEN"), ("PUT", f"{secret}-x", "CREATE"),
                             ("PUT", f"{secret}-d", "MKDIRS"),
                             ("GET", "/", "GETDELEGATIONTOKEN")]:
        by_param = web.call(method, path, op, auth=None, delegation=token,
                            allow_redirects=False)
        assert remote(by_param)[:2] == (401, "SecurityException"), (op, by_param.text)
        by_header = requests.request(method, web.url + path, params={"op": op}, timeout=60,
                                     headers={"Authorization": f"Bearer {token}"},
                                     allow_redirects=False)
        assert remote(by_header)[:2] == (401, "SecurityException"), op
    assert web.call("GET", f"{secret}-d", "GETFILESTATUS").status_code == 404
    assert web.call("GET", f"{secret}-x", "GETFILESTATUS").status_code == 404


def test_the_token_is_no_login_on_the_rpc_port(web: WebCluster,
                                               files: tuple[str, str]) -> None:
    secret, other = files
    token = _token(_open_url(web, secret))

    async def as_token() -> None:
        client = AsyncClient(f"xdfs://{web.rpc}", user="", password="", token=token)
        try:
            with pytest.raises(AuthenticationFailed):
                await client.stat(secret)
        finally:
            await client.close()

    async def anonymous() -> None:
        client = AsyncClient(f"xdfs://{web.rpc}", user="", password="", token="")
        try:
            # honoured with block_locations of that file, as the DataNode calls it ...
            located = await client.block_locations(secret, ticket=token)
            assert located.file_length == len(SECRET)
            # ... for no other file, and no other call takes it
            with pytest.raises(AccessDenied):
                await client.block_locations(other, ticket=token)
            with pytest.raises(NotAuthenticated):
                await client.block_locations(secret)
            with pytest.raises(NotAuthenticated):
                await client.mkdirs(f"{secret}-rpc")
        finally:
            await client.close()

    web.run(as_token())
    web.run(anonymous())


def test_a_file_put_in_its_place_is_not_readable_with_it(
        web: WebCluster, files: tuple[str, str]) -> None:
    secret, other = files
    url = _open_url(web, secret)
    web.call("PUT", other, "RENAME", auth=(ALICE, ALICE_PW), destination=secret + ".tmp")
    web.call("DELETE", secret, "DELETE", auth=(ALICE, ALICE_PW)).raise_for_status()
    web.call("PUT", secret + ".tmp", "RENAME", auth=(ALICE, ALICE_PW),
             destination=secret).raise_for_status()
    assert remote(requests.get(url, timeout=60))[:2] == (403, "AccessControlException")


def test_the_checksum_redirect_is_a_read_url(web: WebCluster, files: tuple[str, str]) -> None:
    secret, other = files
    answer = web.call("GET", secret, "GETFILECHECKSUM", auth=(ALICE, ALICE_PW),
                      allow_redirects=False)
    url = str(answer.headers["Location"])
    _token(url)
    assert requests.get(url, timeout=60).json()["FileChecksum"]["length"] == 28
    assert remote(requests.get(_with(url, other), timeout=60))[0] == 403


def test_the_ui_download_link_is_a_read_url(web: WebCluster, files: tuple[str, str]) -> None:
    secret, other = files
    browser = requests.Session()
    login = browser.post(f"http://{web.http}/ui/login", timeout=60, allow_redirects=False,
                         data={"user": ALICE, "password": ALICE_PW, "next": "/ui/"})
    assert login.status_code == 302
    link = browser.get(f"http://{web.http}/ui/download", params={"path": secret},
                       allow_redirects=False, timeout=60)
    assert link.status_code == 302
    url = str(link.headers["Location"])
    token = _token(url)
    assert requests.get(url, timeout=60).content == SECRET  # the cookie stays behind
    assert remote(requests.get(_with(url, other), timeout=60))[0] == 403
    mkdir = web.call("PUT", f"{secret}-ui", "MKDIRS", auth=None, delegation=token)
    assert remote(mkdir)[0] == 401


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    yield from start_web_cluster(tmp_path_factory.mktemp("read-urls"),
                                 read_url_lifetime_s=1.0)


def test_a_read_url_expires(short_lived: WebCluster) -> None:
    web = short_lived
    path = f"/expiring-{uuid.uuid4().hex[:8]}"
    made = web.call("PUT", path, "CREATE", auth=(ROOT, ROOT_PW), data=b"soon gone")
    assert made.status_code == 201, made.text
    url = _open_url_as_root(web, path)

    # (polled here: the cluster's loop thread must stay free to answer)
    for _ in range(600):
        answer = requests.get(url, timeout=60)
        if answer.status_code != 200:
            break
        time.sleep(0.1)
    assert remote(answer)[:2] == (401, "SecurityException")
    assert "expired" in remote(answer)[2]


def _open_url_as_root(web: WebCluster, path: str) -> str:
    answer = web.call("GET", path, "OPEN", allow_redirects=False)
    assert answer.status_code == 307, answer.text
    return str(answer.headers["Location"])


def test_a_create_redirect_writes_that_file_and_nothing_else(
        web: WebCluster, files: tuple[str, str], web_dir: str) -> None:
    secret, other = files
    target = f"{web_dir}/new"
    url = _write_url(web, target, permission="600")
    token = _token(url)
    # not a read of alice's files, not another path, not another op, on the DataNode
    assert remote(requests.get(_with(url, secret, op="OPEN"), timeout=60))[0] == 401
    for changed in (_with(url, f"{web_dir}/elsewhere"), _with(url, other, overwrite="true")):
        answer = requests.put(changed, data=b"evil", timeout=60)
        assert remote(answer)[:2] == (403, "AccessControlException"), answer.text
    appended = requests.post(_with(url, secret, op="APPEND"), data=b"evil", timeout=60)
    assert remote(appended)[0] == 403
    # not a login on the NameNode's REST gateway
    for method, path, op in [("GET", secret, "OPEN"), ("PUT", f"{web_dir}/d", "MKDIRS"),
                             ("PUT", target, "CREATE")]:
        answer = web.call(method, path, op, auth=None, delegation=token, allow_redirects=False)
        assert remote(answer)[:2] == (401, "SecurityException"), op
    # nor on the RPC port, as a login or as the exchange without a DataNode's credential

    async def rpc() -> None:
        as_token = AsyncClient(f"xdfs://{web.rpc}", user="", password="", token=token)
        alice = AsyncClient(f"xdfs://{web.rpc}", user=ALICE, password=ALICE_PW)
        try:
            with pytest.raises(AuthenticationFailed):
                await as_token.stat(secret)
            with pytest.raises(AccessDenied):
                await alice.rpc.call(WEBHDFS_WRITE_LOGIN,
                                     WebHdfsWriteRequest(token, "CREATE", target))
        finally:
            await as_token.close()
            await alice.close()

    web.run(rpc())
    assert web.call("GET", other, "OPEN", auth=(ALICE, ALICE_PW)).content == OTHER
    # the write it was made for
    assert requests.put(url, data=b"the new file", timeout=60).status_code == 201
    status = web.call("GET", target, "GETFILESTATUS").json()["FileStatus"]
    assert (status["owner"], status["permission"], status["length"]) == (ALICE, "600", 12)


def test_an_append_redirect_appends_to_that_file_only(
        web: WebCluster, files: tuple[str, str]) -> None:
    secret, other = files
    url = _write_url(web, secret, "APPEND")
    assert "delegation" not in url
    assert remote(requests.post(_with(url, other), data=b"!", timeout=60))[0] == 403
    assert requests.post(url, data=b"!", timeout=60).status_code == 200
    assert web.call("GET", secret, "OPEN", auth=(ALICE, ALICE_PW)).content == SECRET + b"!"
    assert web.call("GET", other, "OPEN", auth=(ALICE, ALICE_PW)).content == OTHER
