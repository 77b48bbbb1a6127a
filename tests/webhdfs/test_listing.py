"""LISTSTATUS of a directory bigger than one batch is streamed and complete, in HDFS's
exact JSON; LISTSTATUS_BATCH pages it; one user's listings beyond the per-user bound
wait their turn instead of failing."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import ALICE, ALICE_PW, WebCluster, basic, start_web_cluster
from tests.webhdfs.test_fsspec_webhdfs import webhdfs
from xdfs.common.addresses import parse_address
from xdfs.http import webhdfs as w
from xdfs.namenode.webhdfs.listing import PerUserLimit

BATCH = 7
ENTRIES = 45  # six full batches and a partial one


@pytest.fixture(scope="module")
def listing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    yield from start_web_cluster(tmp_path_factory.mktemp("listing"),
                                 list_batch_entries=BATCH, heavy_calls_per_user_max=1)


@pytest.fixture(scope="module")
def big_dir(listing: WebCluster) -> str:
    path = "/big"

    async def fill() -> None:
        client = listing.client()
        try:
            await client.mkdirs(path)
            for index in range(ENTRIES):
                if index % 3:
                    await client.write_file(f"{path}/f{index:03}", b"x" * index)
                else:
                    await client.mkdirs(f"{path}/d{index:03}")
        finally:
            await client.close()

    listing.run(fill())
    return path


def _expected(web: WebCluster, path: str) -> bytes:
    """The listing as one json.dumps of HDFS's shape, built from the namesystem's pages
    through LISTSTATUS_BATCH (HDFS's paged listing, 1000 a page)."""
    entries, start = [], ""
    while True:
        page = web.call("GET", path, "LISTSTATUS_BATCH", startAfter=start).json()
        listing = page["DirectoryListing"]
        entries += listing["partialListing"]["FileStatuses"]["FileStatus"]
        if not listing["remainingEntries"]:
            break
        start = entries[-1]["pathSuffix"]
    return json.dumps({"FileStatuses": {"FileStatus": entries}}).encode()


def test_a_listing_bigger_than_a_batch_is_streamed_whole(listing: WebCluster,
                                                         big_dir: str) -> None:
    answer = listing.call("GET", big_dir, "LISTSTATUS")
    assert answer.status_code == 200
    assert answer.headers["Transfer-Encoding"] == "chunked"
    assert answer.headers["Content-Type"].startswith("application/json")
    assert answer.content == _expected(listing, big_dir)  # byte for byte one json.dumps
    names = [entry["pathSuffix"] for entry in answer.json()["FileStatuses"]["FileStatus"]]
    assert names == sorted(names) and len(names) == len(set(names)) == ENTRIES


def test_an_http_1_0_client_gets_the_listing_up_to_the_close(listing: WebCluster,
                                                             big_dir: str) -> None:
    with socket.create_connection(parse_address(listing.http), timeout=60) as sock:
        sock.sendall(f"GET /webhdfs/v1{big_dir}?op=LISTSTATUS HTTP/1.0\r\n"
                     f"Authorization: {basic(ROOT, ROOT_PW)}\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    assert body == _expected(listing, big_dir)


@pytest.mark.parametrize("count", [0, 1, BATCH, 2 * BATCH])
def test_listings_at_the_batch_edges(listing: WebCluster, count: int) -> None:
    path = f"/edge-{count}"

    async def fill() -> None:
        client = listing.client()
        try:
            await client.mkdirs(path)
            for index in range(count):
                await client.mkdirs(f"{path}/e{index:02}")
        finally:
            await client.close()

    listing.run(fill())
    answer = listing.call("GET", path, "LISTSTATUS")
    assert answer.content == _expected(listing, path)
    assert len(answer.json()["FileStatuses"]["FileStatus"]) == count


def test_a_file_lists_itself(listing: WebCluster, big_dir: str) -> None:
    answer = listing.call("GET", f"{big_dir}/f001", "LISTSTATUS").json()
    (entry,) = answer["FileStatuses"]["FileStatus"]
    assert entry["pathSuffix"] == "" and entry["type"] == "FILE" and entry["length"] == 1


def test_errors_before_the_stream_are_remote_exceptions(listing: WebCluster,
                                                        big_dir: str) -> None:
    missing = listing.call("GET", "/no/such/dir", "LISTSTATUS")
    assert missing.status_code == 404
    assert missing.json()["RemoteException"]["exception"] == "FileNotFoundException"
    listing.call("PUT", big_dir, "SETPERMISSION", permission="700").raise_for_status()
    try:
        denied = listing.call("GET", big_dir, "LISTSTATUS", auth=(ALICE, ALICE_PW))
        assert denied.status_code == 403
    finally:
        listing.call("PUT", big_dir, "SETPERMISSION", permission="755").raise_for_status()


def test_fsspec_lists_the_streamed_directory(listing: WebCluster, big_dir: str) -> None:
    fs = webhdfs(listing, user=ROOT, password=ROOT_PW)
    names = sorted(entry.rsplit("/", 1)[1] for entry in fs.ls(big_dir, detail=False))
    assert len(names) == ENTRIES and names[0] == "d000"


def test_parallel_listings_of_one_user_queue_and_all_answer(listing: WebCluster,
                                                            big_dir: str) -> None:
    """heavy_calls_per_user_max = 1: eight at once run one after the other, each whole."""
    expected = _expected(listing, big_dir)

    def one(_: int) -> bytes:
        answer = requests.get(f"{listing.url}{big_dir}", params={"op": "LISTSTATUS"},
                              auth=(ROOT, ROOT_PW), timeout=120)
        assert answer.status_code == 200, answer.text
        return answer.content

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(8))) == [expected] * 8


def test_the_per_user_limit_queues_in_order_and_spares_other_users() -> None:
    async def scenario() -> None:
        limit = PerUserLimit(1)
        order: list[str] = []
        release = asyncio.Event()

        async def call(user: str, name: str) -> None:
            async with limit.hold(user):
                order.append(name)
                if name == "a1":
                    await release.wait()

        first = asyncio.create_task(call("alice", "a1"))
        await asyncio.sleep(0)
        queued = [asyncio.create_task(call("alice", f"a{i}")) for i in (2, 3)]
        other = asyncio.create_task(call("bob", "b1"))
        await other  # bob is not behind alice
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["a1", "b1"] and limit.waiting("alice") == 2
        release.set()
        await asyncio.gather(first, *queued)  # queued, not failed
        assert order == ["a1", "b1", "a2", "a3"] and limit.waiting("alice") == 0

    asyncio.run(scenario())


def test_statuses_keeps_hdfs_shape() -> None:
    assert w.statuses("/x", []) == {"FileStatus": []}
