"""Benchmark of the RPC layer against a raw asyncio socket baseline (the ceiling).

    .venv/bin/python bench/rpc.py            # full run: median of 5, 1 GiB streams
    .venv/bin/python bench/rpc.py --quick    # a few seconds, for smoke tests

Two server processes are started and always killed at the end: xdfs's echo server
(``python -m xdfs.testing.echo_server``) and bench/raw_server.py, which does the same work
with no msgpack, no checksums, no request ids and no credit. From this process, on the same
event loop for both, we measure:

* small calls: ECHO with a 16-byte payload through :class:`xdfs.rpc.client.RpcClient`, with 1
  and with 64 calls in flight (64 coroutines, one connection), against length-prefixed echo
  of the same payload over a raw socket, each raw call also awaiting its own future;
  PING, whose handler is a plain ``def`` answered inline (as the NameNode's reads), with 64
  calls in flight against the same raw echo;
* streams: 1 GiB upload through SINK and download through SOURCE in 1 MiB chunks, against
  the same bytes as raw ``u32 length | chunk`` frames over a raw socket;
* logins: connect, log in with a shared secret (bench/login_server.py, which admits one
  user as a JournalNode does), one PING, close; one at a time, against a raw connect, one
  echo and close.

Every figure is the median of ``--runs`` runs; xdfs and raw alternate within each run, each
measurement on a fresh connection (connect and a short warm-up are not timed). Beside the
rates, the CPU time of this process and of the server process during the timed part is
reported per call or per MiB: on a shared machine it is the steadier figure. The tables are
Markdown, ready for docs/benchmarks.md. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import secrets
import signal
import statistics
import struct
import sys
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import cast

from xdfs.common.process import ServerProcess
from xdfs.config import RpcConfig, load_config
from xdfs.protocol.system import ECHO, PING, SINK, SOURCE, EchoRequest, SourceRequest
from xdfs.rpc.client import RpcClient
from xdfs.rpc.loop import run
from xdfs.rpc.messages import PROTOCOL_VERSION, Empty, Hello

BENCH_DIR = Path(__file__).resolve().parent
MiB = 1 << 20

#: Aims from DESIGN.md section 3 and the project brief.
CALLS_AIM_PER_S = 40_000
STREAM_AIM_RATIO = 0.70

# The raw wire format; must match bench/raw_server.py (which documents it).
RAW_HELLO = struct.Struct(">BQI")
RAW_LENGTH = struct.Struct(">I")
RAW_TOTAL = struct.Struct(">Q")
OP_ECHO, OP_UPLOAD, OP_DOWNLOAD = b"E"[0], b"U"[0], b"D"[0]
RAW_WRITE_HIGH_BYTES = 4 << 20
#: The user bench/login_server.py admits.
LOGIN_USER = "bench"


class BenchError(RuntimeError):
    """A measurement produced a wrong answer (the figures would be meaningless)."""


@dataclasses.dataclass(frozen=True)
class Settings:
    runs: int
    calls: int  # timed calls per measurement with `inflight` in flight
    serial_calls: int  # timed calls per measurement with 1 in flight
    logins: int  # timed connect + login + call + close per measurement
    inflight: int
    payload_bytes: int
    stream_bytes: int
    chunk_bytes: int
    use_uvloop: bool
    timeout_s: float
    only: tuple[str, ...]


# -- timing --------------------------------------------------------------------------------


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Sample:
    rate: float  # calls/s or MB/s
    client_cpu_us: float  # CPU of this process per op (call or MiB)
    server_cpu_us: float | None  # CPU of the server process per op


class Meter:
    """Wall and CPU time of the timed part of one measurement: ``with meter: ...``."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self._start: tuple[float, float, float | None] = (0.0, 0.0, None)
        self._stop: tuple[float, float, float | None] = (0.0, 0.0, None)

    def _now(self) -> tuple[float, float, float | None]:
        return time.perf_counter(), time.process_time(), process_cpu_s(self.server_pid)

    def __enter__(self) -> Meter:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = self._now()

    def sample(self, rate_units: float, ops: float) -> Sample:
        """``rate_units`` (calls, or MB) per wall second; CPU per op (call, or MiB)."""
        wall = self._stop[0] - self._start[0]
        client = (self._stop[1] - self._start[1]) / ops * 1e6
        server_start, server_stop = self._start[2], self._stop[2]
        server = None
        if server_start is not None and server_stop is not None:
            server = (server_stop - server_start) / ops * 1e6
        return Sample(rate_units / wall, client, server)


async def drive(call: Callable[[], Awaitable[object]], calls: int, inflight: int) -> None:
    """Make ``calls`` calls, ``inflight`` coroutines issuing them back to back."""
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    await asyncio.gather(*(worker() for _ in range(inflight)))


async def timed_calls(
    call: Callable[[], Awaitable[object]], meter: Meter, s: Settings, inflight: int
) -> Sample:
    calls = s.calls if inflight > 1 else s.serial_calls
    await drive(call, max(100, min(2_000, calls // 10)), inflight)  # warm-up
    with meter:
        await drive(call, calls, inflight)
    return meter.sample(calls, calls)


def stream_sample(meter: Meter, s: Settings) -> Sample:
    return meter.sample(s.stream_bytes / 1e6, s.stream_bytes / MiB)


def zero_chunks(total: int, chunk: int) -> Iterator[bytes]:
    block = bytes(chunk)
    full, rest = divmod(total, chunk)
    for _ in range(full):
        yield block
    if rest:
        yield block[:rest]


# -- xdfs side -----------------------------------------------------------------------------


async def xdfs_calls(
    address: str, config: RpcConfig, s: Settings, inflight: int, meter: Meter,
    ping: bool = False,
) -> Sample:
    """ECHO calls (an ``async def`` handler: a task per call on the server), or with
    ``ping`` PING calls (a plain ``def`` handler, answered inline as a NameNode's reads)."""
    payload = os.urandom(s.payload_bytes)
    request = EchoRequest(payload)
    client = RpcClient(address, config)
    try:
        answer = await client.call(ECHO, request)
        if answer.payload != payload:
            raise BenchError("xdfs echo returned a different payload")

        def call() -> Awaitable[object]:
            if ping:
                return client.call(PING, Empty())
            return client.call(ECHO, request)

        return await timed_calls(call, meter, s, inflight)
    finally:
        await client.close()


async def xdfs_logins(address: str, secret: str, config: RpcConfig, s: Settings,
                      meter: Meter) -> Sample:
    """Connect, log in as the login server's user with its secret, PING, close."""
    hello = Hello(PROTOCOL_VERSION, client_name="bench", user=LOGIN_USER, password=secret)

    async def login() -> None:
        client = RpcClient(address, config, hello=hello)
        try:
            await client.call(PING, Empty())
        finally:
            await client.close()

    await login()  # warm-up (and a check that the secret is right)
    with meter:
        for _ in range(s.logins):
            await login()
    return meter.sample(s.logins, s.logins)


async def raw_logins(host: str, port: int, s: Settings, meter: Meter) -> Sample:
    """Connect, one raw echo, close: the floor of a connection's cost."""
    loop = asyncio.get_running_loop()
    payload = os.urandom(s.payload_bytes)

    async def once() -> None:
        transport, proto = await loop.create_connection(RawEchoClient, host, port)
        try:
            if await proto.call(payload) != payload:
                raise BenchError("raw echo returned a different payload")
        finally:
            transport.close()

    await once()
    with meter:
        for _ in range(s.logins):
            await once()
    return meter.sample(s.logins, s.logins)


async def xdfs_upload(address: str, config: RpcConfig, s: Settings, meter: Meter) -> Sample:
    client = RpcClient(address, config)
    try:
        await client.call(ECHO, EchoRequest())  # connect outside the timed part
        with meter:
            chunks = zero_chunks(s.stream_bytes, s.chunk_bytes)
            result = await client.upload(SINK, Empty(), chunks)
    finally:
        await client.close()
    if result.total_bytes != s.stream_bytes:
        raise BenchError(f"xdfs sink received {result.total_bytes} of {s.stream_bytes} bytes")
    return stream_sample(meter, s)


async def xdfs_download(address: str, config: RpcConfig, s: Settings, meter: Meter) -> Sample:
    client = RpcClient(address, config)
    received = 0
    try:
        await client.call(ECHO, EchoRequest())
        with meter:
            stream = await client.download(SOURCE, SourceRequest(s.stream_bytes, s.chunk_bytes))
            async for part in stream:
                received += len(part)
    finally:
        await client.close()
    if received != s.stream_bytes:
        raise BenchError(f"xdfs source delivered {received} of {s.stream_bytes} bytes")
    return stream_sample(meter, s)


# -- raw asyncio side ----------------------------------------------------------------------


def raw_wire_bytes(total: int, chunk: int) -> int:
    return total + -(-total // chunk) * RAW_LENGTH.size


class RawEchoClient(asyncio.Protocol):
    """Length-prefixed echo; replies come back in order, so a FIFO of futures matches them."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiters: deque[asyncio.Future[bytes]] = deque()
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(RAW_HELLO.pack(OP_ECHO, 0, 0))

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        start, end = 0, len(buf)
        while end - start >= RAW_LENGTH.size:
            (length,) = RAW_LENGTH.unpack_from(buf, start)
            stop = start + RAW_LENGTH.size + length
            if stop > end:
                break
            self._waiters.popleft().set_result(bytes(buf[start + RAW_LENGTH.size : stop]))
            start = stop
        del buf[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectionError("raw echo connection lost"))

    async def call(self, payload: bytes) -> bytes:
        assert self.transport is not None
        future: asyncio.Future[bytes] = self._loop.create_future()
        self._waiters.append(future)
        self.transport.write(RAW_LENGTH.pack(len(payload)) + payload)
        return await future


class RawUploadClient(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._answer = bytearray()
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(
            high=RAW_WRITE_HIGH_BYTES, low=RAW_WRITE_HIGH_BYTES // 4
        )

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        self._answer += data
        if len(self._answer) >= RAW_TOTAL.size and not self.done.done():
            self.done.set_result(RAW_TOTAL.unpack_from(self._answer)[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self._can_write.set()
        if not self.done.done():
            self.done.set_exception(ConnectionError("raw upload connection lost"))

    async def upload(self, total: int, chunk: int) -> int:
        transport = self.transport
        assert transport is not None
        transport.write(RAW_HELLO.pack(OP_UPLOAD, total, chunk))
        for data in zero_chunks(total, chunk):
            if not self._can_write.is_set():
                await self._can_write.wait()
            transport.writelines((RAW_LENGTH.pack(len(data)), data))
        return await self.done


class RawDownloadClient(asyncio.BufferedProtocol):
    """Receives into one reusable buffer and counts the bytes on the wire."""

    def __init__(self, total: int, chunk: int) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = memoryview(bytearray(1 << 20))
        self._expect = raw_wire_bytes(total, chunk)
        self._hello = RAW_HELLO.pack(OP_DOWNLOAD, total, chunk)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def start(self) -> None:
        assert self.transport is not None
        self.transport.write(self._hello)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buf

    def buffer_updated(self, nbytes: int) -> None:
        self._expect -= nbytes
        if self._expect <= 0 and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError("raw download connection lost"))


async def raw_calls(host: str, port: int, s: Settings, inflight: int, meter: Meter) -> Sample:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(RawEchoClient, host, port)
    try:
        payload = os.urandom(s.payload_bytes)
        if await proto.call(payload) != payload:
            raise BenchError("raw echo returned a different payload")

        def call() -> Awaitable[object]:
            return proto.call(payload)

        return await timed_calls(call, meter, s, inflight)
    finally:
        transport.close()


async def raw_upload(host: str, port: int, s: Settings, meter: Meter) -> Sample:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(RawUploadClient, host, port)
    try:
        with meter:
            received = await proto.upload(s.stream_bytes, s.chunk_bytes)
    finally:
        transport.close()
    if received != s.stream_bytes:
        raise BenchError(f"raw server received {received} of {s.stream_bytes} bytes")
    return stream_sample(meter, s)


async def raw_download(host: str, port: int, s: Settings, meter: Meter) -> Sample:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(
        lambda: RawDownloadClient(s.stream_bytes, s.chunk_bytes), host, port
    )
    try:
        with meter:
            proto.start()
            await proto.done
    finally:
        transport.close()
    return stream_sample(meter, s)


# -- orchestration -------------------------------------------------------------------------

Measurement = Callable[[Meter], Awaitable[Sample]]


@dataclasses.dataclass
class Metric:
    name: str
    unit: str  # of the rate
    op: str  # what CPU time is counted per
    xdfs: Measurement
    raw: Measurement
    aim: str
    #: Whether (xdfs median, xdfs/raw ratio) meets the aim; None when there is none.
    meets: Callable[[float, float], bool] | None
    xdfs_runs: list[Sample] = dataclasses.field(default_factory=list)
    raw_runs: list[Sample] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Servers:
    xdfs_address: str
    xdfs_pid: int
    raw_host: str
    raw_port: int
    raw_pid: int
    login_address: str
    login_pid: int
    secret: str


def build_metrics(servers: Servers, config: RpcConfig, s: Settings) -> list[Metric]:
    address, host, port = servers.xdfs_address, servers.raw_host, servers.raw_port
    size = f"{s.stream_bytes / MiB:g} MiB in {s.chunk_bytes / MiB:g} MiB chunks"
    stream_aim = f">= {STREAM_AIM_RATIO:.0%} of raw"

    def stream_meets(_value: float, ratio: float) -> bool:
        return ratio >= STREAM_AIM_RATIO

    return [
        Metric(
            f"echo {s.payload_bytes} B, 1 in flight", "calls/s", "call",
            lambda m: xdfs_calls(address, config, s, 1, m),
            lambda m: raw_calls(host, port, s, 1, m),
            "-", None,
        ),
        Metric(
            f"echo {s.payload_bytes} B, {s.inflight} in flight", "calls/s", "call",
            lambda m: xdfs_calls(address, config, s, s.inflight, m),
            lambda m: raw_calls(host, port, s, s.inflight, m),
            f">= {CALLS_AIM_PER_S:,} calls/s",
            lambda value, _ratio: value >= CALLS_AIM_PER_S,
        ),
        Metric(
            f"ping (plain def handler; raw: echo {s.payload_bytes} B), {s.inflight} in flight",
            "calls/s", "call",
            lambda m: xdfs_calls(address, config, s, s.inflight, m, ping=True),
            lambda m: raw_calls(host, port, s, s.inflight, m),
            "-", None,
        ),
        Metric(
            "connect + login (shared secret) + ping + close, 1 at a time", "logins/s",
            "login",
            # (its meter watches the login server's CPU, not the echo server's)
            lambda _m: xdfs_logins(servers.login_address, servers.secret, config, s,
                                   Meter(servers.login_pid)),
            lambda m: raw_logins(host, port, s, m),
            "-", None,
        ),
        Metric(
            f"upload {size} (SINK)", "MB/s", "MiB",
            lambda m: xdfs_upload(address, config, s, m),
            lambda m: raw_upload(host, port, s, m),
            stream_aim, stream_meets,
        ),
        Metric(
            f"download {size} (SOURCE)", "MB/s", "MiB",
            lambda m: xdfs_download(address, config, s, m),
            lambda m: raw_download(host, port, s, m),
            stream_aim, stream_meets,
        ),
    ]


def fmt(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}"


async def measure(metrics: list[Metric], servers: Servers, s: Settings) -> None:
    for run_number in range(1, s.runs + 1):
        for metric in metrics:
            async with asyncio.timeout(s.timeout_s):
                xdfs_sample = await metric.xdfs(Meter(servers.xdfs_pid))
                raw_sample = await metric.raw(Meter(servers.raw_pid))
            metric.xdfs_runs.append(xdfs_sample)
            metric.raw_runs.append(raw_sample)
            xdfs_text = fmt(xdfs_sample.rate, metric.unit)
            raw_text = fmt(raw_sample.rate, metric.unit)
            print(
                f"  run {run_number}/{s.runs}  {metric.name:<42} xdfs {xdfs_text:>16}"
                f"   raw {raw_text:>16}",
                file=sys.stderr, flush=True,
            )


def client_loop_name() -> str:
    loop = asyncio.get_running_loop()
    return f"{type(loop).__module__}.{type(loop).__name__}"


def uvloop_mapped(pid: int) -> bool | None:
    """Whether uvloop's extension module is loaded in process ``pid`` (Linux only)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    return "/uvloop/" in maps


def median_cpu(samples: list[Sample], side: str) -> str:
    values = [
        sample.client_cpu_us if side == "client" else sample.server_cpu_us for sample in samples
    ]
    known = [value for value in values if value is not None]
    return f"{statistics.median(known):,.0f}" if known else "n/a"


def report(metrics: list[Metric], s: Settings, loops: dict[str, str]) -> str:
    lines = [
        f"| metric (median of {s.runs}) | xdfs | raw asyncio | xdfs/raw | aim |",
        "|---|---:|---:|---:|---|",
    ]
    spreads = ["| metric | xdfs min .. max | raw min .. max |", "|---|---:|---:|"]
    cpu = [
        "| CPU us per op (median) | xdfs client | xdfs server | raw client | raw server |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in metrics:
        xdfs_rates = [sample.rate for sample in m.xdfs_runs]
        raw_rates = [sample.rate for sample in m.raw_runs]
        xdfs_value, raw_value = statistics.median(xdfs_rates), statistics.median(raw_rates)
        ratio = xdfs_value / raw_value
        if m.meets is None:
            aim = "-"
        else:
            aim = f"{m.aim}: {'met' if m.meets(xdfs_value, ratio) else 'MISSED'}"
        lines.append(
            f"| {m.name} | {fmt(xdfs_value, m.unit)} | {fmt(raw_value, m.unit)} "
            f"| {ratio:.2f} | {aim} |"
        )
        spreads.append(
            f"| {m.name} | {min(xdfs_rates):,.0f} .. {max(xdfs_rates):,.0f} "
            f"| {min(raw_rates):,.0f} .. {max(raw_rates):,.0f} |"
        )
        cpu.append(
            f"| {m.name}, per {m.op} | {median_cpu(m.xdfs_runs, 'client')} "
            f"| {median_cpu(m.xdfs_runs, 'server')} | {median_cpu(m.raw_runs, 'client')} "
            f"| {median_cpu(m.raw_runs, 'server')} |"
        )
    loop_lines = [f"- {side}: {name}" for side, name in loops.items()]
    return "\n".join([*lines, "", *spreads, "", *cpu, "", "Event loops:", *loop_lines])


def crc32c_gb_per_s() -> float:
    """Throughput of the CRC32C xdfs puts on every chunk (once per side), on 1 MiB blocks."""
    import crc32c

    block = bytes(MiB)
    rounds = 64
    start = time.perf_counter()
    for _ in range(rounds):
        crc32c.crc32c(block)
    return rounds * MiB / (time.perf_counter() - start) / 1e9


def load_average() -> str:
    try:
        return " / ".join(f"{load:.2f}" for load in os.getloadavg())
    except OSError:
        return "unknown"


def command_line(argv: list[str] | None) -> str:
    python = os.path.relpath(sys.executable)
    if python.startswith(".."):
        python = sys.executable
    args = argv if argv is not None else sys.argv[1:]
    return " ".join([python, "bench/rpc.py", *args])


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for dist in ("uvloop", "msgspec", "crc32c"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} not installed")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cpus} CPUs available ({os.cpu_count()} online{', ' + model if model else ''}); "
        f"Python {platform.python_version()} ({platform.python_implementation()}); "
        f"{platform.system()} {platform.release()}; {', '.join(versions)}"
    )


async def bench(servers: Servers, s: Settings, loops: dict[str, str]) -> str:
    loops["client (this process)"] = client_loop_name()
    config = dataclasses.replace(load_config().rpc, stream_chunk_bytes=s.chunk_bytes)
    metrics = [
        m for m in build_metrics(servers, config, s)
        if not s.only or any(word in m.name for word in s.only)
    ]
    if not metrics:
        raise SystemExit(f"no metric matches --only {' '.join(s.only)}")
    await measure(metrics, servers, s)
    return report(metrics, s, loops)


def server_processes(
    s: Settings, workdir: Path, secret_file: Path
) -> tuple[ServerProcess, ServerProcess, ServerProcess]:
    flags = [] if s.use_uvloop else ["--no-uvloop"]
    echo = ServerProcess(
        [sys.executable, "-m", "xdfs.testing.echo_server", "--port", "0", *flags],
        log_path=workdir / "echo_server.log",
        ready_pattern=r"echo server serving on (\S+:\d+)(?: \(uvloop=(\w+)\))?",
    )
    raw = ServerProcess(
        [sys.executable, str(BENCH_DIR / "raw_server.py"), "--port", "0", *flags],
        log_path=workdir / "raw_server.log",
        ready_pattern=r"raw server serving on (\S+):(\d+) \(loop=(\S+)\)",
    )
    login = ServerProcess(
        [sys.executable, str(BENCH_DIR / "login_server.py"), "--port", "0",
         "--secret-file", str(secret_file), *flags],
        log_path=workdir / "login_server.log",
        ready_pattern=r"login server serving on (\S+:\d+)",
    )
    return echo, raw, login


def echo_server_loop(proc: ServerProcess) -> str:
    assert proc.match is not None
    requested = proc.match.group(2)
    mapped = uvloop_mapped(proc.pid)
    if mapped is None:
        return f"uvloop requested: {requested} (cannot inspect the process)"
    state = "uvloop" if mapped and requested != "False" else "asyncio (stdlib)"
    return f"{state} (requested uvloop={requested}; uvloop module loaded: {mapped})"


def parse_args(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        description="xdfs RPC vs raw asyncio: small-call throughput and streaming MB/s."
    )
    parser.add_argument("--quick", action="store_true",
                        help="a short smoke run: 3 runs, fewer calls, 64 MiB streams")
    parser.add_argument("--runs", type=int, help="runs per figure, the median is shown (5)")
    parser.add_argument("--calls", type=int,
                        help="timed calls per run with --inflight in flight (200000)")
    parser.add_argument("--serial-calls", type=int,
                        help="timed calls per run with 1 in flight (20000)")
    parser.add_argument("--logins", type=int,
                        help="timed connect + login + ping + close per run (1000)")
    parser.add_argument("--inflight", type=int, default=64, help="calls in flight (64)")
    parser.add_argument("--payload-bytes", type=int, default=16, help="echo payload (16)")
    parser.add_argument("--stream-mib", type=float, help="bytes per stream, MiB (1024)")
    parser.add_argument("--chunk-kib", type=int,
                        help="stream chunk, KiB (rpc.stream_chunk_bytes, 1024)")
    parser.add_argument("--no-uvloop", action="store_true", help="stdlib asyncio everywhere")
    parser.add_argument("--only", action="append", default=[], metavar="WORD",
                        help="measure only metrics whose name contains WORD (repeatable)")
    parser.add_argument("--timeout-s", type=float, default=600.0,
                        help="deadline of one measurement (600)")
    args = parser.parse_args(argv)
    quick = args.quick
    chunk = args.chunk_kib * 1024 if args.chunk_kib else load_config().rpc.stream_chunk_bytes
    stream_mib = args.stream_mib if args.stream_mib is not None else (64 if quick else 1024)
    s = Settings(
        runs=args.runs or (3 if quick else 5),
        calls=args.calls or (10_000 if quick else 200_000),
        serial_calls=args.serial_calls or (2_000 if quick else 20_000),
        logins=args.logins or (200 if quick else 1_000),
        inflight=args.inflight,
        payload_bytes=args.payload_bytes,
        stream_bytes=int(stream_mib * MiB),
        chunk_bytes=chunk,
        use_uvloop=not args.no_uvloop,
        timeout_s=args.timeout_s,
        only=tuple(args.only),
    )
    if min(s.runs, s.calls, s.serial_calls, s.logins, s.inflight, s.stream_bytes,
           s.chunk_bytes) <= 0:
        parser.error("counts and sizes must be positive")
    frame_max = load_config().rpc.frame_bytes_max
    if s.chunk_bytes + 1024 > frame_max:
        parser.error(f"--chunk-kib must leave 1 KiB under rpc.frame_bytes_max ({frame_max})")
    return s


def main(argv: list[str] | None = None) -> int:
    s = parse_args(argv)
    # SIGTERM (a timeout, a CI cancel) unwinds like Ctrl-C, so the servers are killed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    load_before = load_average()
    print(f"machine: {machine()}\nload average (1/5/15 min): {load_before}", file=sys.stderr)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xdfs-bench-") as tmp:
        secret_file = Path(tmp) / "login.secret"
        secret = secrets.token_hex(32)
        secret_file.write_text(secret + "\n")
        echo, raw, login = server_processes(s, Path(tmp), secret_file)
        try:
            echo.start(deadline_s=30)
            raw.start(deadline_s=30)
            login.start(deadline_s=30)
            assert echo.match is not None and raw.match is not None
            assert login.match is not None
            servers = Servers(
                echo.match.group(1), echo.pid, raw.match.group(1), int(raw.match.group(2)),
                raw.pid, login.match.group(1), login.pid, secret,
            )
            loops = {
                "xdfs echo server": echo_server_loop(echo),
                "raw server": raw.match.group(3),
            }
            print(
                f"xdfs echo server {servers.xdfs_address} (pid {echo.pid}), raw server "
                f"{servers.raw_host}:{servers.raw_port} (pid {raw.pid}), login server "
                f"{servers.login_address} (pid {login.pid})",
                file=sys.stderr, flush=True,
            )
            table = run(bench(servers, s, loops), use_uvloop=s.use_uvloop)
        except BaseException:
            for proc in (echo, raw, login):
                if proc.proc is not None:
                    tail = proc.log_text()[-2000:]
                    if tail.strip():
                        print(f"--- {proc.log_path.name} ---\n{tail}", file=sys.stderr)
            raise
        finally:
            echo.kill()
            raw.kill()
            login.kill()
    print(f"command: {command_line(argv)}")
    print(f"machine: {machine()}")
    print(
        f"load average (1/5/15 min): {load_before} before, {load_average()} after; "
        f"took {time.monotonic() - started:.0f} s"
    )
    print(
        f"CRC32C: {crc32c_gb_per_s():.1f} GB/s on 1 MiB blocks (xdfs checks every chunk on "
        "both sides, SINK checksums it once more; raw does neither)"
    )
    print("MB/s = 10^6 bytes per second; CPU is user + system time of each process")
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
