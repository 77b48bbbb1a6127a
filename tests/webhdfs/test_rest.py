"""The WebHDFS REST API over plain HTTP (requests): HDFS's JSON shapes, the redirects to
DataNodes, offset/length reads, HDFS's error bodies and statuses, authentication."""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import socket
import struct
from urllib.parse import urlsplit

import crc32c
import requests

from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import ALICE, ALICE_PW, BLOCK_BYTES, WebCluster, basic
from xdfs.testing.poll import eventually

DATA = random.Random(15).randbytes(3 * BLOCK_BYTES + 1234)  # four blocks, the last partial


def put_file(web: WebCluster, path: str, data: bytes, **params: object) -> requests.Response:
    """CREATE as HDFS's clients do it: ask the NameNode, send the bytes where it redirects."""
    first = web.call("PUT", path, "CREATE", allow_redirects=False, **params)
    assert first.status_code == 307, first.text
    location = first.headers["Location"]
    assert "/webhdfs/v1" in location and "ticket=" in location
    return requests.put(location, data=data, timeout=60)


def remote(response: requests.Response) -> tuple[int, str, str]:
    body = response.json()["RemoteException"]
    assert set(body) == {"exception", "javaClassName", "message"}
    assert body["javaClassName"].endswith("." + body["exception"])
    return response.status_code, body["exception"], body["message"]


def test_create_then_status_list_and_read_ranges(web: WebCluster, web_dir: str) -> None:
    path = f"{web_dir}/data.bin"
    created = put_file(web, path, DATA, permission="640", replication="2")
    assert created.status_code == 201
    assert created.headers["Location"].endswith(path)
    status = web.call("GET", path, "GETFILESTATUS").json()["FileStatus"]
    assert status["type"] == "FILE" and status["length"] == len(DATA)
    assert status["permission"] == "640" and status["replication"] == 2
    assert status["owner"] == ROOT and status["pathSuffix"] == ""
    assert status["blockSize"] == BLOCK_BYTES
    assert set(status) == {"accessTime", "blockSize", "childrenNum", "fileId", "group",
                           "length", "modificationTime", "owner", "pathSuffix", "permission",
                           "replication", "storagePolicy", "type"}
    assert web.call("GET", path, "OPEN").content == DATA
    for offset, length in [(0, 10), (BLOCK_BYTES - 5, 10), (2 * BLOCK_BYTES, BLOCK_BYTES + 7),
                           (len(DATA) - 3, 100), (17, 0)]:
        got = web.call("GET", path, "OPEN", offset=offset, length=length)
        assert got.status_code == 200
        assert got.content == DATA[offset:offset + length], (offset, length)
    assert web.call("GET", path, "OPEN", offset=1000).content == DATA[1000:]
    code, exception, _ = remote(web.call("GET", path, "OPEN", offset=len(DATA) + 1))
    assert (code, exception) == (400, "IllegalArgumentException")
    listing = web.call("GET", web_dir, "LISTSTATUS").json()["FileStatuses"]["FileStatus"]
    assert [entry["pathSuffix"] for entry in listing] == ["data.bin"]
    # a file lists itself, with an empty suffix (as HDFS)
    itself = web.call("GET", path, "LISTSTATUS").json()["FileStatuses"]["FileStatus"]
    assert [entry["pathSuffix"] for entry in itself] == [""]


def test_create_refuses_an_existing_file_unless_overwrite(web: WebCluster, web_dir: str
                                                          ) -> None:
    path = f"{web_dir}/f"
    assert put_file(web, path, b"first").status_code == 201
    code, exception, _ = remote(put_file(web, path, b"second"))
    assert (code, exception) == (403, "FileAlreadyExistsException")
    assert web.call("GET", path, "OPEN").content == b"first"
    assert put_file(web, path, b"second", overwrite="true").status_code == 201
    assert web.call("GET", path, "OPEN").content == b"second"
    # an empty file, following the redirect the way curl -L does
    empty = web.call("PUT", f"{web_dir}/empty", "CREATE", data=b"")
    assert empty.status_code == 201
    assert web.call("GET", f"{web_dir}/empty", "OPEN").content == b""


def test_a_body_cut_short_leaves_no_file(web: WebCluster, web_dir: str) -> None:
    """The client says 200 KB, sends 70 KB (more than a block) and hangs up: the DataNode
    never answers 201 and the partial file is deleted, not left half-written."""
    path = f"{web_dir}/cut"
    location = web.call("PUT", path, "CREATE", allow_redirects=False).headers["Location"]
    url = urlsplit(location)
    client = web.client()

    async def exists() -> bool:
        return await client.exists(path)

    async def gone() -> bool:
        return not await client.exists(path)

    try:
        with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
            head = (f"PUT {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                    "Content-Length: 200000\r\n\r\n")
            sock.sendall(head.encode() + DATA[:70_000])
            web.run(eventually(exists, what=f"{path} being written"))
        web.run(eventually(gone, what=f"{path} deleted after its body was cut"))
    finally:
        web.run(client.close())


def test_noredirect_answers_the_location(web: WebCluster, web_dir: str) -> None:
    answer = web.call("PUT", f"{web_dir}/n", "CREATE", noredirect="true")
    assert answer.status_code == 200
    assert requests.put(answer.json()["Location"], data=b"abc", timeout=60).status_code == 201
    assert web.call("GET", f"{web_dir}/n", "OPEN").content == b"abc"


def test_listing_in_batches(web: WebCluster, web_dir: str) -> None:
    names = [f"d{i:04d}" for i in range(1005)]
    client = web.client()
    try:
        for name in names:
            web.run(client.mkdirs(f"{web_dir}/{name}"))
    finally:
        web.run(client.close())
    full = web.call("GET", web_dir, "LISTSTATUS").json()["FileStatuses"]["FileStatus"]
    assert [entry["pathSuffix"] for entry in full] == names
    first = web.call("GET", web_dir, "LISTSTATUS_BATCH").json()["DirectoryListing"]
    page = first["partialListing"]["FileStatuses"]["FileStatus"]
    assert len(page) == 1000 and first["remainingEntries"] == 5
    rest = web.call("GET", web_dir, "LISTSTATUS_BATCH", startAfter=page[-1]["pathSuffix"])
    listing = rest.json()["DirectoryListing"]
    assert [e["pathSuffix"] for e in listing["partialListing"]["FileStatuses"]["FileStatus"]
            ] == names[1000:]
    assert listing["remainingEntries"] == 0


def test_namespace_changes(web: WebCluster, web_dir: str) -> None:
    assert web.call("PUT", f"{web_dir}/a/b", "MKDIRS", permission="711").json() == {
        "boolean": True}
    assert web.call("GET", f"{web_dir}/a/b", "GETFILESTATUS").json()["FileStatus"][
        "permission"] == "711"
    put_file(web, f"{web_dir}/a/f", b"12345")
    summary = web.call("GET", web_dir, "GETCONTENTSUMMARY").json()["ContentSummary"]
    assert summary["directoryCount"] == 3 and summary["fileCount"] == 1
    assert summary["length"] == 5 and summary["quota"] == -1
    # rename: true, or false (not an error) when the source is missing / target exists
    moved = web.call("PUT", f"{web_dir}/a/f", "RENAME", destination=f"{web_dir}/g")
    assert moved.json() == {"boolean": True}
    again = web.call("PUT", f"{web_dir}/a/f", "RENAME", destination=f"{web_dir}/h")
    assert again.json() == {"boolean": False}
    code, exception, _ = remote(web.call("PUT", f"{web_dir}/g", "RENAME", destination="rel"))
    assert (code, exception) == (400, "IllegalArgumentException")
    assert web.call("GET", f"{web_dir}/g", "OPEN").content == b"12345"
    # attributes
    web.call("PUT", f"{web_dir}/g", "SETPERMISSION", permission="600").raise_for_status()
    web.call("PUT", f"{web_dir}/g", "SETOWNER", owner=ALICE, group="staff").raise_for_status()
    assert web.call("PUT", f"{web_dir}/g", "SETREPLICATION", replication="1").json() == {
        "boolean": True}
    assert web.call("PUT", f"{web_dir}/a", "SETREPLICATION", replication="1").json() == {
        "boolean": False}
    web.call("PUT", f"{web_dir}/g", "SETTIMES", modificationtime="1000000",
             accesstime="2000000").raise_for_status()
    status = web.call("GET", f"{web_dir}/g", "GETFILESTATUS").json()["FileStatus"]
    assert (status["permission"], status["owner"], status["group"], status["replication"],
            status["modificationTime"], status["accessTime"]) == (
        "600", ALICE, "staff", 1, 1000000, 2000000)
    # delete: a non-empty directory needs recursive; nothing there is false
    code, exception, _ = remote(web.call("DELETE", f"{web_dir}/a", "DELETE"))
    assert (code, exception) == (403, "PathIsNotEmptyDirectoryException")
    assert web.call("DELETE", f"{web_dir}/a", "DELETE", recursive="true").json() == {
        "boolean": True}
    assert web.call("DELETE", f"{web_dir}/a", "DELETE").json() == {"boolean": False}
    code, exception, _ = remote(web.call("GET", f"{web_dir}/a", "GETFILESTATUS"))
    assert (code, exception) == (404, "FileNotFoundException")


def test_home_directory_and_delegation_tokens(web: WebCluster, web_dir: str) -> None:
    home = web.call("GET", "/", "GETHOMEDIRECTORY", auth=(ALICE, ALICE_PW))
    assert home.json() == {"Path": f"/user/{ALICE}"}
    token = web.call("GET", "/", "GETDELEGATIONTOKEN", auth=(ALICE, ALICE_PW)).json()[
        "Token"]["urlString"]
    by_token = web.call("GET", "/", "GETHOMEDIRECTORY", auth=None, delegation=token)
    assert by_token.json() == {"Path": f"/user/{ALICE}"}
    # the token acts as alice everywhere, data included (the redirect's is alice's)
    assert put_file_as(web, f"{web_dir}/t", b"tok", delegation=token).status_code == 201
    status = web.call("GET", f"{web_dir}/t", "GETFILESTATUS").json()["FileStatus"]
    assert status["owner"] == ALICE
    # a token does not buy another one (no endless extension)
    code, exception, _ = remote(
        web.call("GET", "/", "GETDELEGATIONTOKEN", auth=None, delegation=token))
    assert (code, exception) == (403, "AccessControlException")


def put_file_as(web: WebCluster, path: str, data: bytes, **params: str) -> requests.Response:
    first = web.call("PUT", path, "CREATE", auth=None, allow_redirects=False, **params)
    assert first.status_code == 307, first.text
    return requests.put(first.headers["Location"], data=data, timeout=60)


def test_bearer_tokens_from_the_oauth2_endpoint(web: WebCluster) -> None:
    url = f"http://{web.http}/oauth2/token"
    form = {"grant_type": "client_credentials", "client_id": ALICE, "client_secret": ALICE_PW}
    answer = requests.post(url, data=form, timeout=60).json()
    assert answer["token_type"] == "bearer" and answer["expires_in"] > 0
    headers = {"Authorization": f"Bearer {answer['access_token']}"}
    home = requests.get(f"{web.url}/", params={"op": "GETHOMEDIRECTORY"}, headers=headers,
                        timeout=60)
    assert home.json() == {"Path": f"/user/{ALICE}"}
    wrong = requests.post(url, data={**form, "client_secret": "nope"}, timeout=60)
    assert (wrong.status_code, wrong.json()) == (401, {"error": "invalid_client"})
    grant = requests.post(url, data={**form, "grant_type": "password"}, timeout=60)
    assert (grant.status_code, grant.json()) == (400, {"error": "unsupported_grant_type"})


def test_requests_without_valid_credentials_are_refused(web: WebCluster, web_dir: str
                                                        ) -> None:
    refusals = [
        web.call("GET", "/", "LISTSTATUS", auth=None),
        web.call("GET", "/", "LISTSTATUS", auth=None, **{"user.name": ROOT}),
        web.call("GET", "/", "LISTSTATUS", auth=(ROOT, "wrong")),
        web.call("GET", "/", "LISTSTATUS", auth=("nobody", "x")),
        web.call("GET", "/", "LISTSTATUS", auth=None, delegation="forged.token"),
        requests.get(f"{web.url}/", params={"op": "LISTSTATUS"}, timeout=60,
                     headers={"Authorization": "Bearer garbage"}),
        requests.get(f"{web.url}/", params={"op": "LISTSTATUS"}, timeout=60,
                     headers={"Authorization": "Basic !!!"}),
        requests.get(f"{web.url}/", params={"op": "LISTSTATUS"}, timeout=60,
                     headers={"Authorization": "Negotiate abc"}),
        # a DataNode's credential serves no client request
        requests.get(f"{web.url}/", params={"op": "LISTSTATUS"}, timeout=60,
                     headers={"Authorization": basic("dn/x", "secret")}),
    ]
    for response in refusals:
        code, exception, _ = remote(response)
        assert code in (401, 403), response.text
        assert exception in ("SecurityException", "AccessControlException")
    assert refusals[0].headers["WWW-Authenticate"].startswith("Basic")
    # the DataNode side refuses a request that did not come through the NameNode
    location = web.call("PUT", f"{web_dir}/x", "CREATE", allow_redirects=False).headers[
        "Location"]
    unsigned = location.split("?")[0] + "?op=CREATE&user.name=root"
    code, exception, _ = remote(requests.put(unsigned, data=b"x", timeout=60))
    assert (code, exception) == (401, "SecurityException")
    assert web.call("GET", f"{web_dir}/x", "GETFILESTATUS").status_code == 404


def test_a_password_change_ends_basic_access_with_the_old_one(web: WebCluster) -> None:
    client = web.client()
    try:
        web.run(client.add_user("carol", "old-pw"))
        session = requests.Session()  # one client sending Basic on every request
        home = {"op": "GETHOMEDIRECTORY"}
        for _ in range(3):
            answer = session.get(f"{web.url}/", params=home, auth=("carol", "old-pw"),
                                 timeout=60)
            assert answer.json() == {"Path": "/user/carol"}
        wrong = session.get(f"{web.url}/", params=home, auth=("carol", "nope"), timeout=60)
        assert remote(wrong)[:2] == (401, "SecurityException")
        web.run(client.set_password("carol", "new-pw"))
        old = session.get(f"{web.url}/", params=home, auth=("carol", "old-pw"), timeout=60)
        assert remote(old)[:2] == (401, "SecurityException")
        new = session.get(f"{web.url}/", params=home, auth=("carol", "new-pw"), timeout=60)
        assert new.json() == {"Path": "/user/carol"}
        web.run(client.remove_user("carol"))
        gone = session.get(f"{web.url}/", params=home, auth=("carol", "new-pw"), timeout=60)
        assert remote(gone)[:2] == (401, "SecurityException")
    finally:
        web.run(client.close())


def test_permissions_are_checked_as_for_rpc(web: WebCluster, web_dir: str) -> None:
    private = f"{web_dir}/private"
    web.call("PUT", private, "MKDIRS", permission="700").raise_for_status()
    put_file(web, f"{private}/secret", b"s")
    alice = (ALICE, ALICE_PW)
    for method, path, op, params in [
        ("GET", private, "LISTSTATUS", {}),
        ("GET", f"{private}/secret", "OPEN", {}),
        ("PUT", f"{private}/new", "MKDIRS", {}),
        ("DELETE", f"{private}/secret", "DELETE", {}),
        ("PUT", f"{private}/secret", "SETPERMISSION", {"permission": "777"}),
        ("PUT", f"{private}/secret", "SETOWNER", {"owner": ALICE}),
    ]:
        code, exception, _ = remote(web.call(method, path, op, auth=alice, **params))
        assert (code, exception) == (403, "AccessControlException"), (op, path)
    created = web.call("PUT", f"{private}/mine", "CREATE", auth=alice)
    assert remote(created)[:2] == (403, "AccessControlException")
    assert web.call("GET", f"{private}/mine", "GETFILESTATUS").status_code == 404
    assert web.call("GET", f"{private}/secret", "OPEN").content == b"s"


def test_hostile_paths_and_parameters_are_refused_and_change_nothing(
        web: WebCluster, web_dir: str) -> None:
    before = web.call("GET", web_dir, "LISTSTATUS").json()
    for raw in ["/a%00b", "/../etc", "/a/./b", "/a%0Ab", "//x", "/%2e%2e/x", "/a%2Fb/..",
                "/%FF"]:
        status, body = raw_request(web, "PUT", f"/webhdfs/v1{web_dir}{raw}?op=MKDIRS")
        exception = json.loads(body)["RemoteException"]["exception"]
        assert (status, exception) == (400, "IllegalArgumentException"), raw
    status, _ = raw_request(web, "PUT", f"/webhdfs/v1/../v1{web_dir}/y?op=MKDIRS")
    assert status == 400
    for op, params in [("MKDIRS", {"permission": "999"}), ("MKDIRS", {"permission": "x"}),
                       ("SETREPLICATION", {"replication": "-1"}),
                       ("CREATE", {"overwrite": "maybe"}), ("CREATE", {"blocksize": "1e9"}),
                       ("NOSUCHOP", {}), ("", {})]:
        response = web.call("PUT", f"{web_dir}/p", op, **params)
        assert remote(response)[:2] == (400, "IllegalArgumentException"), (op, params)
    # a GET operation sent as PUT is refused too
    assert remote(web.call("PUT", web_dir, "LISTSTATUS"))[:2] == (
        400, "IllegalArgumentException")
    code, exception, _ = remote(web.call("GET", web_dir, "OPEN", offset="-1"))
    assert (code, exception) == (400, "IllegalArgumentException")
    assert web.call("GET", web_dir, "LISTSTATUS").json() == before


def raw_request(web: WebCluster, method: str, target: str) -> tuple[int, bytes]:
    """A request whose target is sent byte for byte (HTTP libraries resolve ``..``)."""
    host, port = web.http.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.putrequest(method, target, skip_accept_encoding=True)
        connection.putheader("Authorization", basic(ROOT, ROOT_PW))
        connection.putheader("Content-Length", "0")
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_append_and_truncate(web: WebCluster, web_dir: str) -> None:
    """APPEND redirects to a DataNode that appends the body; TRUNCATE at a block boundary
    is done at once (true); both on a missing file are FileNotFoundException."""
    put_file(web, f"{web_dir}/f", b"abc")
    appended = web.call("POST", f"{web_dir}/f", "APPEND", data=b"def")
    assert appended.status_code == 200, appended.text
    assert web.call("GET", f"{web_dir}/f", "OPEN").content == b"abcdef"
    truncated = web.call("POST", f"{web_dir}/f", "TRUNCATE", newlength="0")
    assert truncated.json() == {"boolean": True}
    assert web.call("GET", f"{web_dir}/f", "OPEN").content == b""
    for op, params in [("APPEND", {}), ("TRUNCATE", {"newlength": "1"})]:
        assert remote(web.call("POST", f"{web_dir}/none", op, **params))[:2] == (
            404, "FileNotFoundException")


def hdfs_checksum(data: bytes, block_bytes: int) -> tuple[str, str]:
    """HDFS's MD5-of-MD5-of-CRC32C, written out plainly (512 bytes per CRC)."""
    blocks = [data[i:i + block_bytes] for i in range(0, len(data), block_bytes)]
    block_md5s = b""
    for block in blocks:
        crcs = b"".join(struct.pack(">I", crc32c.crc32c(block[i:i + 512]))
                        for i in range(0, len(block), 512))
        block_md5s += hashlib.md5(crcs).digest()
    per_block = block_bytes // 512 if len(blocks) > 1 else 0
    raw = struct.pack(">iq", 512, per_block) + hashlib.md5(block_md5s).digest()
    return f"MD5-of-{per_block}MD5-of-512CRC32C", raw.hex()


def test_file_checksum_is_hdfs_md5_of_md5_of_crc32c(web: WebCluster, web_dir: str) -> None:
    for name, data in [("multi", DATA), ("one", DATA[:1000]), ("empty", b"")]:
        put_file(web, f"{web_dir}/{name}", data)
        checksum = web.call("GET", f"{web_dir}/{name}", "GETFILECHECKSUM").json()[
            "FileChecksum"]
        algorithm, hexdigest = hdfs_checksum(data, BLOCK_BYTES)
        assert checksum == {"algorithm": algorithm, "bytes": hexdigest, "length": 28}, name
    assert remote(web.call("GET", web_dir, "GETFILECHECKSUM"))[:2] == (
        404, "FileNotFoundException")


def test_block_locations(web: WebCluster, web_dir: str) -> None:
    put_file(web, f"{web_dir}/f", DATA)
    located = web.call("GET", f"{web_dir}/f", "GETFILEBLOCKLOCATIONS").json()
    blocks = located["BlockLocations"]["BlockLocation"]
    assert [b["offset"] for b in blocks] == [0, BLOCK_BYTES, 2 * BLOCK_BYTES, 3 * BLOCK_BYTES]
    assert sum(b["length"] for b in blocks) == len(DATA)
    assert all(b["names"] and len(b["hosts"]) == len(b["names"]) for b in blocks)
