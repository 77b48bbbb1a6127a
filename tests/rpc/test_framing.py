"""The pure pieces of the wire: FrameReader, frame encoding, messages."""

from __future__ import annotations

import gc
import random

import crc32c
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xdfs.errors import FrameTooLarge
from xdfs.rpc.buffer_pool import BUFFER_STEP_BYTES, LARGE_BUFFERS, BufferPool
from xdfs.rpc.connection import encode_frame
from xdfs.rpc.framing import OWN_BUFFER_MIN_BYTES, FrameReader, frame
from xdfs.rpc.messages import LENGTH_PREFIX, Chunk, InEnvelope, Kind, Tail


def receive(reader: FrameReader, stream: bytes, cuts: list[int]) -> list[bytes]:
    """Deliver ``stream`` as a socket would: pieces ending at ``cuts``, each piece written
    into get_buffer() (as much as fits per call). Returns the payloads, copied at once."""
    out: list[bytes] = []
    start = 0
    for end in [*sorted(set(cuts)), len(stream)]:
        while start < end:
            buf = reader.get_buffer()
            assert len(buf) > 0
            n = min(len(buf), end - start)
            buf[:n] = stream[start : start + n]
            start += n
            out.extend(bytes(p) for p in reader.feed(n))
    return out


payloads_strategy = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.binary(min_size=60, max_size=300),
        st.integers(0, 2000).map(lambda n: random.Random(n).randbytes(n)),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=payloads_strategy,
    buffer_bytes=st.integers(64, 512),
    data=st.data(),
)
def test_any_split_of_a_frame_stream_yields_the_same_payloads(
    payloads: list[bytes], buffer_bytes: int, data: st.DataObject
) -> None:
    stream = b"".join(frame(p) for p in payloads)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=40), label="cuts")
    reader = FrameReader(frame_bytes_max=4096, buffer_bytes=buffer_bytes)
    assert receive(reader, stream, cuts) == payloads
    assert reader.buffered_bytes == 0


@settings(max_examples=100, deadline=None)
@given(payloads=payloads_strategy, data=st.data())
def test_payloads_stay_valid_until_the_next_get_buffer(
    payloads: list[bytes], data: st.DataObject
) -> None:
    # Views returned by one feed() are checked before the next get_buffer(), as the
    # protocol decodes them; views of large frames stay valid for as long as they are held.
    stream = b"".join(frame(p) for p in payloads)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10), label="cuts")
    reader = FrameReader(frame_bytes_max=4096, buffer_bytes=64)
    held: list[tuple[memoryview, bytes]] = []
    got: list[bytes] = []
    start = 0
    for end in [*sorted(set(cuts)), len(stream)]:
        while start < end:
            buf = reader.get_buffer()
            n = min(len(buf), end - start)
            buf[:n] = stream[start : start + n]
            start += n
            for view in reader.feed(n):
                got.append(bytes(view))
                if view.obj is not reader.shared_buffer:
                    held.append((view, bytes(view)))
    assert got == payloads
    for view, copy in held:  # own-buffer frames were never overwritten later
        assert bytes(view) == copy


def test_large_frames_get_their_own_buffer_and_small_ones_share() -> None:
    reader = FrameReader(frame_bytes_max=1 << 20, buffer_bytes=1024)
    big = random.Random(1).randbytes(100_000)
    small = b"tiny"
    stream = frame(small) + frame(big) + frame(small)
    out: list[memoryview] = []
    kinds: list[bool] = []
    start = 0
    while start < len(stream):
        buf = reader.get_buffer()
        n = min(len(buf), len(stream) - start)
        buf[:n] = stream[start : start + n]
        start += n
        for view in reader.feed(n):
            kinds.append(view.obj is reader.shared_buffer)
            out.append(memoryview(bytes(view)))
    assert [bytes(v) for v in out] == [small, big, small]
    assert kinds == [True, False, True]


def test_large_frame_is_filled_in_place_without_extra_reads() -> None:
    reader = FrameReader(frame_bytes_max=1 << 20, buffer_bytes=256)
    big = bytes(range(256)) * 400
    stream = frame(big)
    buf = reader.get_buffer()
    buf[:100] = stream[:100]
    assert reader.feed(100) == []
    # The next buffer is exactly the rest of the large frame.
    rest = reader.get_buffer()
    assert len(rest) == len(stream) - 100
    rest[:] = stream[100:]
    (payload,) = reader.feed(len(rest))
    assert bytes(payload) == big


def feed_views(reader: FrameReader, stream: bytes) -> list[memoryview]:
    """Deliver ``stream`` in buffer-sized pieces; return the payload views uncopied."""
    views: list[memoryview] = []
    start = 0
    while start < len(stream):
        buf = reader.get_buffer()
        n = min(len(buf), len(stream) - start)
        buf[:n] = stream[start : start + n]
        start += n
        views.extend(reader.feed(n))
    return views


@pytest.mark.parametrize("size", [5000, 70_000])
def test_held_large_payloads_are_never_overwritten(size: int) -> None:
    # A decoded chunk keeps viewing its frame's buffer (zero-copy, as the connection hands
    # large chunks on); a later frame of the same size must not be received into that
    # buffer while anything still views it.
    reader = FrameReader(frame_bytes_max=1 << 20, buffer_bytes=256)
    held: list[tuple[memoryview, bytes]] = []
    for i in range(40):
        data = random.Random(i).randbytes(size)
        chunk_frame = encode_frame(Kind.CHUNK, 1, "", Chunk(i, 0, memoryview(data)))
        (view,) = feed_views(reader, bytes(chunk_frame))
        envelope = msgspec.msgpack.decode(view, type=InEnvelope)
        chunk = msgspec.msgpack.decode(envelope.body, type=Chunk)
        del view, envelope
        assert bytes(chunk.data) == data
        if i % 3 == 0:
            held.append((chunk.data, data))
        elif i % 3 == 1:
            held.append((chunk.data[10:], data[10:]))  # a slice keeps the buffer alive too
        del chunk
        if i % 7 == 0:
            feed_views(reader, frame(b"small"))  # small frames in between
        if i % 11 == 0:
            gc.collect()
    for view, expected in held:
        assert bytes(view) == expected


def test_large_frame_buffers_may_be_reused_once_released() -> None:
    reader = FrameReader(frame_bytes_max=1 << 20, buffer_bytes=256)
    for i in range(10):
        payload = bytes([i]) * 10_000
        (view,) = feed_views(reader, frame(payload))
        assert bytes(view) == payload
        del view  # released at once: reuse (if the reader recycles) must be safe


def test_frame_limit_is_enforced_from_the_prefix_alone() -> None:
    reader = FrameReader(frame_bytes_max=1000, buffer_bytes=256)
    buf = reader.get_buffer()
    buf[:4] = LENGTH_PREFIX.pack(1001)
    with pytest.raises(FrameTooLarge, match="1001"):
        reader.feed(4)


def test_4_gib_prefix_raises_before_allocating() -> None:
    reader = FrameReader(frame_bytes_max=4 << 20, buffer_bytes=256)
    buf = reader.get_buffer()
    buf[:6] = b"\xff\xff\xff\xffab"
    with pytest.raises(FrameTooLarge):
        reader.feed(6)
    assert reader._big is None


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    for buffer_bytes in (64, 2000):
        reader = FrameReader(frame_bytes_max=1000, buffer_bytes=buffer_bytes)
        payload = bytes(1000)
        assert receive(reader, frame(payload) + frame(b"x"), []) == [payload, b"x"]


def test_limit_applies_to_a_prefix_split_across_reads() -> None:
    reader = FrameReader(frame_bytes_max=100, buffer_bytes=64)
    prefix = LENGTH_PREFIX.pack(101)
    buf = reader.get_buffer()
    buf[:2] = prefix[:2]
    assert reader.feed(2) == []
    buf = reader.get_buffer()
    buf[:2] = prefix[2:]
    with pytest.raises(FrameTooLarge):
        reader.feed(2)


def test_many_small_frames_in_one_read() -> None:
    reader = FrameReader(frame_bytes_max=1000, buffer_bytes=4096)
    payloads = [bytes([i % 256]) * (i % 7) for i in range(300)]
    stream = b"".join(frame(p) for p in payloads)
    assert receive(reader, stream, list(range(0, len(stream), 1000))) == payloads


# -- encoding ----------------------------------------------------------------------------------


def test_encode_frame_matches_the_documented_layout() -> None:
    buf = encode_frame(Kind.REQUEST, 42, "echo", Tail(3, 4))
    (length,) = LENGTH_PREFIX.unpack_from(buf)
    assert length == len(buf) - 4
    assert msgspec.msgpack.decode(bytes(buf[4:])) == [3, 42, "echo", [3, 4]]
    envelope = msgspec.msgpack.decode(bytes(buf[4:]), type=InEnvelope)
    assert (envelope.kind, envelope.id, envelope.method) == (Kind.REQUEST, 42, "echo")
    assert msgspec.msgpack.decode(envelope.body, type=Tail) == Tail(3, 4)


@pytest.mark.parametrize("size", [0, 1, 255, 256, 65535, 65536, 100_003])
def test_chunk_frames_round_trip(size: int) -> None:
    data = random.Random(size).randbytes(size)
    chunk = Chunk(7, crc32c.crc32c(data), memoryview(data))
    buf = encode_frame(Kind.CHUNK, 9, "", chunk)
    envelope = msgspec.msgpack.decode(bytes(buf[4:]), type=InEnvelope)
    decoded = msgspec.msgpack.decode(envelope.body, type=Chunk)
    assert (decoded.seq, decoded.crc32c, bytes(decoded.data)) == (7, crc32c.crc32c(data), data)


@pytest.mark.parametrize("size", [1, 255, 256, 65535, 65536, 100_003])
def test_zero_copy_chunk_head_equals_the_encoded_frame(size: int) -> None:
    from xdfs.rpc.connection import encode_chunk_head

    data = random.Random(size).randbytes(size)
    chunk = Chunk(3, crc32c.crc32c(data), memoryview(data))
    head = encode_chunk_head(11, chunk)
    assert bytes(head) + data == bytes(encode_frame(Kind.CHUNK, 11, "", chunk))


# -- large frames in pooled buffers (fresh memory costs a page fault per 4 KiB page) -------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.sampled_from([0, 10, 65_535, 65_536, 70_000, 200_000, 300_000]),
                   max_size=8),
    data=st.data(),
)
def test_any_split_of_large_and_small_frames_yields_the_same_payloads(
    sizes: list[int], data: st.DataObject
) -> None:
    payloads = [random.Random(i).randbytes(size) for i, size in enumerate(sizes)]
    stream = b"".join(frame(p) for p in payloads)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20), label="cuts")
    reader = FrameReader(frame_bytes_max=1 << 20, buffer_bytes=256 * 1024)
    assert receive(reader, stream, cuts) == payloads
    assert reader.buffered_bytes == 0


@pytest.mark.parametrize("pieces", [1, 7])
def test_frames_from_64_kib_never_view_the_shared_buffer(pieces: int) -> None:
    # Cut from the shared buffer, a payload must be copied out (the next receive
    # overwrites it): a 200 KiB small-file chunk would be copied into fresh memory.
    reader = FrameReader(frame_bytes_max=1 << 20, buffer_bytes=256 * 1024)
    big, small = random.randbytes(OWN_BUFFER_MIN_BYTES), b"x" * (OWN_BUFFER_MIN_BYTES - 1)
    stream = frame(small) + frame(big) + frame(small)
    step = -(-len(stream) // pieces)
    views: list[memoryview] = []
    for start in range(0, len(stream), step):
        views += feed_views(reader, stream[start : start + step])
    assert [bytes(v) for v in views] == [small, big, small]
    assert views[1].obj is not reader.shared_buffer
    assert views[0].obj is reader.shared_buffer or pieces > 1  # (a later read moves it)


def test_a_released_large_buffer_is_lent_again_to_any_reader() -> None:
    LARGE_BUFFERS.clear()
    first, second = (FrameReader(frame_bytes_max=2 << 20, buffer_bytes=4096)
                     for _ in range(2))
    payload = random.randbytes(1 << 20)
    (view,) = feed_views(first, frame(payload))
    held = id(view.obj)  # (the pool keeps it alive: the id stays its own)
    (other,) = feed_views(second, frame(payload))
    assert id(other.obj) != held  # still viewed: never overwritten
    del view, other
    (again,) = feed_views(second, frame(payload[::-1]))
    assert id(again.obj) == held  # warm memory instead of a fresh buffer
    assert bytes(again) == payload[::-1]


def test_the_pool_remembers_at_most_its_limit() -> None:
    pool = BufferPool(3 * BUFFER_STEP_BYTES)
    kept = [pool.take(BUFFER_STEP_BYTES) for _ in range(10)]  # all still in use
    assert pool.held_bytes <= 3 * BUFFER_STEP_BYTES
    del kept
    assert len(pool.take(BUFFER_STEP_BYTES)) == BUFFER_STEP_BYTES
    assert pool.held_bytes <= 3 * BUFFER_STEP_BYTES
