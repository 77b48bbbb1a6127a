"""Hostile or broken checkpoint uploads and fetched batches: a clear error, nothing installed,
nothing applied, the server keeps serving."""

from __future__ import annotations

import hashlib
from pathlib import Path

import crc32c
import msgspec
import pytest

from xdfs.errors import InvalidArgument, ProtocolError, StreamError, XdfsError, error_from_code
from xdfs.namenode.editlog.codec import encode_record
from xdfs.namenode.editlog.replay import apply_batch, decode_batch
from xdfs.namenode.namespace.ops import MkdirOp
from xdfs.namenode.server import NameNode
from xdfs.protocol.backup import UPLOAD_IMAGE, ImageHead
from xdfs.rpc.messages import Chunk, ErrorInfo, Kind, Tail
from xdfs.testing.minicluster import MiniCluster

from ..rpc.wire import raw_peer
from .conftest import ROOT, ROOT_PW, backup_config, connect


def _nn_files(nn: NameNode) -> list[str]:
    return sorted(p.name for p in nn.dirs[0].current.iterdir())


async def _image_at(nn: NameNode, tmp_path: Path) -> tuple[bytes, int]:
    """A genuine image of this NameNode's namespace at its synced txid (not installed)."""
    async with connect(nn.address) as client:
        for i in range(5):
            await client.mkdirs(f"/d{i}")
        image = await client.fetch_image(tmp_path / "fetched")  # fsimage_0, for its bytes
    assert nn.edits is not None and nn.fs is not None
    from xdfs.namenode.image.recovery import save_checkpoint
    from xdfs.namenode.image.storage import StorageDirectory

    scratch = StorageDirectory(tmp_path / "scratch")
    scratch.format("CID-nn", nn.dirs[0].read_version().namespace_id, 0)
    txid = nn.edits.synced_txid
    save_checkpoint([scratch], nn.fs.ns, txid)
    assert image.name == "fsimage_0000000000000000000"
    return scratch.image_path(txid).read_bytes(), txid


async def _upload(nn: NameNode, head: ImageHead, chunks: list[bytes]) -> object:
    async with connect(nn.address) as client:
        return await client.rpc.upload(UPLOAD_IMAGE, head, chunks)


async def test_upload_with_wrong_md5_or_size_installs_nothing(
    minicluster: MiniCluster, tmp_path: Path
) -> None:
    nn = await minicluster.start_namenode(config=backup_config())
    data, txid = await _image_at(nn, tmp_path)
    before = _nn_files(nn)
    md5 = hashlib.md5(data).hexdigest()
    bad_heads = [
        ImageHead(txid, len(data), "0" * 32),  # wrong md5
        ImageHead(txid, len(data) + 10, md5),  # stream shorter than announced
        ImageHead(txid, len(data) - 10, md5),  # longer than announced
        ImageHead(txid, len(data), "zz"),  # not an md5
    ]
    for head in bad_heads:
        with pytest.raises(InvalidArgument):
            await _upload(nn, head, [data[: len(data) // 2], data[len(data) // 2 :]])
        assert _nn_files(nn) == before, head
    assert nn.image_txid == 0
    # The genuine upload then works.
    answer = await _upload(nn, ImageHead(txid, len(data), md5), [data])
    assert answer.installed and nn.image_txid == txid  # type: ignore[attr-defined]


async def test_upload_of_a_future_stale_or_foreign_image_is_refused(
    minicluster: MiniCluster, tmp_path: Path
) -> None:
    nn = await minicluster.start_namenode(config=backup_config())
    data, txid = await _image_at(nn, tmp_path)
    md5 = hashlib.md5(data).hexdigest()
    before = _nn_files(nn)
    with pytest.raises(InvalidArgument, match="future"):
        await _upload(nn, ImageHead(txid + 1000, len(data), md5), [data])
    with pytest.raises(InvalidArgument, match="stale"):
        await _upload(nn, ImageHead(0, len(data), md5), [data])
    # A head whose txid differs from the image's own header.
    with pytest.raises(InvalidArgument, match="says txid"):
        await _upload(nn, ImageHead(txid - 1, len(data), md5), [data])
    garbage = b"not an image at all" * 100
    with pytest.raises(InvalidArgument, match="not a valid fsimage"):
        await _upload(nn, ImageHead(txid, len(garbage), hashlib.md5(garbage).hexdigest()),
                      [garbage])
    assert _nn_files(nn) == before


async def _raw_upload(nn: NameNode, head: ImageHead, frames: list[tuple[int, object]]
                      ) -> XdfsError:
    """Log in, send the upload head then ``frames`` by hand; the call's error."""
    async with raw_peer(nn.address) as peer:
        await peer.hello(user=ROOT, password=ROOT_PW)
        peer.send(Kind.HEAD, 1, UPLOAD_IMAGE.name, head)
        for kind, body in frames:
            peer.send(kind, 1, "", body)
        envelope = await peer.recv()
        assert (envelope.kind, envelope.id) == (Kind.ERROR, 1), envelope
        info = msgspec.msgpack.decode(envelope.body, type=ErrorInfo)
        return error_from_code(info.code, info.message)


def _chunk(seq: int, data: bytes) -> Chunk:
    return Chunk(seq, crc32c.crc32c(data), memoryview(data))


async def test_out_of_order_missing_or_corrupt_chunks_install_nothing(
    minicluster: MiniCluster, tmp_path: Path
) -> None:
    nn = await minicluster.start_namenode(config=backup_config())
    data, txid = await _image_at(nn, tmp_path)
    head = ImageHead(txid, len(data), hashlib.md5(data).hexdigest())
    a, b = data[: len(data) // 2], data[len(data) // 2 :]
    before = _nn_files(nn)
    cases: dict[str, list[tuple[int, object]]] = {
        "out of order": [(Kind.CHUNK, _chunk(1, b)), (Kind.CHUNK, _chunk(0, a))],
        "missing chunk": [(Kind.CHUNK, _chunk(0, a)), (Kind.TAIL, Tail(2, len(data)))],
        "skipped seq": [(Kind.CHUNK, _chunk(0, a)), (Kind.CHUNK, _chunk(2, b))],
        "corrupt chunk": [(Kind.CHUNK, Chunk(0, 12345, memoryview(a)))],
    }
    for name, frames in cases.items():
        error = await _raw_upload(nn, head, frames)
        assert isinstance(error, StreamError | InvalidArgument), (name, error)
        assert _nn_files(nn) == before, name
    assert nn.image_txid == 0


def test_a_corrupt_fetched_batch_changes_nothing() -> None:
    records = [encode_record(t, MkdirOp(f"/d{t}", 1000 + t, 0o755, "root", "supergroup", t))
               for t in (1, 2, 3)]
    data = b"".join(records)
    flipped = bytearray(data)
    flipped[len(records[0]) + 20] ^= 0xFF  # inside the second record
    bad_batches = {
        "crc": (1, 3, bytes(flipped)),
        "count": (1, 4, data),
        "first txid": (2, 3, data),
        "trailing bytes": (1, 3, data + b"\x00"),
        "truncated": (1, 3, data[:-3]),
    }
    for name, (first, count, batch) in bad_batches.items():
        with pytest.raises(ProtocolError):
            decode_batch(first, count, batch)
        assert name  # decoding fails before anything is applied or logged
    sink, target = _Sink(), _Target()
    assert apply_batch(decode_batch(1, 3, data), target, sink) == 3
    assert [r for _, r in sink.records] == records
    assert [op.path for op in target.ops] == ["/d1", "/d2", "/d3"]  # type: ignore[attr-defined]


class _Sink:
    def __init__(self) -> None:
        self.records: list[tuple[int, bytes]] = []

    def append_record(self, txid: int, record: bytes | bytearray | memoryview) -> None:
        self.records.append((txid, bytes(record)))


class _Target:
    def __init__(self) -> None:
        self.ops: list[object] = []

    def apply(self, op: object) -> tuple[int, ...]:
        self.ops.append(op)
        return ()
