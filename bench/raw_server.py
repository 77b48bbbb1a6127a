"""The raw asyncio baseline server of bench/rpc.py: the same work as xdfs's echo server with
no msgpack, no checksums, no request ids, no credit (the ceiling the RPC layer is held to).

``python bench/raw_server.py [--port P] [--no-uvloop]`` prints
``raw server serving on HOST:PORT (loop=MODULE.CLASS)`` when ready.

Every connection starts with a 13-byte hello ``op: u8 | total: u64 | chunk: u32`` (big
endian), then, depending on ``op``:

* ``E`` (echo): the client sends ``u32 length | payload`` messages; each one is written
  back as is, one ``transport.write`` per message (as xdfs writes one frame per reply);
* ``U`` (upload): the client sends ``total`` payload bytes as ``u32 length | chunk``
  frames of ``chunk`` bytes; the server receives them into one reusable buffer and, once
  every byte arrived, answers with ``total`` as a u64;
* ``D`` (download): the server sends ``total`` bytes of zeros as ``u32 length | chunk``
  frames of ``chunk`` bytes, honouring the transport's write flow control.

Stream receivers count bytes on the wire instead of parsing each prefix: with 1 MiB chunks
that is 1,024 prefixes per GiB, a cost far below the resolution of the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import struct
from typing import cast

HELLO = struct.Struct(">BQI")
LENGTH = struct.Struct(">I")
TOTAL = struct.Struct(">Q")
OP_ECHO, OP_UPLOAD, OP_DOWNLOAD = b"E"[0], b"U"[0], b"D"[0]
#: The same write buffer limits as xdfs's default ``rpc.write_buffer_high_bytes``.
WRITE_HIGH_BYTES = 4 << 20
RECEIVE_BUFFER_BYTES = 1 << 20


def wire_bytes(total: int, chunk: int) -> int:
    """Bytes on the wire of a ``total``-byte stream cut into ``chunk``-byte frames."""
    frames = -(-total // chunk)
    return total + frames * LENGTH.size


class RawServerProtocol(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray(RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buf)
        self._hello = bytearray()
        self._op = 0
        self._total = 0
        self._chunk = 0
        self._pending = bytearray()  # echo: bytes of an incomplete message
        self._expect = 0  # upload: wire bytes still to come
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_BYTES, low=WRITE_HIGH_BYTES // 4)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        data = self._view[:nbytes]
        if not self._op:
            need = HELLO.size - len(self._hello)
            self._hello += data[:need]
            data = data[need:]
            if len(self._hello) < HELLO.size:
                return
            self._op, self._total, self._chunk = HELLO.unpack(self._hello)
            self._start()
        if self._op == OP_ECHO:
            self._echo(data)
        elif self._op == OP_UPLOAD:
            self._expect -= len(data)
            if self._expect == 0:
                assert self.transport is not None
                self.transport.write(TOTAL.pack(self._total))

    def _start(self) -> None:
        if self._op == OP_UPLOAD:
            self._expect = wire_bytes(self._total, self._chunk)
        elif self._op == OP_DOWNLOAD:
            self._task = asyncio.get_running_loop().create_task(self._download())
        elif self._op != OP_ECHO:
            raise ValueError(f"unknown op {self._op}")

    def _echo(self, data: memoryview) -> None:
        assert self.transport is not None
        pending = self._pending
        pending += data
        start, end = 0, len(pending)
        while end - start >= LENGTH.size:
            (length,) = LENGTH.unpack_from(pending, start)
            stop = start + LENGTH.size + length
            if stop > end:
                break
            self.transport.write(bytes(pending[start:stop]))
            start = stop
        del pending[:start]

    async def _download(self) -> None:
        transport = self.transport
        assert transport is not None
        block = bytes(self._chunk)
        prefix = LENGTH.pack(self._chunk)
        full, rest = divmod(self._total, self._chunk)
        for _ in range(full):
            if not self._can_write.is_set():
                await self._can_write.wait()
            if transport.is_closing():
                return
            transport.writelines((prefix, block))
        if rest:
            transport.writelines((LENGTH.pack(rest), block[:rest]))

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._can_write.set()
        if self._task is not None:
            self._task.cancel()


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(RawServerProtocol, host, port, backlog=1024)
    sockname = server.sockets[0].getsockname()
    kind = f"{type(loop).__module__}.{type(loop).__name__}"
    print(f"raw server serving on {sockname[0]}:{sockname[1]} (loop={kind})", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    # The same loop selection as every xdfs process.
    from xdfs.rpc.loop import run

    run(serve(args.host, args.port), use_uvloop=not args.no_uvloop)


if __name__ == "__main__":
    main()
