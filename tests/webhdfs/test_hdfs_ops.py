"""The WebHDFS operations HDFS tools reach for beyond the core (quotas, concat, server
defaults, trash root, access checks, token renewal and cancellation), and HDFS's exception
classes and messages in RemoteException bodies, over plain HTTP."""

from __future__ import annotations

from tests.webhdfs.conftest import ALICE, ALICE_PW, WebCluster
from tests.webhdfs.test_rest import put_file, remote
from xdfs.config import GiB


def test_content_summary_and_quota_usage_report_the_quotas(web: WebCluster, web_dir: str
                                                           ) -> None:
    quoted = f"{web_dir}/q"
    web.call("PUT", quoted, "MKDIRS").raise_for_status()
    put_file(web, f"{quoted}/f", b"x" * 100, replication="2")

    async def set_quota() -> None:
        async with web.client() as client:
            await client.set_quota(quoted, 10, GiB)

    web.run(set_quota())
    summary = web.call("GET", quoted, "GETCONTENTSUMMARY").json()
    assert summary == {"ContentSummary": {
        "directoryCount": 1, "fileCount": 1, "length": 100, "quota": 10,
        "spaceConsumed": 200, "spaceQuota": GiB, "typeQuota": {}}}
    usage = web.call("GET", quoted, "GETQUOTAUSAGE").json()
    assert usage == {"QuotaUsage": {
        "fileAndDirectoryCount": 2, "quota": 10, "spaceConsumed": 200, "spaceQuota": GiB,
        "typeQuota": {}}}
    # no quota: HDFS's -1
    assert web.call("GET", web_dir, "GETQUOTAUSAGE").json()["QuotaUsage"]["quota"] == -1


def test_concat_appends_the_sources_and_removes_them(web: WebCluster, web_dir: str) -> None:
    block = web.call("GET", "/", "GETSERVERDEFAULTS").json()["FsServerDefaults"]["blockSize"]
    del block  # (the test cluster's files use its own block size: whole blocks below)
    from tests.webhdfs.conftest import BLOCK_BYTES

    parts = [bytes([65 + i]) * BLOCK_BYTES for i in range(3)]
    for i, data in enumerate(parts):
        put_file(web, f"{web_dir}/p{i}", data)
    done = web.call("POST", f"{web_dir}/p0", "CONCAT", sources=f"{web_dir}/p1,{web_dir}/p2")
    assert done.status_code == 200, done.text
    assert web.call("GET", f"{web_dir}/p0", "OPEN").content == b"".join(parts)
    code, exception, message = remote(web.call("GET", f"{web_dir}/p1", "GETFILESTATUS"))
    assert (code, exception, message) == (
        404, "FileNotFoundException", f"File does not exist: {web_dir}/p1")
    code, exception, _ = remote(web.call("POST", f"{web_dir}/p0", "CONCAT", sources="rel"))
    assert (code, exception) == (400, "IllegalArgumentException")


def test_server_defaults_trash_root_and_access_checks(web: WebCluster, web_dir: str) -> None:
    defaults = web.call("GET", "/", "GETSERVERDEFAULTS").json()["FsServerDefaults"]
    assert set(defaults) == {
        "blockSize", "bytesPerChecksum", "checksumType", "defaultStoragePolicyId",
        "encryptDataTransfer", "fileBufferSize", "keyProviderUri", "replication",
        "trashInterval", "writePacketSize"}
    assert defaults["bytesPerChecksum"] == 512 and defaults["replication"] >= 1
    trash = web.call("GET", web_dir, "GETTRASHROOT", auth=(ALICE, ALICE_PW)).json()
    assert trash == {"Path": f"/user/{ALICE}/.Trash"}
    private = f"{web_dir}/private"
    web.call("PUT", private, "MKDIRS", permission="700").raise_for_status()
    assert web.call("GET", private, "CHECKACCESS", fsaction="rwx").status_code == 200
    code, exception, message = remote(
        web.call("GET", private, "CHECKACCESS", fsaction="r-x", auth=(ALICE, ALICE_PW)))
    assert (code, exception) == (403, "AccessControlException")
    assert message.startswith(f"Permission denied: user={ALICE}, access=READ_EXECUTE, inode=")
    code, exception, _ = remote(web.call("GET", private, "CHECKACCESS", fsaction="rwz"))
    assert (code, exception) == (400, "IllegalArgumentException")


def test_renew_and_cancel_delegation_tokens(web: WebCluster) -> None:
    token = web.call("GET", "/", "GETDELEGATIONTOKEN", auth=(ALICE, ALICE_PW)).json()[
        "Token"]["urlString"]
    renewed = web.call("PUT", "/", "RENEWDELEGATIONTOKEN", auth=(ALICE, ALICE_PW),
                       token=token).json()
    assert set(renewed) == {"long"} and renewed["long"] > 0
    # another user's token is not root's to renew; a forged one is a bad argument
    code, exception, _ = remote(web.call("PUT", "/", "RENEWDELEGATIONTOKEN", token=token))
    assert (code, exception) == (403, "AccessControlException")
    code, exception, _ = remote(
        web.call("PUT", "/", "RENEWDELEGATIONTOKEN", token=token[:-4] + "AAAA"))
    assert (code, exception) == (400, "IllegalArgumentException")
    # cancelling is refused in HDFS's shape, and the token still works
    code, exception, message = remote(web.call(
        "PUT", "/", "CANCELDELEGATIONTOKEN", auth=(ALICE, ALICE_PW), token=token))
    assert (code, exception) == (400, "UnsupportedOperationException")
    assert "password" in message
    home = web.call("GET", "/", "GETHOMEDIRECTORY", auth=None, delegation=token)
    assert home.json() == {"Path": f"/user/{ALICE}"}


def test_errors_carry_hdfs_exception_classes_and_messages(web: WebCluster, web_dir: str
                                                          ) -> None:
    put_file(web, f"{web_dir}/file", b"1")
    cases = [
        (("GET", f"{web_dir}/missing", "GETFILESTATUS"),
         (404, "FileNotFoundException", f"File does not exist: {web_dir}/missing")),
        (("GET", f"{web_dir}/missing", "LISTSTATUS"),
         (404, "FileNotFoundException", f"File does not exist: {web_dir}/missing")),
        (("PUT", f"{web_dir}/file/sub", "MKDIRS"),
         (403, "ParentNotDirectoryException",
          f"Parent path is not a directory: {web_dir}/file")),
        (("DELETE", web_dir, "DELETE"),
         (403, "PathIsNotEmptyDirectoryException",
          f"`{web_dir} is non empty': Directory is not empty")),
    ]
    for (method, path, op), expected in cases:
        assert remote(web.call(method, path, op)) == expected, (method, path, op)
    code, exception, message = remote(put_file(web, f"{web_dir}/file", b"2"))
    assert (code, exception) == (403, "FileAlreadyExistsException")
    assert "already exists" in message
    private = f"{web_dir}/locked"
    web.call("PUT", private, "MKDIRS", permission="700").raise_for_status()
    code, exception, message = remote(
        web.call("GET", private, "LISTSTATUS", auth=(ALICE, ALICE_PW)))
    assert (code, exception) == (403, "AccessControlException")
    assert message.startswith(f"Permission denied: user={ALICE}, access=READ_EXECUTE, inode=")


def test_hdfs_operations_xdfs_lacks_are_refused_in_hdfs_shape(web: WebCluster, web_dir: str
                                                              ) -> None:
    for method, op, reason in (("GET", "GETACLSTATUS", "ACLs"), ("PUT", "SETXATTR", "xattr"),
                               ("PUT", "CREATESNAPSHOT", "snapshots"),
                               ("GET", "GETSTORAGEPOLICY", "storage policies")):
        code, exception, message = remote(web.call(method, web_dir, op))
        assert (code, exception) == (400, "UnsupportedOperationException"), op
        assert message.startswith(f"{op}: ") and reason in message.replace(
            "extended attributes", "xattr")
    code, exception, _ = remote(web.call("GET", web_dir, "NOSUCHOP"))
    assert (code, exception) == (400, "IllegalArgumentException")
