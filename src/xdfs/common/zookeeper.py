"""ZooKeeper as a real process: Debian's ``zookeeper`` package run without systemd, one
standalone server (``xdfs dev --ha``) or a 3-server ensemble (the failover tests), on
127.0.0.1 with free ports.

Each server gets its own directory (``zoo.cfg``, ``data/``, ``server.log``), the
AdminServer turned off (else every server binds :8080 and parallel servers collide) and the
four-letter words ``srvr``, ``ruok``, ``stat`` and ``mntr`` whitelisted. A server is ready
when ``srvr`` reports its ``Mode:`` (standalone, leader or follower): an ensemble member
answers that only once a quorum has elected a leader. The JVM is the child process itself,
so :meth:`ZooKeeperServer.kill` SIGKILLs it by pid and :meth:`pause` SIGSTOPs it. With
``die_with_parent`` (``xdfs dev``) the JVM is started through util-linux's ``setpriv
--pdeathsig TERM``, which execs it with the kernel's parent-death signal armed (a JVM cannot
arm it itself): it gets SIGTERM when the process that started it dies, even by SIGKILL.

The package ships the server jar and its dependencies under /usr/share/java; its own
scripts expect a systemd-less init that Debian does not provide, hence this module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from xdfs.common.process import ProcessError, ServerProcess
from xdfs.errors import ConfigError

#: The server jar (its manifest names its dependencies) and a logger binding for slf4j.
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
FOUR_LETTER_WORDS = "srvr,ruok,stat,mntr"
LOOPBACK = "127.0.0.1"
#: How often readiness polls ``srvr``.
_POLL_S = 0.1
#: Starts tried with fresh ports when a port was taken between choosing and binding it.
_START_ATTEMPTS = 3


def installed() -> bool:
    return ZOOKEEPER_JAR.is_file() and shutil.which("java") is not None


def require_installed() -> None:
    if not installed():
        raise ConfigError(
            f"ZooKeeper is not installed ({ZOOKEEPER_JAR} and java are needed): install "
            "Debian's zookeeper package (scripts/bootstrap.sh does, as root)"
        )


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on the loopback right now (held open together so no
    two are the same; another process may still take one before the server binds it)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind((LOOPBACK, 0))
            ports.append(sock.getsockname()[1])
        return ports


def four_letter_word(address: str, word: str, timeout_s: float = 2.0) -> str:
    """Send a four-letter word (``srvr``, ``ruok`` ...) and return the answer ('' when the
    server does not answer). Blocking."""
    host, _, port = address.rpartition(":")
    chunks = []
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.sendall(word.encode())
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        pass
    return b"".join(chunks).decode(errors="replace")


def server_mode(address: str, timeout_s: float = 2.0) -> str:
    """``standalone``, ``leader`` or ``follower``; '' while not serving (or not there)."""
    for line in four_letter_word(address, "srvr", timeout_s).splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return ""


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (Linux's /proc; True where
    that cannot be read, for the caller not to wait for nothing)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # (a thread that just ended)
        if stat.rpartition(")")[2].split()[0] not in ("T", "t"):
            return False
    return True


@dataclass(frozen=True)
class ServerPorts:
    client: int
    quorum: int = 0  # followers connect to the leader here (ensembles only)
    election: int = 0  # leader election (ensembles only)


class ZooKeeperServer:
    """One ZooKeeper server process (standalone, or member ``myid`` of an ensemble)."""

    def __init__(
        self,
        directory: Path,
        ports: ServerPorts,
        *,
        tick_s: float = 0.5,
        myid: int = 0,
        members: tuple[ServerPorts, ...] = (),
        heap_mb: int = 128,
        log_level: str = "warn",
        die_with_parent: bool = False,
    ) -> None:
        self.directory = directory
        self.die_with_parent = die_with_parent
        self.ports = ports
        self.tick_s = tick_s
        self.myid = myid
        self.members = members
        self.heap_mb = heap_mb
        self.log_level = log_level
        self.process: ServerProcess | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.ports.client}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "server not started"
        return self.process.pid

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    def config_text(self) -> str:
        lines = [
            f"tickTime={max(1, round(self.tick_s * 1000))}",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={self.directory / 'data'}",
            f"clientPort={self.ports.client}",
            f"clientPortAddress={LOOPBACK}",
            "maxClientCnxns=200",
            "autopurge.purgeInterval=0",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
        ]
        for index, member in enumerate(self.members, start=1):
            lines.append(f"server.{index}={LOOPBACK}:{member.quorum}:{member.election}")
        return "\n".join(lines) + "\n"

    def command(self) -> list[str]:
        prefix = []
        if self.die_with_parent and shutil.which("setpriv"):
            prefix = ["setpriv", "--pdeathsig", "TERM"]
        return [
            *prefix, "java", f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC",
            f"-Dorg.slf4j.simpleLogger.defaultLogLevel={self.log_level}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dzookeeper.4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}",
            MAIN_CLASS, str(self.directory / "zoo.cfg"),
        ]

    def launch(self) -> None:
        """Write the configuration and start the JVM (not waiting for it to serve)."""
        require_installed()
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        if self.members:
            (data / "myid").write_text(f"{self.myid}\n")
        (self.directory / "zoo.cfg").write_text(self.config_text())
        # An empty pattern is matched at once: readiness is the srvr poll, not a log line.
        self.process = ServerProcess(self.command(), log_path=self.log_path, ready_pattern="")
        self.process.start(deadline_s=1.0)

    def wait_serving(self, deadline_s: float) -> str:
        """Wait until ``srvr`` reports a mode; the mode. ProcessError (with the log) when
        the JVM exits or the deadline passes."""
        assert self.process is not None, "server not started"
        end = time.monotonic() + deadline_s
        while True:
            mode = server_mode(self.address, timeout_s=1.0)
            if mode:
                return mode
            if not self.process.alive():
                raise ProcessError(f"ZooKeeper {self.address} exited:\n{self._log_tail()}",
                                   self._log_tail())
            if time.monotonic() > end:
                raise ProcessError(
                    f"ZooKeeper {self.address} not serving within {deadline_s} s:\n"
                    f"{self._log_tail()}", self._log_tail())
            time.sleep(_POLL_S)

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_bytes()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        """SIGKILL (works on a paused server too) and reap."""
        if self.process is not None:
            self.process.kill()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``timeout_s``."""
        if self.process is not None and self.process.proc is not None:
            self.process.terminate(timeout_s)

    def pause(self, timeout_s: float = 5.0) -> None:
        """SIGSTOP, and return once every thread of the server is stopped: the signal
        takes effect asynchronously, and a JVM thread already running may still answer a
        request for a moment (seen: ``srvr`` answered right after the kill)."""
        os.kill(self.pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout_s
        while not _all_threads_stopped(self.pid) and time.monotonic() < deadline:
            time.sleep(0.005)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


class ZooKeeperEnsemble:
    """``size`` servers (1: standalone) under ``base_dir``; a context manager that kills
    every server it started, by pid."""

    def __init__(self, base_dir: Path, size: int = 3, *, tick_s: float = 0.5,
                 heap_mb: int = 128, log_level: str = "warn",
                 die_with_parent: bool = False) -> None:
        assert size >= 1
        self.die_with_parent = die_with_parent
        self.base_dir = base_dir
        self.size = size
        self.tick_s = tick_s
        self.heap_mb = heap_mb
        self.log_level = log_level
        self.servers: list[ZooKeeperServer] = []

    @property
    def hosts(self) -> str:
        """The connect string: ``127.0.0.1:P1,127.0.0.1:P2,...``."""
        return ",".join(server.address for server in self.servers)

    def start(self, deadline_s: float = 60.0) -> ZooKeeperEnsemble:
        for attempt in range(_START_ATTEMPTS):
            self.servers = self._new_servers()
            try:
                for server in self.servers:
                    server.launch()
                end = time.monotonic() + deadline_s
                for server in self.servers:
                    server.wait_serving(max(1.0, end - time.monotonic()))
                return self
            except ProcessError as exc:
                self.kill_all()
                # a port taken by someone else between choosing and binding it: new ports
                if attempt + 1 == _START_ATTEMPTS or "Address already in use" not in exc.output:
                    raise
        raise AssertionError("unreachable")

    def _new_servers(self) -> list[ZooKeeperServer]:
        if self.size == 1:
            ports: tuple[ServerPorts, ...] = (ServerPorts(free_ports(1)[0]),)
            members: tuple[ServerPorts, ...] = ()
        else:
            numbers = free_ports(3 * self.size)
            ports = tuple(ServerPorts(*numbers[3 * i:3 * i + 3]) for i in range(self.size))
            members = ports
        return [
            ZooKeeperServer(
                self.base_dir / f"zk{index}", port, tick_s=self.tick_s, myid=index,
                members=members, heap_mb=self.heap_mb, log_level=self.log_level,
                die_with_parent=self.die_with_parent,
            )
            for index, port in enumerate(ports, start=1)
        ]

    def restart(self, index: int, deadline_s: float = 60.0) -> None:
        """Start server ``index`` (0-based) again, same ports and data, after a kill."""
        server = self.servers[index]
        server.kill()
        server.launch()
        server.wait_serving(deadline_s)

    def leader(self) -> int:
        """Index of the server reporting ``leader`` (or ``standalone``); -1 if none."""
        for index, server in enumerate(self.servers):
            if server.alive() and server_mode(server.address) in ("leader", "standalone"):
                return index
        return -1

    def kill_all(self) -> None:
        for server in self.servers:
            server.kill()

    def __enter__(self) -> ZooKeeperEnsemble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()
